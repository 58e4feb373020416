"""`opscope convert --to parquet` against opscope's own Perfetto export of the same trace
(the issue's bar: the Parquet write at least as fast), and the dataset's size against the
gzip'd JSON it came from (no larger). Both conversions read the model from the cache
(made by a first `info`), so the figures are the writers'; runs alternate, and the
minimum and median of --repeat runs are printed with their ratio.

    python3 bench/parquet.py [--repeat 9] [--opscope target/release/opscope]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent
TRACES = [
    "kineto/hta/trace_filter",
    "kineto/kineto-tb_plugin/resnet50_num_workers_0",
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "kineto/hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
]


def gz_bytes(path: Path) -> int:
    files = [path] if path.is_file() else sorted(path.rglob("*.gz"))
    return sum(f.stat().st_size for f in files)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed(argv) -> float:
    begun = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - begun


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    args = parser.parse_args()
    run = runinfo.start(repeat=args.repeat)
    rows = []
    print("| trace | gzip'd JSON | dataset | size ratio | Perfetto export min / median | Parquet min / median | time ratio (median) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="opscope-bench-parquet-") as tmp:
        for name in TRACES:
            trace = args.shared / "traces" / name
            subprocess.run([args.opscope, "info", "-q", trace], check=True, capture_output=True)
            perfetto, parquet = [], []
            for _ in range(args.repeat):
                out = Path(tmp) / "t.pftrace"
                out.unlink(missing_ok=True)
                perfetto.append(timed([args.opscope, "convert", "-q", trace, "-o", out]))
                dataset = Path(tmp) / "t.parquet"
                shutil.rmtree(dataset, ignore_errors=True)
                parquet.append(timed([args.opscope, "convert", "-q", trace, "-o", dataset]))
            size, gz = tree_bytes(dataset), gz_bytes(trace)
            pm, qm = statistics.median(perfetto), statistics.median(parquet)
            print(f"| {name.split('/')[-1]} | {gz / 2**20:.2f} MiB | {size / 2**20:.2f} MiB | {size / gz:.2f} | "
                  f"{min(perfetto) * 1e3:.0f} / {pm * 1e3:.0f} ms | {min(parquet) * 1e3:.0f} / {qm * 1e3:.0f} ms | "
                  f"{qm / pm:.2f} |")
            rows.append({"trace": name, "gzip_bytes": gz, "dataset_bytes": size,
                         "perfetto_s": perfetto, "parquet_s": parquet})
    runinfo.finish(run, rows)


if __name__ == "__main__":
    main()
