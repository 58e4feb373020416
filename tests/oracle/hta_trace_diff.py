"""HTA's TraceDiff on two trace folders: for each device type (cpu, gpu, all),
compare_traces's counts and total durations (µs) per name, and ops_diff's names per
category. Usage: hta_trace_diff.py CONTROL_DIR TEST_DIR [ITERATION]; JSON on stdout."""

import json
import sys

from hta_quiet import stdout_to_stderr

with stdout_to_stderr():
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    control = LabeledTrace(label="control", trace_dir=sys.argv[1])
    test = LabeledTrace(label="test", trace_dir=sys.argv[2])
    iteration = int(sys.argv[3]) if len(sys.argv) > 3 else None
    result = {}
    for name, device in [("cpu", DeviceType.CPU), ("gpu", DeviceType.GPU), ("all", DeviceType.ALL)]:
        df = TraceDiff.compare_traces(
            control, test, control_iteration=iteration, test_iteration=iteration, device_type=device
        )
        rows = {
            str(n): [
                int(r["control_counts"]),
                int(r["test_counts"]),
                float(r["control_total_duration"]),
                float(r["test_total_duration"]),
            ]
            for n, r in df.iterrows()
        }
        ops = TraceDiff.ops_diff(
            control, test, control_iteration=iteration, test_iteration=iteration, device_type=device
        )
        result[name] = {"rows": rows, "ops_diff": {k: sorted(map(str, v)) for k, v in ops.items()}}
print(json.dumps(result))
