"""A parent with two worker processes (multiprocessing.Pool), for the sampled stacks'
tests: the workers spin in `work` for a minute, the parent waits for them; prints
`ready` (and the workers' pids) once both have started."""

import multiprocessing
import os
import time


def work(started):
    started.put(os.getpid())
    began = time.time()
    while time.time() - began < 60:
        sum(range(1000))


if __name__ == "__main__":
    manager = multiprocessing.Manager()
    started = manager.Queue()
    with multiprocessing.Pool(2) as pool:
        result = pool.map_async(work, [started, started])
        pids = sorted(started.get() for _ in range(2))
        print("ready", *pids, flush=True)
        result.wait()
