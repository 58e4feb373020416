"""Loads a run directory with TensorBoard's PyTorch plugin and prints, as JSON, per
worker: its operator table (name → calls) and the overview's total time."""
import json
import sys


def main(run_dir):
    from torch_tb_profiler.profiler.loader import RunLoader
    import torch_tb_profiler.io as io
    run = RunLoader("run", run_dir, io.Cache()).load()
    out = {}
    for profile in run.get_profiles():
        table = profile.operation_table_by_name
        rows = table["data"] if isinstance(table, dict) else table
        overview = profile.overview or {}
        out[profile.worker] = {
            "ops": {r["name"]: r["calls"] for r in rows},
            "overview": overview.get("performance"),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
