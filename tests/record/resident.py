"""Holds a known amount of memory, then frees it, and says what the kernel counted.

Prints one JSON line: the pid, the bytes held, and this process's VmHWM (peak resident
set, from /proc/self/status) read while the block was still held, and VmRSS after it
was freed: the oracles for `opscope memory` on the recorded session.
"""

import json
import os
import sys
import time

HELD = int(sys.argv[1]) if len(sys.argv) > 1 else 200 << 20


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


time.sleep(0.3)  # a baseline before the block
block = bytearray(b"\x01") * HELD  # written, so every page is resident
time.sleep(0.6)  # held across many samples
peak = status_bytes("VmHWM")
del block  # a block this size is its own mapping: freeing it unmaps it
time.sleep(0.6)
print(json.dumps({"pid": os.getpid(), "held": HELD, "vmhwm": peak, "rss_after": status_bytes("VmRSS")}))
