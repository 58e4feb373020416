"""Two ranks (torchrun, gloo) for `opscope advise`'s step_drift rule, written fresh:
each trains a small MLP for 10 steps under its own `torch.profiler` (step markers
from its schedule), rank 1 spending 100 ms more per step on its host. Each rank writes
OUT_DIR/rank-N.json (Kineto, with its rank) and OUT_DIR/rank-N.starts (the wall-clock
start of each profiled step, in ns, one per line: the oracle of the drift).

    torchrun --standalone --nproc-per-node 2 advise_ranks_drift.py lockstep|drift OUT_DIR

`lockstep`: the ranks all-reduce their gradients every step, so rank 0 waits for rank 1
and both start each step together. `drift`: they all-reduce only after the loop, so
rank 1 falls 100 ms further behind every step.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 10
EXTRA_S = 0.1


def main():
    mode, out_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    starts = []
    os.makedirs(out_dir, exist_ok=True)
    trace = os.path.join(out_dir, f"rank-{rank}.json")
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=STEPS - 1),
                 on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
        for step in range(STEPS):
            starts.append(time.time_ns())
            loss = model(torch.randn(32, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if rank == 1:
                time.sleep(EXTRA_S)
            if mode == "lockstep":
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            opt.step()
            prof.step()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    with open(os.path.join(out_dir, f"rank-{rank}.starts"), "w") as f:
        # The warmup step is not profiled.
        f.write("".join(f"{t}\n" for t in starts[1:]))
    dist.destroy_process_group()
    # torch 2.15's teardown sometimes aborts ("terminate called without an active
    # exception") once the process group is gone; the trace and the log are written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
