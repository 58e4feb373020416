"""A busy main thread (`busy`) beside a thread that waits on a condition with a 0.5 ms
timeout, waking all the time: for the sampled stacks' idle test. Prints `ready`, runs
for 30 s at most."""

import threading
import time

cond = threading.Condition()


def waiter():
    with cond:
        while True:
            cond.wait(timeout=0.0005)


def busy():
    total = 0
    for i in range(20000):
        total += i
    return total


threading.Thread(target=waiter, daemon=True).start()
print("ready", flush=True)
end = time.time() + 30
while time.time() < end:
    busy()
