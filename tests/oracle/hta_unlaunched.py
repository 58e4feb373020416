"""HolisticTraceAnalysis (HTA) as the oracle of `gpu --exclude-last-step` on a trace whose
first kernels were launched before recording began: writes a copy of a Kineto trace
(IN) without the runtime calls (and their flows) that launched its first N kernels, as
a profiler that started mid-launch leaves it, to OUT, then prints HTA's temporal
breakdown of OUT (its default: the last profiler step left out, and only kernels whose
launch is in the trace) as one JSON line, times in µs.

Usage: hta_unlaunched.py IN OUT N
"""
import gzip
import json
import os
import shutil
import sys
import tempfile


def strip(source, target, n):
    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat", "").lower() == "kernel"),
                     key=lambda e: e["ts"])
    dropped = {e["args"]["correlation"] for e in kernels[:n] if "correlation" in e.get("args", {})}

    def launch(e):
        return e.get("cat", "").lower() in ("cuda_runtime", "runtime") and e.get("args", {}).get("correlation") in dropped

    def flow(e):
        return e.get("ph") in ("s", "f") and e.get("id") in dropped

    doc["traceEvents"] = [e for e in events if not launch(e) and not flow(e)]
    with open(target, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return len(dropped)


def main():
    source, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dropped = strip(source, target, n)
    from hta.trace_analysis import TraceAnalysis

    directory = tempfile.mkdtemp()
    try:
        shutil.copy(target, os.path.join(directory, "rank0.json"))
        frame = TraceAnalysis(trace_dir=directory).get_temporal_breakdown(visualize=False)
        row = frame.iloc[0]
        print(json.dumps({
            "launches_dropped": dropped,
            "idle_us": float(row["idle_time(us)"]),
            "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]),
            "kernel_us": float(row["kernel_time(us)"]),
        }))
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
