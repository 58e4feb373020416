"""`opscope report` on eight ranks: the time to write the page and its size, the issue's
targets being under 2 s and under 2 MB. The eight ranks are the shared two-rank Kineto
traces (kineto/hta/trace_filter) four times over, each copy numbered as its own rank.
There is no peer that writes such a page; HTA's notebooks draw their charts in Jupyter.

    python3 bench/report.py [--repeat 5] [--opscope target/release/opscope]
"""

import argparse
import gzip
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    args = parser.parse_args()
    run = runinfo.start(repeat=args.repeat)
    source = args.shared / "traces/kineto/hta/trace_filter"
    with tempfile.TemporaryDirectory(prefix="opscope-bench-report-") as tmp:
        ranks = Path(tmp) / "ranks"
        ranks.mkdir()
        for copy in range(4):
            for rank in range(2):
                with gzip.open(source / f"sampled_rank-{rank}.json.gz", "rt") as f:
                    trace = json.load(f)
                new = copy * 2 + rank
                trace.setdefault("distributedInfo", {})["rank"] = new
                trace["distributedInfo"]["world_size"] = 8
                with gzip.open(ranks / f"rank-{new}.json.gz", "wt") as f:
                    json.dump(trace, f)
        times, size = [], 0
        for _ in range(args.repeat):
            page = Path(tmp) / "report.html"
            page.unlink(missing_ok=True)
            start = time.perf_counter()
            subprocess.run([args.opscope, "report", ranks, "-o", page, "-q", "--no-cache"],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - start)
            size = page.stat().st_size
    print(f"opscope report on 8 ranks ({sum(f.stat().st_size for f in source.glob('*.gz')) * 4 / 2**20:.1f} MiB "
          f"of gzip'd Kineto JSON): median {statistics.median(times):.3f} s (min {min(times):.3f}, "
          f"max {max(times):.3f}) over {args.repeat} runs, parsing included (no model cache); "
          f"page {size / 1024:.0f} KiB. Targets: under 2 s, under 2 MB.")
    runinfo.finish(run, {"times_s": times, "page_bytes": size})


if __name__ == "__main__":
    main()
