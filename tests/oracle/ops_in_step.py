"""Independent count of calls of one op inside one profiler step: complete events named
OP that start within the ProfilerStep#N event (start inclusive, end exclusive).

Usage: ops_in_step.py FILE N OP  (prints one JSON line)
"""
import gzip
import json
import sys

path, number, op = sys.argv[1], sys.argv[2], sys.argv[3]
opener = gzip.open if path.endswith(".gz") else open
with opener(path, "rt", encoding="utf-8") as f:
    doc = json.load(f)
events = [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if isinstance(e, dict) and e.get("ph") == "X"]
step = next(e for e in events if e.get("name") == "ProfilerStep#" + number)
start, end = step["ts"], step["ts"] + step["dur"]
calls = sum(1 for e in events if e.get("name") == op and start <= e["ts"] < end)
print(json.dumps({"path": path, "calls": calls}))
