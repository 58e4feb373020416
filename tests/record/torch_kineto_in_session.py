"""Three blocks of the same PyTorch work, one after the other: under emit_itt (ops the
ITT collector records), under torch.profiler writing its Kineto JSON into the session
directory, and under emit_itt again. Run with `opscope record --no-python` (the script
turns the modes on itself); on one time line the profiler's ops fall between the two
ITT blocks."""

import os

import torch
from torch.profiler import ProfilerActivity, profile


def work():
    x = torch.randn(64, 64)
    for _ in range(20):
        x = torch.tanh(x @ x)


with torch.autograd.profiler.emit_itt():
    work()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    work()
prof.export_chrome_trace(os.path.join(os.environ["OPSCOPE_SESSION_DIR"], "kineto.pt.trace.json"))
with torch.autograd.profiler.emit_itt():
    work()
