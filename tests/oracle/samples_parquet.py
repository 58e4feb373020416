"""Reads the sampled stacks of an opscope Parquet dataset (argv[1]) with DuckDB alone
and prints JSON: the samples, those of running threads, and per innermost function
the time its running samples stand for (`stats hot`'s own time)."""

import json
import sys

import duckdb

root = sys.argv[1]
con = duckdb.connect()
con.execute(f"create view samples as select * from read_parquet('{root}/*/*/samples.parquet')")
total, running = con.execute("select count(*), count(*) filter (where running) from samples").fetchone()
own = dict(
    con.execute(
        "select function, sum(period) from samples where running and function is not null "
        "group by function"
    ).fetchall()
)
json.dump({"samples": total, "running": running, "own_ns": {k: int(v) for k, v in own.items()}},
          sys.stdout)
