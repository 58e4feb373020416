"""How fast opscope loads Kineto JSON, at several sizes: `opscope info --no-cache` (read,
parse, build and finish the model; no model cache) on synthetic Kineto traces of 0.25,
1 and 4 GB (bench/view.py's, made once into ~/.cache/opscope-bench), page cache warm.

Printed per size: wall seconds and GB/s, CPU seconds (user + system) per GB, peak RSS
and bytes per event; beside it, in the same run, the two references the issue sets:
reading the file (`dd if=FILE of=/dev/null bs=1M`: the speed of the disk, here the page
cache; `cat` to /dev/null may not read at all)
and, on the smallest trace, Python's `json.load` (what any Python reader pays first).
Ratios are opscope's time over the reference's.

    python3 bench/load.py [--sizes 0.25,1,4] [--repeat 3] [--opscope target/release/opscope]
                          [--against OTHER_BUILD]

With `--against`, another build of opscope runs in the same rounds, each right after
this one, and a second table gives per size the median ratio of the pairs (this build's
time over the other's): on a machine whose speed drifts from minute to minute, a ratio
taken pair by pair holds where two runs of this script one after the other do not.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import runinfo
from view import synthetic_trace

REPO = Path(__file__).resolve().parent.parent
GB = 1e9


def timed(argv: list, stdout=subprocess.DEVNULL) -> dict:
    """Runs argv; its wall and CPU seconds and peak RSS (from the kernel's accounting of
    the finished child)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    stderr = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if status != 0:
        sys.exit(f"{argv[0]} failed ({status}): {stderr.strip()[-400:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def median(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.25,1,4", help="trace sizes in GB (default 0.25,1,4)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per size (default 3)")
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    parser.add_argument("--no-json-load", action="store_true", help="skip the json.load reference")
    parser.add_argument("--against", type=Path, help="another opscope build, timed in the same rounds")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    traces = [synthetic_trace(args.shared, size) for size in sizes]
    run = runinfo.start(repeat=args.repeat, sizes=args.sizes)
    print("opscope: `opscope info --no-cache --format json TRACE`; read: `dd if=TRACE of=/dev/null bs=1M`; "
          f"medians of {args.repeat} rounds after a warm-up")
    print()
    print("| trace | events | opscope wall | GB/s | CPU s/GB | peak RSS | bytes/event | read wall | "
          "opscope/read | json.load wall | json.load/opscope |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for size, trace in zip(sizes, traces):
        nbytes = trace.stat().st_size
        info = json.loads(trace.with_suffix(".info").read_text())
        command = [str(args.opscope), "info", "--no-cache", "--format", "json", str(trace)]
        read = ["dd", f"if={trace}", "of=/dev/null", "bs=1M"]
        timed(read)  # warm the page cache
        report = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        model_bytes = json.loads(report).get("model_bytes")
        ours, reads, others = [], [], []
        other = [str(args.against)] + command[1:] if args.against else None
        if other:
            timed(other)  # its warm-up
        for _ in range(args.repeat):
            reads.append(timed(read))
            ours.append(timed(command))
            if other:
                others.append(timed(other))
        wall, cpu = median(ours, "wall"), median(ours, "cpu")
        row = {
            "size_gb": size, "bytes": nbytes, "events": info["events"], "opscope": ours, "read": reads,
            "model_bytes": model_bytes,
        }
        if other:
            row["against"] = others
        peer = ""
        if not args.no_json_load and size == min(sizes):
            code = f"import json; json.load(open({str(trace)!r}))"
            loads = [timed([sys.executable, "-c", code]) for _ in range(max(1, args.repeat - 1))]
            row["json_load"] = loads
            peer = f"{median(loads, 'wall'):.2f} s | {median(loads, 'wall') / wall:.1f}×"
        else:
            peer = " | "
        per_event = (model_bytes / info["events"]) if model_bytes else float("nan")
        print(f"| {nbytes / GB:.2f} GB | {info['events']:,} | {wall:.2f} s | {nbytes / GB / wall:.2f} | "
              f"{cpu / (nbytes / GB):.2f} | {median(ours, 'rss_mib'):.0f} MiB | {per_event:.0f} | "
              f"{median(reads, 'wall'):.2f} s | {wall / median(reads, 'wall'):.1f}× | {peer} |", flush=True)
        results.append(row)
    if args.against:
        print()
        print(f"against `{args.against}`, in the same rounds (ratios: this build over it, median of the pairs):")
        print()
        print("| trace | this build wall | other wall | wall ratio | CPU ratio |")
        print("|---|---|---|---|---|")
        for row in results:
            pairs = list(zip(row["opscope"], row["against"]))
            ratio = lambda key: statistics.median(a[key] / b[key] for a, b in pairs)
            print(f"| {row['bytes'] / GB:.2f} GB | {median(row['opscope'], 'wall'):.2f} s | "
                  f"{median(row['against'], 'wall'):.2f} s | {ratio('wall'):.3f} | {ratio('cpu'):.3f} |")
    runinfo.finish(run, results)


if __name__ == "__main__":
    main()
