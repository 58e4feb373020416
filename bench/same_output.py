#!/usr/bin/env python3
"""Checks that two opscope executables print the same bytes for every report command
on a set of real traces (a refactor's check: `--format json` and `csv`, and text).

    python3 bench/same_output.py BEFORE AFTER [--shared ../shared]

BEFORE is typically the previous commit's build (`git worktree add ../before HEAD~1 &&
cargo build --release --manifest-path ../before/Cargo.toml`, then
../before/target/release/opscope). Exits 1 and names
each command and trace whose output differs."""

import argparse
import subprocess
import sys
from pathlib import Path

TRACES = [
    "traces/kineto/hta/trace_filter",
    "traces/kineto/kineto-tb_plugin/resnet50_num_workers_4",
    "traces/kineto/hta/amd_trace",
    "traces/kineto/hta/mtia_trace_single_rank",
    "traces/kineto/hta/memory_analysis",
    "traces/kineto/hta/cpu_only",
    "traces/kineto/generated-here/torch2.15-cpu-kineto",
    "traces/tf-timeline/dorsal/trace_CNNGender_tf_All-Series.json",
    "traces/tf-timeline/xprof-demo/trace.json",
    "traces/xplane/GPU-multi-worker",
    "traces/xplane/generated-here/keras-cpu-tf2.21",
    "traces/nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "traces/ctf/tracecompass/context-switches",
]

COMMANDS = [
    ["info"], ["gpu"], ["steps"], ["memory"],
    ["stats", "op"], ["stats", "scope"], ["stats", "code"], ["stats", "kernel"],
]
FORMATS = {"info": ["json", "text"], "gpu": ["json", "text"], "steps": ["json", "text"],
           "memory": ["json", "text"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args()
    differ = checked = failed = 0
    for trace in TRACES:
        path = args.shared / trace
        if not path.exists():
            print(f"missing: {path}", file=sys.stderr)
            continue
        for command in COMMANDS:
            for fmt in FORMATS.get(command[0], ["json", "csv", "text"]):
                argv = command + ["--no-cache", "--format", fmt, "--wide", str(path)]
                outs = [subprocess.run([str(exe)] + argv, capture_output=True) for exe in (args.before, args.after)]
                checked += 1
                failed += outs[1].returncode != 0
                if (outs[0].stdout, outs[0].returncode) != (outs[1].stdout, outs[1].returncode) or (
                        outs[0].returncode and outs[0].stderr != outs[1].stderr):
                    differ += 1
                    print(f"differs: opscope {' '.join(argv)}")
    print(f"{checked} outputs compared ({failed} of them errors, alike), {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
