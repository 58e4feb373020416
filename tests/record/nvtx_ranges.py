"""Pushes NVTX ranges, marks and start/end ranges through the `nvtx` package, in named
domains and the default one, with colours, categories and payloads, from two threads,
and writes what it pushed (its own account) as JSON to argv[1]."""

import json
import sys
import threading

import nvtx

pushed = {"slices": [], "instants": [], "ranges": []}


def expect(kind, domain, message, color=None, category=None, payload=None):
    args = {}
    if payload is not None:
        args["payload"] = payload
    if color is not None:
        args["color"] = color
    if category is not None:
        args["category"] = category
    where = threading.get_native_id()
    pushed[kind].append([where, "nvtx/" + domain if domain else "nvtx", message, args])


def work(tag):
    for i in range(5):
        with nvtx.annotate(f"{tag} outer {i}", color=0xFF00FF00, domain="train", category="io", payload=i):
            expect("slices", "train", f"{tag} outer {i}", 0xFF00FF00, "io", i)
            nvtx.mark(f"{tag} mark {i}", color=0xFF0000FF, domain="train", payload=-i - 1)
            expect("instants", "train", f"{tag} mark {i}", 0xFF0000FF, None, -i - 1)
            nvtx.push_range(f"{tag} inner {i}", color=0xFFFF0000, payload=i + 0.5)
            nvtx.pop_range()
            expect("slices", None, f"{tag} inner {i}", 0xFFFF0000, None, i + 0.5)


worker = threading.Thread(target=work, args=("worker",))
worker.start()
work("main")
worker.join()

# A start/end range may end on another thread.
handle = nvtx.start_range("handoff", color=0xFF101010, domain="async")
ender = threading.Thread(target=nvtx.end_range, args=(handle,))
ender.start()
ender.join()
pushed["ranges"].append(["nvtx/async", "nvtx/async", "handoff", {"color": 0xFF101010}])

with open(sys.argv[1], "w") as out:
    json.dump(pushed, out)
