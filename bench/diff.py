"""`opscope diff` of two large traces against loading them: is a diff bounded by the
loads (the issue's bar), or does the comparison itself cost more?

Both sides are the synthetic Kineto trace bench/view.py makes (kineto/hta/
ns_resolution_trace's events replicated to --size-gb of JSON, ProfilerStep markers
included), read twice: A and B are two loads of one file, so the analysis does all of
its work (every step matched, every line judged) though nothing changed. Each round
runs, one after the other and in turn:

  * `opscope info TRACE` twice (each side's load, as a separate process),
  * `opscope diff TRACE TRACE` (matched lines, bootstrap verdicts),
  * `opscope diff TRACE TRACE --by name` (HTA's grouping),

all with --no-cache (parsing included) and the page cache warm. Printed: median wall
seconds and peak RSS per command, and each diff's ratio to the two `info`s together.

    python3 bench/diff.py [--size-gb 1] [--repeat 3] [--opscope target/release/opscope]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import runinfo
from view import synthetic_trace

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of argv, which must succeed."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    err = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed: {err}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--opscope", default=str(REPO / "target/release/opscope"))
    parser.add_argument("--shared", default=str(REPO.parent / "shared"))
    args = parser.parse_args()
    trace = synthetic_trace(Path(args.shared), args.size_gb)
    run = runinfo.start(size_gb=args.size_gb, repeat=args.repeat)
    size = trace.stat().st_size
    t = str(trace)
    commands = {
        "info": [args.opscope, "info", t, "--format", "json", "--no-cache", "-q"],
        "diff": [args.opscope, "diff", t, t, "--format", "json", "--no-cache", "-q"],
        "diff --by name": [args.opscope, "diff", t, t, "--by", "name", "--steps", "0..",
                           "--format", "json", "--no-cache", "-q"],
    }
    # Warm-up: the page cache holds the file, and the output of each says what it did.
    for argv in commands.values():
        timed(argv)
    walls: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, argv in commands.items():
            # "info" stands for both sides' loads: two processes, one after the other.
            times = [timed(argv) for _ in range(2 if name == "info" else 1)]
            walls[name].append(sum(w for w, _ in times))
            rss[name].append(max(r for _, r in times))
    info = statistics.median(walls["info"])
    print(f"\n== two loads of {trace.name} ({size / 2**30:.2f} GiB of JSON each), median of "
          f"{args.repeat}\n")
    print("| command | wall s | peak RSS MiB | ratio to the two loads |")
    print("|---|---:|---:|---:|")
    results = {}
    for name in commands:
        wall = statistics.median(walls[name])
        peak = statistics.median(rss[name])
        label = "info A + info B" if name == "info" else name
        print(f"| {label} | {wall:.2f} | {peak:.0f} | {wall / info:.2f}x |")
        results[name] = {"wall_s": walls[name], "peak_rss_mib": rss[name]}
    runinfo.finish(run, results)


if __name__ == "__main__":
    main()
