"""Writes a copy of a Chrome/Kineto trace without its ProfilerStep#N markers, for the
period search to find the steps the markers mark. Numbers keep their text (times in µs
with nanosecond decimals would lose digits as floats).

Usage: strip_steps.py IN OUT  (OUT is written as plain JSON)
"""
import decimal
import gzip
import json
import sys

source, target = sys.argv[1], sys.argv[2]
opener = gzip.open if source.endswith(".gz") else open
with opener(source, "rt", encoding="utf-8") as f:
    doc = json.load(f, parse_float=decimal.Decimal)
events = doc["traceEvents"] if isinstance(doc, dict) else doc
kept = [
    e
    for e in events
    if not (isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#"))
]
if isinstance(doc, dict):
    doc["traceEvents"] = kept
else:
    doc = kept


def text(value):
    # A decimal goes out as a string with a mark, unquoted below.
    if isinstance(value, decimal.Decimal):
        return "\u0001" + str(value) + "\u0002"
    raise TypeError(type(value))


out = json.dumps(doc, default=text)
out = out.replace('"\\u0001', "").replace('\\u0002"', "")
with open(target, "w", encoding="utf-8") as f:
    f.write(out)
