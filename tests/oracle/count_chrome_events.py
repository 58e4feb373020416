#!/usr/bin/env python3
"""Independent event counts for Chrome trace JSON files, made with Python's json module.

opscope's importer is checked against these numbers. The rules follow the Trace Event
Format document, not opscope's code:
  slices          X, plus every B, b (and legacy S) and N: each opens one span that an
                  E/e/D closes (or the end of the trace does).
  instants        i, I, R, P, n (and legacy T, p), and O object snapshots.
  counter_samples one per numeric arg of each C event (each arg is a series).
  flows           links of flow chains: events grouped by (cat, id or id2), in time
                  order; s starts a chain, each later t or f adds one link, f ends it.
Prints one JSON object per file: {"path": ..., "slices": ..., ...}.
"""
import gzip
import json
import sys
from collections import defaultdict

SLICE_PHASES = {"X", "B", "b", "S", "N"}
INSTANT_PHASES = {"i", "I", "R", "P", "n", "T", "p", "O"}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f)
    return doc.get("traceEvents", []) if isinstance(doc, dict) else doc


def flow_key(ev):
    if "id" in ev:
        return (ev.get("cat"), str(ev["id"]), None)
    id2 = ev.get("id2") or {}
    if "local" in id2:
        return (ev.get("cat"), str(id2["local"]), ev.get("pid"))
    return (ev.get("cat"), str(id2.get("global")), None)


def count(path):
    events = [e for e in load(path) if isinstance(e, dict)]
    slices = sum(1 for e in events if e.get("ph") in SLICE_PHASES)
    instants = sum(1 for e in events if e.get("ph") in INSTANT_PHASES)
    samples = 0
    for e in events:
        if e.get("ph") == "C" and isinstance(e.get("args"), dict):
            samples += sum(
                1
                for v in e["args"].values()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            )
    chains = defaultdict(list)
    for index, e in enumerate(events):
        if e.get("ph") in ("s", "t", "f"):
            chains[flow_key(e)].append((float(e["ts"]), index, e["ph"]))
    flows = 0
    for steps in chains.values():
        open_chain = False
        for _, _, ph in sorted(steps):
            if ph == "s":
                open_chain = True
            elif open_chain:
                flows += 1
                if ph == "f":
                    open_chain = False
    return {
        "path": path,
        "slices": slices,
        "instants": instants,
        "counter_samples": samples,
        "flows": flows,
    }


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(count(p)))
