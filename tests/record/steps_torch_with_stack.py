"""A small CNN trained under torch.profiler with `with_stack=True` (Python function
events around every op) and a schedule (so that its steps are marked ProfilerStep#N),
its trace exported to argv[2]; each step the profiler records, from one `prof.step()` to
the end of the optimizer step, goes to the step log (argv[1])."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from steps_log import StepLog

WAIT, WARMUP, ACTIVE = 1, 1, 8

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 16 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(64, 3, 32, 32)
    y = torch.randint(0, 10, (64,))
    log = StepLog(sys.argv[1])
    plan = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        schedule=plan,
        on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[2]),
    ) as prof:
        for i in range(WAIT + WARMUP + ACTIVE):
            recorded = i >= WAIT + WARMUP
            if recorded:
                log.begin()
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if recorded:
                log.end()
            prof.step()
