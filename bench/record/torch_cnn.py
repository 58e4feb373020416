"""The PyTorch CNN the step benchmarks time (torch_steps.py, torch_interleaved.py): two
conv layers and two dense ones on 64 random 32x32x3 images, one SGD step at a time, and
the modes a step may run in."""

import contextlib
import ctypes
import resource
import time

import torch
import torch.nn as nn

MODES = ["plain", "itt", "profile"]


def make_step(threads):
    """One training step of a freshly seeded model, on `threads` compute threads."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 6 * 6, 128), nn.ReLU(), nn.Linear(128, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 3, 32, 32)
    y = torch.randint(0, 10, (64,))

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def timed(step):
    """Runs `step` once: its milliseconds and the process's minor page faults meanwhile."""
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    step()
    ms = (time.perf_counter() - start) * 1e3
    return ms, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before


def context(mode):
    """plain: nothing; itt: PyTorch's ITT mode (emit_itt, what `opscope record` turns
    on); profile: torch.profiler with CPU activities."""
    if mode == "profile":
        from torch.profiler import ProfilerActivity, profile

        return profile(activities=[ProfilerActivity.CPU])
    if mode == "itt":
        return torch.autograd.profiler.emit_itt()
    return contextlib.nullcontext()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def heap():
    """glibc's main heap now: (bytes it holds from the kernel, bytes the program has in
    use in it). The first shrinks when free() gives the heap's top back (a trim)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.arena, info.uordblks
