"""The step log the steps test programs keep as their independent oracle: each step's
start and end, one JSON object per line, in the file named by argv[1]. Both clocks are
written: opscope keeps a recording on CLOCK_MONOTONIC (the recorder's clock) unless the
session also holds a framework's Unix-time trace (an XPlane, a Kineto trace), when it
puts everything on Unix time."""

import json
import time


class StepLog:
    def __init__(self, path):
        self.out = open(path, "w")
        self.start = None

    def begin(self):
        self.start = (time.monotonic_ns(), time.time_ns())

    def end(self):
        mono, unix = time.monotonic_ns(), time.time_ns()
        step = {
            "monotonic": [self.start[0], mono],
            "unix": [self.start[1], unix],
        }
        self.out.write(json.dumps(step) + "\n")
        self.out.flush()
        self.start = None
