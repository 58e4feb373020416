"""The step log the steps test programs keep as their independent oracle: each step's
start and end, one JSON object per line, in the file named by argv[1]. Both clocks are
written: opscope keeps a recording on CLOCK_MONOTONIC (the recorder's clock) unless the
session also holds a framework's Unix-time trace (an XPlane, a Kineto trace), when it
puts everything on Unix time. Where the kernel keeps it, the time the thread waited for a
CPU so far (`run_delay`) is written at both ends too: on a loaded machine a boundary can
only be known to within the time the program's thread was not running."""

import json
import time


def run_delay():
    """Nanoseconds this thread has waited on a run queue, or None."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


class StepLog:
    def __init__(self, path):
        self.out = open(path, "w")
        self.start = None

    def begin(self):
        self.start = (time.monotonic_ns(), time.time_ns(), run_delay())

    def end(self):
        mono, unix, waited = time.monotonic_ns(), time.time_ns(), run_delay()
        step = {
            "monotonic": [self.start[0], mono],
            "unix": [self.start[1], unix],
        }
        if waited is not None and self.start[2] is not None:
            step["run_delay"] = [self.start[2], waited]
        self.out.write(json.dumps(step) + "\n")
        self.out.flush()
        self.start = None
