"""A short busy program for the sampled stacks' tests: `spin` runs for half a second,
then it exits."""

import time


def spin():
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        pass


spin()
