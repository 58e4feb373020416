"""What the program sees of opscope's start: when its first line runs, the injected
library is already loaded and recording (its file in the session exists), so the
program's first range does not pay for that. Prints one JSON line; then enters one
range, `first`, which the recording must hold (and nothing of opscope's own warm-up)."""

import json
import os

import torch

session = os.environ["OPSCOPE_SESSION_DIR"]
with open("/proc/self/maps") as maps:
    loaded = any("libopscope_record" in line for line in maps)
started = os.path.exists(os.path.join(session, "opscope-%d.pftrace" % os.getpid()))
print(json.dumps({"loaded": loaded, "started": started}))
with torch.autograd.profiler.record_function("first"):
    pass
