"""A `torch.compile`d training loop for `opscope advise`'s graph_breaks and recompile
rules, written fresh: a small MLP on CPU (backend aot_eager, which needs no C
compiler), 8 steps, the last 5 under the program's own `torch.profiler` (with Python
stacks), its Kineto trace written to OUT.

    python advise_torch_compile.py breaks|shapes|clean OUT.json

`breaks`: the forward branches on a tensor's value and reads a scalar with `.item()`,
two graph breaks Dynamo resumes after. `shapes`: no break, but the batch shrinks in the
second profiled step, so Dynamo compiles the forward again there. `clean`: neither.
Beside OUT, OUT.explain.json holds what `torch._dynamo.explain` says of the forward
(the graph and break counts, and each break's line): the independent count.
"""

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule


class Net(torch.nn.Module):
    def __init__(self, breaks):
        super().__init__()
        self.breaks = breaks
        self.a = torch.nn.Linear(128, 256)
        self.b = torch.nn.Linear(256, 256)
        self.c = torch.nn.Linear(256, 10)

    def forward(self, x):
        y = torch.relu(self.a(x))
        if self.breaks and y.mean() > 0:  # data-dependent branch: a graph break
            y = y * 2
        y = torch.relu(self.b(y))
        if self.breaks:
            scale = y.abs().max().item()  # a scalar read back to Python: a break
            y = y / (scale + 1.0)
        return self.c(y)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = Net(mode == "breaks")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, foreach=True)
    compiled = torch.compile(net, backend="aot_eager")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(batch):
        x = torch.randn(batch, 128)
        target = torch.randint(0, 10, (batch,))
        loss = loss_fn(compiled(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sched = schedule(wait=1, warmup=2, active=5)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, with_stack=True) as prof:
        for i in range(8):
            step(48 if mode == "shapes" and i >= 4 else 64)
            prof.step()
    prof.export_chrome_trace(out)

    explained = torch._dynamo.explain(Net(mode == "breaks"))(torch.randn(64, 128))
    with open(out + ".explain.json", "w") as f:
        json.dump({
            "graph_count": explained.graph_count,
            "graph_break_count": explained.graph_break_count,
            "break_lines": [r.user_stack[-1].lineno for r in explained.break_reasons
                            if r.user_stack],
        }, f)


if __name__ == "__main__":
    main()
