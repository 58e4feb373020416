"""Independent totals for a flame graph of a Kineto trace (argv[1], .json or .json.gz):
the CPU time of host ops, as the length of the union of each host thread's op, runtime
and Python-frame intervals (nested slices counted once), and the device time, as the
sum of kernel, copy and set durations. Prints JSON, times in ns."""

import gzip
import json
import sys
from collections import defaultdict

HOST = {"cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"}
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}

path = sys.argv[1]
with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
    events = json.load(f)
events = events["traceEvents"] if isinstance(events, dict) else events

spans = defaultdict(list)
device_ns = 0
for e in events:
    if e.get("ph") != "X":
        continue
    # Kineto's µs with fractions, to the nanosecond as readers round them.
    start = round(float(e["ts"]) * 1000)
    dur = round(float(e.get("dur", 0)) * 1000)
    if e.get("cat") in HOST:
        spans[(str(e["pid"]), str(e["tid"]))].append((start, start + dur))
    elif e.get("cat") in DEVICE:
        device_ns += dur

cpu_ns = 0
for intervals in spans.values():
    intervals.sort()
    end = None
    for a, b in intervals:
        if end is None or a >= end:
            cpu_ns += b - a
            end = b
        elif b > end:
            cpu_ns += b - end
            end = b
print(json.dumps({"cpu_ns": cpu_ns, "device_ns": device_ns, "threads": len(spans)}))
