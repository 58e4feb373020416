"""Counts and summed durations of an Nsight Systems SQLite export, straight from its
tables with Python's sqlite3: one JSON line per file.

    python nsys_sums.py FILE.sqlite…

Keys: kernel, memcpy_h2d, memcpy_d2h, memcpy_other, memset, runtime, driver, sync,
osrt, nvtx_range, nvtx_mark, and nvtx_mpi (the NVTX ranges of MPI's point-to-point and
collective calls, which Nsight's MPI tracing names MPI_Send, MPI_Allreduce, ...: the
communication), and sched_spells (each thread's spells on a CPU, from SCHED_EVENTS);
each [count, total ns]; sampling_callchains_rows. And kernel_sum: per demangled
kernel name, the columns of Nsight's cuda_gpu_kern_sum report (instances, total, mean,
median, min, max, sample standard deviation, in ns), computed with `statistics`.
"""

import json
import sqlite3
import statistics
import sys


def kernel_sum(conn):
    rows = conn.execute(
        "SELECT s.value, k.\"end\" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    by_name = {}
    for name, dur in rows:
        by_name.setdefault(name, []).append(dur)
    return {
        name: {
            "instances": len(d),
            "total": sum(d),
            "mean": statistics.fmean(d),
            "median": statistics.median(d),
            "min": min(d),
            "max": max(d),
            "stddev": statistics.stdev(d) if len(d) > 1 else 0.0,
        }
        for name, d in by_name.items()
    }


def sums(conn, table, where="1"):
    exists = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?", (table,)
    ).fetchone()[0]
    if not exists:
        return [0, 0]
    n, total = conn.execute(
        f'SELECT count(*), coalesce(sum("end" - start), 0) FROM "{table}" WHERE {where}'
    ).fetchone()
    return [n, total]


# MPI's calls that move data (Nsight's MPI trace names its ranges after the call).
MPI_CALLS = str(tuple(
    "MPI_" + c for c in (
        "Send", "Recv", "Isend", "Irecv", "Sendrecv", "Wait", "Waitall", "Waitany", "Barrier", "Bcast",
        "Reduce", "Allreduce", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Gather", "Scatter",
        "Reduce_scatter", "Put", "Get_accumulate", "Accumulate", "Win_fence")))


def sched_spells(conn):
    """Each thread's spells on a CPU from SCHED_EVENTS (switched in, then out), as
    [count, total ns]; a spell seen ending only starts at the session's start, one seen
    starting only ends at the latest time the table holds."""
    exists = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='SCHED_EVENTS'").fetchone()[0]
    if not exists:
        return [0, 0]
    rows = conn.execute('SELECT globalTid, start, isSchedIn FROM SCHED_EVENTS ORDER BY globalTid, start').fetchall()
    last = max((r[1] for r in rows), default=0)
    count = total = 0
    open_since = {}
    for tid, ts, sched_in in rows:
        if sched_in:
            open_since.setdefault(tid, ts)
        else:
            since = open_since.pop(tid, 0)
            count += 1
            total += ts - since
    for since in open_since.values():
        count += 1
        total += last - since
    return [count, total]


def rows(conn, table):
    exists = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()[0]
    return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] if exists else 0


def main():
    for path in sys.argv[1:]:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        out = {
            "path": path,
            "kernel": sums(conn, "CUPTI_ACTIVITY_KIND_KERNEL"),
            "memcpy_h2d": sums(conn, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind = 1"),
            "memcpy_d2h": sums(conn, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind = 2"),
            "memcpy_other": sums(conn, "CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind NOT IN (1, 2)"),
            "memset": sums(conn, "CUPTI_ACTIVITY_KIND_MEMSET"),
            "runtime": sums(conn, "CUPTI_ACTIVITY_KIND_RUNTIME"),
            "driver": sums(conn, "CUPTI_ACTIVITY_KIND_DRIVER"),
            "sync": sums(conn, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
            "osrt": sums(conn, "OSRT_API"),
            "nvtx_range": sums(conn, "NVTX_EVENTS", 'eventType IN (59, 60) AND "end" IS NOT NULL'),
            "nvtx_mark": sums(conn, "NVTX_EVENTS", "eventType = 34"),
            "nvtx_mpi": sums(conn, "NVTX_EVENTS", 'eventType IN (59, 60) AND "end" IS NOT NULL AND '
                             f"coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) IN {MPI_CALLS}"),
            "kernel_sum": kernel_sum(conn),
            "sched_spells": sched_spells(conn),
            "sampling_callchains_rows": rows(conn, "SAMPLING_CALLCHAINS"),
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
