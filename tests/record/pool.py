"""A multiprocessing pool of 2 workers (fork and spawn start methods, argv[2]); each task
pushes an NVTX range. Writes the pids that ran tasks, with their task count, to argv[1]."""

import json
import multiprocessing as mp
import os
import sys
import time

import nvtx


def task(i):
    with nvtx.annotate(f"task {i}", domain="pool"):
        time.sleep(0.05)
    return os.getpid()


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[2])
    with ctx.Pool(2) as pool:
        pids = pool.map(task, range(8), chunksize=1)
    counts = {}
    for pid in pids:
        counts[str(pid)] = counts.get(str(pid), 0) + 1
    with open(sys.argv[1], "w") as out:
        json.dump(counts, out)
