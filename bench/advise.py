"""`opscope advise` against `opscope gpu` on the same inputs: the eight ranks made from
the shared two-rank Kineto traces and the 2 GB synthetic Kineto trace of
bench/view.py. advise runs gpu's analysis and some twenty rules besides; the target is
that it takes no longer than gpu does, loading included. Each pair runs in turn
(gpu, advise, gpu, advise, …), twice over: from the model cache (the analyses alone
and the cache's read) and with --no-cache (parsing included), with the median of each
and their ratio.

    python3 bench/advise.py [--repeat 5] [--opscope target/release/opscope] [--no-2g]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    parser.add_argument("--no-2g", action="store_true", help="leave out the 2 GB trace")
    args = parser.parse_args()
    run = runinfo.start(repeat=args.repeat)
    from sql import eight_ranks
    from view import two_gb_trace

    results = {}
    with tempfile.TemporaryDirectory(prefix="opscope-bench-advise-") as tmp:
        cache = Path(tmp) / "cache"
        env = dict(os.environ, OPSCOPE_CACHE_DIR=str(cache))
        inputs = [("8 ranks (trace_filter ×4)", eight_ranks(args.shared, Path(tmp) / "ranks"), args.repeat)]
        if not args.no_2g:
            big = two_gb_trace(args.shared)
            inputs.append((f"2 GB Kineto ({big.stat().st_size / 2**30:.1f} GiB)", big, max(2, args.repeat // 2)))
        print("| input | mode | gpu (median s) | advise (median s) | advise / gpu |")
        print("|---|---|---|---|---|")
        for name, path, repeat in inputs:
            subprocess.run([args.opscope, "info", "-q", path], check=True, capture_output=True, env=env)
            for mode, extra in (("from the model cache", []), ("parsing (--no-cache)", ["--no-cache"])):
                times = {"gpu": [], "advise": []}
                for _ in range(repeat):
                    for command in ("gpu", "advise"):
                        argv = [args.opscope, command, "-q", *extra, path]
                        began = time.perf_counter()
                        subprocess.run(argv, check=True, capture_output=True, env=env)
                        times[command].append(time.perf_counter() - began)
                g, a = statistics.median(times["gpu"]), statistics.median(times["advise"])
                print(f"| {name} | {mode} | {g:.3f} | {a:.3f} | {a / g:.2f} |")
                results[f"{name} {mode}"] = times
    runinfo.finish(run, results)


if __name__ == "__main__":
    main()
