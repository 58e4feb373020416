"""`opscope sql` on DuckDB over a Parquet dataset against the CLI on the same data: the
`gpu`, `kernels` and `steps` queries against `opscope gpu`, `stats kernel` and `steps`
(and `opscope info` alone: what opening a cached model costs),
on a directory of eight rank traces (made from the shared two-rank `hta/trace_filter`)
and on the 2 GB synthetic Kineto trace of bench/view.py. The CLI is timed as a whole
process, warm (its model cache made by a first `info`) and cold (`--no-cache`, parsing
the JSON); DuckDB as the views plus the query, in this process, over a dataset
converted once beforehand (that conversion's time is printed too). Runs alternate;
minimum and median of --repeat runs, with the ratio DuckDB / warm CLI.

    python3 bench/sql.py [--repeat 5] [--opscope target/release/opscope] [--no-2g]
"""

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

QUERIES = [("gpu", ["gpu"]), ("kernels", ["stats", "kernel"]), ("steps", ["steps"])]


def eight_ranks(shared: Path, out: Path) -> Path:
    """The two shared ranks four times, each copy its own rank (as the report test makes
    them)."""
    out.mkdir(parents=True, exist_ok=True)
    source = shared / "traces/kineto/hta/trace_filter"
    for copy in range(4):
        for rank in range(2):
            with gzip.open(source / f"sampled_rank-{rank}.json.gz", "rt") as f:
                trace = json.load(f)
            new = copy * 2 + rank
            trace["distributedInfo"]["rank"] = new
            trace["distributedInfo"]["world_size"] = 8
            with gzip.open(out / f"rank-{new}.json.gz", "wt", compresslevel=1) as f:
                json.dump(trace, f)
    return out


def timed(argv) -> float:
    begun = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - begun


def duckdb_time(opscope: Path, query: str, dataset: Path) -> tuple[float, int]:
    import duckdb

    sql = subprocess.run([opscope, "sql", query, dataset], check=True, capture_output=True, text=True).stdout
    *views, select = [s for s in sql.split(";\n") if s.strip()]
    begun = time.perf_counter()
    con = duckdb.connect()
    for v in views:
        con.execute(v)
    rows = con.execute(select).fetchall()
    took = time.perf_counter() - begun
    con.close()
    return took, len(rows)


def ms(values) -> str:
    return f"{min(values) * 1e3:,.0f} / {statistics.median(values) * 1e3:,.0f} ms"


def main():
    try:
        import duckdb  # noqa: F401
    except ImportError:
        from view import bench_python

        python = bench_python()
        os.execv(python, [python, *sys.argv])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    parser.add_argument("--no-2g", action="store_true", help="only the eight ranks")
    args = parser.parse_args()
    import duckdb

    with tempfile.TemporaryDirectory(prefix="opscope-bench-sql-") as tmp:
        tmp = Path(tmp)
        inputs = [("8 ranks (trace_filter ×4)", eight_ranks(args.shared, tmp / "ranks"), args.repeat)]
        if not args.no_2g:
            from view import two_gb_trace

            big = two_gb_trace(args.shared)
            inputs.append((f"2 GB Kineto ({big.stat().st_size / 2**30:.1f} GiB)", big, max(2, args.repeat // 2)))
        run = runinfo.start(repeat=args.repeat, duckdb=duckdb.__version__)
        results = []
        print(f"duckdb {duckdb.__version__}; CLI timed as a process, DuckDB in process; min / median of runs")
        print()
        print("| data | query | CLI warm | CLI cold | DuckDB on the dataset | DuckDB / CLI warm (median) |")
        print("|---|---|---|---|---|---|")
        for label, trace, repeat in inputs:
            dataset = tmp / "data.parquet"
            shutil.rmtree(dataset, ignore_errors=True)
            subprocess.run([args.opscope, "info", "-q", trace], check=True, capture_output=True)
            convert = timed([args.opscope, "convert", "-q", trace, "-o", dataset])
            size = sum(f.stat().st_size for f in dataset.rglob("*") if f.is_file())
            for query, command in QUERIES:
                warm, cold, duck = [], [], []
                rows = 0
                for _ in range(repeat):
                    warm.append(timed([args.opscope, *command, "--format", "json", trace]))
                    took, rows = duckdb_time(args.opscope, query, dataset)
                    duck.append(took)
                cold.append(timed([args.opscope, *command, "--format", "json", "--no-cache", trace]))
                ratio = statistics.median(duck) / statistics.median(warm)
                print(f"| {label} | {query} ({rows} rows) | {ms(warm)} | {ms(cold)} | {ms(duck)} | {ratio:.1f}× |")
                results.append({"data": label, "query": query, "rows": rows, "cli_warm_s": warm,
                                "cli_cold_s": cold, "duckdb_s": duck})
            # Opening the cached model: `info` needs little analysis, so it is what a
            # cached open costs (issue 39: at most 50 ms on the 2 GB trace).
            warm = [timed([args.opscope, "info", "--format", "json", trace]) for _ in range(repeat)]
            cold = [timed([args.opscope, "info", "--format", "json", "--no-cache", trace])]
            print(f"| {label} | info (no SQL) | {ms(warm)} | {ms(cold)} | | |")
            results.append({"data": label, "query": "info", "cli_warm_s": warm, "cli_cold_s": cold})
            print(f"| {label} | (convert --to parquet, once) | | | {convert:.1f} s, {size / 2**20:.0f} MiB | |")
            results.append({"data": label, "convert_s": convert, "dataset_bytes": size})
    runinfo.finish(run, results)


if __name__ == "__main__":
    main()
