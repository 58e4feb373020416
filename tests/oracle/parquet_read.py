"""Reads an opscope Parquet dataset (argv[1]) with three engines that share no code with
opscope: pyarrow's dataset reader, DuckDB and Polars, each with Hive partitioning.
Prints JSON: per engine, the rows of every table and the slices per rank; the
partitions; the metadata rows; and, for the Kineto files named after `--kineto`, how
their complete (`X`) events compare with the dataset's slices as (rank, name, start ns,
duration ns) — read from the files here, by json, not by opscope."""

import decimal
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq

TABLES = ["slices", "tracks", "counters", "instants", "flows"]

root = Path(sys.argv[1])
kineto = sys.argv[sys.argv.index("--kineto") + 1:] if "--kineto" in sys.argv else []
out = {"engines": {}, "partitions": sorted(str(p.relative_to(root)) for p in root.glob("host=*/rank=*"))}


def glob(table):
    return str(root / "*" / "*" / f"{table}.parquet")


# pyarrow
engine = {}
for table in TABLES:
    d = ds.dataset([str(p) for p in root.glob(f"host=*/rank=*/{table}.parquet")],
                   format="parquet", partitioning="hive", partition_base_dir=str(root))
    engine[table] = d.count_rows()
slices = ds.dataset([str(p) for p in root.glob("host=*/rank=*/slices.parquet")],
                    format="parquet", partitioning="hive", partition_base_dir=str(root)).to_table()
engine["slices_per_rank"] = dict(Counter(str(r) for r in slices.column("rank").to_pylist()))
out["engines"]["pyarrow"] = engine

# DuckDB
con = duckdb.connect()
engine = {}
for table in TABLES:
    engine[table] = con.execute(
        f"select count(*) from read_parquet('{glob(table)}', hive_partitioning = true)").fetchone()[0]
engine["slices_per_rank"] = {
    str(rank): n for rank, n in con.execute(
        f"select rank, count(*) from read_parquet('{glob('slices')}', hive_partitioning = true) group by rank"
    ).fetchall()
}
out["engines"]["duckdb"] = engine

# Polars
engine = {}
for table in TABLES:
    engine[table] = pl.scan_parquet(glob(table), hive_partitioning=True).select(pl.len()).collect().item()
per_rank = pl.scan_parquet(glob("slices"), hive_partitioning=True).group_by("rank").len().collect()
engine["slices_per_rank"] = {str(r): n for r, n in per_rank.iter_rows()}
out["engines"]["polars"] = engine

meta = ds.dataset([str(p) for p in root.glob("host=*/rank=*/metadata.parquet")],
                  format="parquet", partitioning="hive", partition_base_dir=str(root))
out["metadata"] = meta.to_table().to_pylist()

if kineto:
    # The files' own complete events, as (rank, name, start ns, duration ns).
    expected = Counter()
    for path in kineto:
        # Read exactly: µs at 1.7e15 times 1000 is past what a double holds.
        with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
            trace = json.load(f, parse_float=decimal.Decimal)
        rank = trace.get("distributedInfo", {}).get("rank", -1)
        ns = lambda us: int((decimal.Decimal(us) * 1000).to_integral_value())
        for e in trace["traceEvents"]:
            if e.get("ph") == "X":
                expected[(rank, e["name"], ns(e["ts"]), ns(e.get("dur", 0)))] += 1
    got = Counter(
        (int(rank), name, ts, dur) for rank, name, ts, dur in con.execute(
            f"select rank, name, ts, dur from read_parquet('{glob('slices')}', hive_partitioning = true)"
        ).fetchall()
    )
    out["kineto"] = {
        "events": sum(expected.values()),
        "missing_from_dataset": sum((expected - got).values()),
        "not_in_files": sum((got - expected).values()),
    }

print(json.dumps(out, default=str))
