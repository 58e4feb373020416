"""Reads the sampled stacks of an opscope Parquet dataset (argv[1]) with DuckDB alone
and prints JSON: the samples, those of running threads, and per innermost Python
function the time its running samples stand for (`stats hot`'s own time: native
frames under it, where sampled, count for it; samples with no Python frame, none)."""

import json
import sys

import duckdb

root = sys.argv[1]
con = duckdb.connect()
con.execute(f"create view samples as select * from read_parquet('{root}/*/*/samples.parquet')")
total, running = con.execute("select count(*), count(*) filter (where running) from samples").fetchone()
own = {}
rows = con.execute("select stack, period from samples where running").fetchall()
for stack, period in rows:
    # Frames outermost first, each `function (file:line)`; Python's files are sources
    # (.py) or frozen modules (<frozen …>), native frames name their library.
    python = [f for f in stack.split(";") if f.rsplit(" (", 1)[-1].split(":")[0].endswith(".py")
              or f.rsplit(" (", 1)[-1].startswith("<")]
    if python:
        function = python[-1].rsplit(" (", 1)[0]
        own[function] = own.get(function, 0) + period
json.dump({"samples": total, "running": running, "own_ns": {k: int(v) for k, v in own.items()}},
          sys.stdout)
