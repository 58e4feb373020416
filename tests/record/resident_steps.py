"""Grows by a known block in each of three steps (NVTX ranges `train_step_N`), and
prints as JSON its own resident set (VmRSS, from /proc/self/status) at the start and
the end of each step: the oracle for the growth per step `opscope memory` reports."""

import json
import time

import nvtx

BLOCK = 64 << 20


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise KeyError("VmRSS")


held = []
steps = []
time.sleep(0.2)
for i in range(3):
    with nvtx.annotate(f"train_step_{i}"):
        start = rss()
        # Resident memory stays put for a while after each boundary, so that the
        # sampler's last sample before it shows what was resident at it.
        time.sleep(0.15)
        held.append(bytearray(b"\x01") * BLOCK)
        time.sleep(0.25)
        steps.append({"start": start, "end": rss()})
print(json.dumps({"block": BLOCK, "steps": steps}))
