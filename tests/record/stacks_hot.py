"""A busy program with known hot functions, for the sampled stacks' tests: `heavy`
(about 60 % of the time), `light` (about 20 %) and `native` (a C call: hashing, about
20 %), called in turn from `<module>` in short calls; prints `ready` first. Given a
path, it times each function itself and, on SIGTERM, writes each one's share of the
time to that path (JSON) and exits: the program's own measure of its hot functions.
With STACKS_HOT_ROUNDS=N it waits for a line on stdin, runs N rounds and exits."""

import hashlib
import json
import os
import signal
import sys
import time

DATA = b"x" * 100_000


def heavy():
    total = 0
    for i in range(6000):
        total += i * i
    return total


def light():
    total = 0
    for i in range(3000):
        total += i
    return total


def native():
    return hashlib.sha256(DATA).digest()


spent = {"heavy": 0.0, "light": 0.0, "native": 0.0}
began = time.perf_counter()


def report(*_):
    if len(sys.argv) > 1:
        whole = time.perf_counter() - began
        with open(sys.argv[1], "w") as f:
            json.dump({k: 100 * v / whole for k, v in spent.items()}, f)
    sys.exit(0)


signal.signal(signal.SIGTERM, report)
print("ready", flush=True)
clock = time.perf_counter
# Given STACKS_HOT_ROUNDS, it waits for a line on stdin, runs that many rounds and
# exits: a fixed amount of work, for a test that starts it and then its sampler.
rounds = int(os.environ.get("STACKS_HOT_ROUNDS", "0"))
if rounds:
    sys.stdin.readline()
done = 0
while not rounds or done < rounds:
    for name, function in (("heavy", heavy), ("light", light), ("native", native)):
        t = clock()
        function()
        spent[name] += clock() - t
    done += 1
