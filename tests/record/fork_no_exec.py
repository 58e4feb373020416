"""Forks without exec; parent and child each push their own NVTX ranges, then the
child exits at once with os._exit (no atexit handlers, as multiprocessing's fork
workers do: the bootstrap's os._exit hook must flush). Writes both pids to argv[1]."""

import json
import os
import sys

import nvtx

with nvtx.annotate("before fork"):
    pass
pid = os.fork()
if pid == 0:
    for i in range(3):
        with nvtx.annotate(f"child {i}"):
            pass
    os._exit(0)
for i in range(2):
    with nvtx.annotate(f"parent {i}"):
        pass
_, status = os.waitpid(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"parent": os.getpid(), "child": pid, "child_status": status}, out)
