"""Independent summary of PyTorch [memory] events per device: allocated and freed bytes,
the peak of bytes in use (the events' own "Total Allocated" when every event has it,
else a running sum from zero), and the ops that allocate most, each allocation charged
to the innermost host op (cpu_op, user_annotation, runtime or driver call) around it on
its thread.

Usage: memory_events.py FILE...  (prints one JSON line per file)
"""
import bisect
import decimal
import gzip
import json
import sys

OPS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "cuda_sync", "Operator", "Runtime"}


def thread(e):
    """Kineto writes one thread's id as a number in some events and a digit string in others."""
    tid = e.get("tid")
    return (e.get("pid"), int(tid) if isinstance(tid, str) and tid.strip().isdigit() else tid)


def ns(value):
    return int((decimal.Decimal(str(value)) * 1000).to_integral_value(rounding=decimal.ROUND_HALF_UP))


for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ops = {}
    memory = []
    for e in events:
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "X" and e.get("cat") in OPS:
            start = ns(e["ts"])
            ops.setdefault(thread(e), []).append((start, start + ns(e["dur"]), e["name"]))
        elif e.get("name") == "[memory]" and isinstance(e.get("args"), dict) and "Bytes" in e["args"]:
            memory.append(e)
    # Sorted by start, and among equal starts the shortest last: scanning back from the
    # last op starting at or before a time, the first that still runs is the innermost.
    starts = {}
    for key, lst in ops.items():
        lst.sort(key=lambda o: (o[0], -o[1]))
        starts[key] = [o[0] for o in lst]

    def innermost(key, ts):
        lst = ops.get(key, [])
        k = bisect.bisect_right(starts.get(key, []), ts) - 1
        while k >= 0:
            if lst[k][1] >= ts:
                return lst[k][2]
            k -= 1
        return "(outside any op)"

    devices = {}
    for e in sorted(memory, key=lambda e: ns(e["ts"])):
        a = e["args"]
        key = "%s/%s" % (a.get("Device Type", 0), a.get("Device Id", -1))
        d = devices.setdefault(key, {"allocated": 0, "freed": 0, "running": 0, "peak": None,
                                     "totals": True, "peak_total": None, "ops": {}})
        b = int(a["Bytes"])
        d["running"] += b
        d["peak"] = d["running"] if d["peak"] is None else max(d["peak"], d["running"])
        if "Total Allocated" in a:
            t = int(a["Total Allocated"])
            d["peak_total"] = t if d["peak_total"] is None else max(d["peak_total"], t)
        else:
            d["totals"] = False
        if b > 0:
            d["allocated"] += b
            ts = ns(e["ts"])
            op = innermost(thread(e), ts)
            entry = d["ops"].setdefault(op, [0, 0])
            entry[0] += b
            entry[1] += 1
        else:
            d["freed"] -= b
    out = {}
    for key, d in devices.items():
        top = sorted(d["ops"].items(), key=lambda kv: (-kv[1][0], kv[0]))[:5]
        out[key] = {
            "allocated": d["allocated"],
            "freed": d["freed"],
            "peak": d["peak_total"] if d["totals"] else d["peak"],
            "top_ops": [[name, v[0], v[1]] for name, v in top],
        }
    print(json.dumps({"path": path, "devices": out}))
