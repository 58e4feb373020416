"""TensorFlow's own record of a Keras `fit`'s steps, read independently of opscope: every
XPlane under SESSION (as `opscope record` keeps the profile) is converted by xprof's
trace viewer (`xspace_to_tool_data(..., "trace_viewer", ...)`), and each outermost
call of Keras's train function (`multi_step_on_iterator`, `one_step_on_iterator`,
`train_function`: Keras 3's and 2's names) is a step, with its start and duration in
ns on the trace viewer's clock (from the profile's start).

Usage: keras_steps.py SESSION  (prints one JSON document: {"steps": [{start_ns, dur_ns}]})
"""
import decimal
import json
import pathlib
import sys

from xprof.convert import raw_to_tool_data

TRAIN_FUNCTIONS = {"multi_step_on_iterator", "one_step_on_iterator", "train_function"}


def ns(value):
    return int((decimal.Decimal(value) * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def main():
    calls = []
    for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.xplane.pb")):
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "trace_viewer", {"use_saved_result": False})
        if isinstance(data, bytes):
            data = data.decode()
        events = json.loads(data, parse_float=decimal.Decimal)["traceEvents"]
        calls += [
            (e["pid"], e["tid"], ns(e["ts"]), ns(e["dur"]))
            for e in events
            if e.get("ph") == "X" and e.get("name") in TRAIN_FUNCTIONS
        ]
    # Outermost only: a call inside another on its thread is the same step.
    outer = [
        c
        for c in calls
        if not any(
            o is not c and o[:2] == c[:2] and o[2] <= c[2] and c[2] + c[3] <= o[2] + o[3] and o[3] > c[3]
            for o in calls
        )
    ]
    outer.sort(key=lambda c: c[2])
    print(json.dumps({"steps": [{"start_ns": c[2], "dur_ns": c[3]} for c in outer]}))


main()
