"""Independent list of the profiler steps of Chrome/Kineto traces: every complete event
whose name starts with "ProfilerStep#", with its start and duration in ns (from the
decimal µs text, rounded half away from zero as opscope does).

Usage: list_steps.py FILE...  (prints one JSON line per file)
"""
import decimal
import gzip
import json
import sys


def ns(value):
    d = decimal.Decimal(str(value)) * 1000
    return int(d.to_integral_value(rounding=decimal.ROUND_HALF_UP))


for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = sorted(
        (ns(e["ts"]), ns(e["dur"]), e["name"])
        for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    print(json.dumps({"path": path, "steps": [{"name": n, "start_ns": t, "dur_ns": d} for t, d, n in steps]}))
