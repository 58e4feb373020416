"""Reads one Chrome/Kineto trace file with HolisticTraceAnalysis (HTA) and prints, as
JSON, the number of events per category HTA parsed and the calls per `cpu_op` name.
Usage: hta_ops.py TRACE.json (copied into a directory of its own as rank0.json)."""
import json
import os
import shutil
import sys
import tempfile


def main(path):
    from hta.trace_analysis import TraceAnalysis

    directory = tempfile.mkdtemp()
    try:
        shutil.copy(path, os.path.join(directory, "rank0.json"))
        analysis = TraceAnalysis(trace_dir=directory)
        trace = analysis.t.get_trace(0)
        symbols = analysis.t.symbol_table.get_sym_table()
        names = trace["name"].map(lambda i: symbols[i])
        categories = trace["cat"].map(lambda i: symbols[i])
        ops = names[categories == "cpu_op"].value_counts()
        print(json.dumps({
            "categories": {k: int(v) for k, v in categories.value_counts().items()},
            "cpu_ops": {k: int(v) for k, v in ops.items()},
        }))
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main(sys.argv[1])
