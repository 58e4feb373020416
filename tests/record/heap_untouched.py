"""Checks that the collector takes nothing from the program's malloc heap while it
records: emits tasks with hundreds of names it has not seen before (new string handles,
new per-thread name ids) and compares glibc's count of bytes in use (mallinfo2's
uordblks) before and after. Prints {"before": B, "after": A, "tasks": N} as JSON.

Everything Python needs is made before the first count, so that the interpreter's own
allocations (small objects come from its own arenas, not from malloc) stay nearly put;
a few KB of them still come and go from run to run.
"""

import ctypes
import json

import ittapi


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2


def in_use():
    return libc.mallinfo2().uordblks


def emit(domain, names, handles):
    for i, name in enumerate(names):
        handles[i] = ittapi.string_handle(name)
        with ittapi.task(name, domain=domain):
            pass


domain = ittapi.domain("opscope.heap")
# A first round, with other names, brings the collector's and Python's one-time state
# into being (the collector's thread buffer, caches' first blocks, code paths).
warm = [f"warm-up task {i}" for i in range(2000)]
names = [f"measured task {i}" for i in range(2000)]
handles = [None] * len(names)
emit(domain, warm, handles)
handles = [None] * len(names)
before = in_use()
emit(domain, names, handles)
after = in_use()
print(json.dumps({"before": before, "after": after, "tasks": len(names)}))
