"""A program whose threads wait in known places, for the stack readers' tests: the main
thread in `threading.Event.wait` under `outer` → `waiter`, a worker thread in
`time.sleep` under `Worker.run` → `middle` → `leaf_sleeper`. Prints `ready` once both
are on their way there, then waits until killed."""

import threading
import time

started = threading.Event()


def leaf_sleeper():
    started.set()
    time.sleep(3600)


def middle():
    leaf_sleeper()


class Worker:
    def run(self):
        middle()


def waiter(event):
    event.wait()


def outer():
    worker = threading.Thread(target=Worker().run, name="worker", daemon=True)
    worker.start()
    started.wait()
    print("ready", flush=True)
    waiter(threading.Event())


outer()
