"""A PyTorch program whose steps are ranges of its own: an MLP regression in batches
of 256, each pass over the data inside `record_function("train_step_N")`, a helper that
runs the model once before the loop, and the program's own torch.profiler (no schedule)
started by hand before step 6 and stopped after step 9, its trace exported to argv[2].
Each step's range goes to the step log (argv[1]). opscope's emit_itt stands aside while
the profiler records: all 14 steps must stay, 6 to 9 called aside."""

import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from steps_log import StepLog

STEPS = 14
PROFILED = range(6, 10)


def data(n=2048):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 64, generator=g)
    return x, x @ torch.randn(64, 1, generator=g)


def warm(model):
    with torch.no_grad():
        model(torch.randn(8, 64))


def main():
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = data()
    warm(model)
    log = StepLog(sys.argv[1])
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    for step in range(STEPS):
        if step == PROFILED.start:
            prof.start()
        with record_function("train_step_%d" % step):
            log.begin()
            for b in range(0, len(x), 256):
                loss = nn.functional.mse_loss(model(x[b : b + 256]), y[b : b + 256])
                opt.zero_grad()
                loss.backward()
                opt.step()
            log.end()
        if step == PROFILED.stop - 1:
            prof.stop()
            prof.export_chrome_trace(sys.argv[2])


if __name__ == "__main__":
    main()
