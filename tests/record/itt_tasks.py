"""Emits ITT tasks, overlapped tasks and events through the `ittapi` package, from two
named threads, with a paused stretch in between; writes what it emitted (its own
account: per "category|name|thread name" counts) as JSON to argv[1]."""

import json
import sys
import threading

import ittapi

counts = {}


def count(category, name):
    key = f"{category}|{name}|{threading.current_thread().name}"
    counts[key] = counts.get(key, 0) + 1


def tasks(domain_name, names, repeat):
    domain = ittapi.domain(domain_name)
    for _ in range(repeat):
        for name in names:
            with ittapi.task(name, domain=domain):
                pass
            count(f"itt/{domain_name}", name)


def worker():
    ittapi.thread_set_name("itt-worker")
    threading.current_thread().name = "itt-worker"
    tasks("other", ["save"], 7)


ittapi.thread_set_name("itt-main")
threading.current_thread().name = "itt-main"
tasks("opscope.test", ["load", "compute"], 7)
thread = threading.Thread(target=worker)
thread.start()
thread.join()

# Overlapped tasks: may end in any order.
domain = ittapi.domain("overlap")
first = ittapi.overlapped_task("first", domain=domain)
second = ittapi.overlapped_task("second", domain=domain)
first.begin()
second.begin()
first.end()
second.end()
counts["itt/overlap|first|"] = 1
counts["itt/overlap|second|"] = 1

# ITT events.
with ittapi.event("custom event"):
    pass
count("itt/events", "custom event")

# Nothing is recorded while collection is paused.
ittapi.pause()
tasks("paused", ["hidden"], 3)
ittapi.resume()
for key in [k for k in counts if k.startswith("itt/paused|")]:
    del counts[key]
tasks("opscope.test", ["after resume"], 1)

with open(sys.argv[1], "w") as out:
    json.dump(counts, out)
