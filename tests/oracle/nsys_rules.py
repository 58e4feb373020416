"""Nsight Systems' expert-system rules computed straight from an export's own tables
with Python's sqlite3, by their documented criteria (the Nsight Systems Analysis
Guide's "Expert Systems Analysis", and the recipes' READMEs): one JSON document.

    python nsys_rules.py FILE.sqlite GAP_NS CHUNKS THRESHOLD_PCT

Keys (each a list of groups, by process id, or process id and device id):
  cuda_api_sync     calls named cudaDeviceSynchronize% or cudaStreamSynchronize%:
                    count and summed duration, per process;
  cuda_memcpy_sync  memcpy records whose runtime call (same correlationId and process)
                    is LIKE 'cudaMemcpy%' and NOT LIKE '%async%', leaving out
                    device-to-device copies (copyKind 8) and host-to-device copies
                    (copyKind 1) of 64 KB or less: count, the calls' summed duration,
                    bytes, per process;
  cuda_memcpy_async copies whose call is LIKE 'cudaMemcpy%Async%' with srcKind or
                    dstKind 0 (pageable): count and the calls' summed duration;
  cuda_memset_sync  memsets whose call is LIKE 'cudaMemset%' and NOT LIKE '%async%'
                    on memKind 1 or 4: count and the calls' summed duration;
  gpu_gaps          per process and device, the gaps of at least GAP_NS between the
                    latest end so far and the next start of a kernel, copy or set:
                    count, summed length, longest;
  gpu_time_util     per process and device, the span cut into CHUNKS equal chunks,
                    each chunk's summed overlap over its length; the chunks under
                    THRESHOLD_PCT percent: count (and the chunk count).
"""

import json
import sqlite3
import sys


def pid(global_id):
    return (global_id >> 24) & 0xFFFFFF


def table_exists(conn, name):
    return conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type IN ('table','view') AND name = ?",
        (name,),
    ).fetchone()[0] > 0


def runtime_calls(conn):
    """correlationId and process -> (name, duration) of the runtime calls. Some exports
    record a call twice under one correlationId (`cudaMemcpy` around
    `cudaMemcpy_v3020`): the outer, longer one is the time the host spent in it."""
    calls = {}
    for corr, gtid, name, start, end in conn.execute(
        "SELECT r.correlationId, r.globalTid, s.value, r.start, r.\"end\" "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
    ):
        key = (corr, pid(gtid))
        if key not in calls or end - start > calls[key][1]:
            calls[key] = (name, end - start)
    return calls


def like(name, prefix, contains=None):
    low = name.lower()
    if not low.startswith(prefix.lower()):
        return False
    return contains is None or contains.lower() in low[len(prefix):]


def main():
    path, gap_ns, chunks, threshold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    conn = sqlite3.connect(path)
    calls = runtime_calls(conn)
    out = {}

    # Every call record counts here, as Nsight's cuda_api_sync lists them.
    per = {}
    for gtid, name, start, end in conn.execute(
        "SELECT r.globalTid, s.value, r.start, r.\"end\" FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId"
    ):
        if like(name, "cudaDeviceSynchronize") or like(name, "cudaStreamSynchronize"):
            g = per.setdefault(pid(gtid), [0, 0])
            g[0] += 1
            g[1] += end - start
    out["cuda_api_sync"] = [{"pid": p, "count": c, "ns": ns} for p, (c, ns) in sorted(per.items())]

    sync, pageable = {}, {}
    for corr, gpid, kind, nbytes, src, dst in conn.execute(
        "SELECT correlationId, globalPid, copyKind, bytes, srcKind, dstKind "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ):
        call = calls.get((corr, pid(gpid)))
        if call is None:
            continue
        name, dur = call
        if like(name, "cudaMemcpy") and "async" not in name.lower():
            if kind == 8 or (kind == 1 and nbytes <= 64 * 1024):
                continue
            g = sync.setdefault(pid(gpid), [0, 0, 0])
            g[0] += 1
            g[1] += dur
            g[2] += nbytes
        elif like(name, "cudaMemcpy", "Async") and (src == 0 or dst == 0):
            g = pageable.setdefault(pid(gpid), [0, 0])
            g[0] += 1
            g[1] += dur
    out["cuda_memcpy_sync"] = [
        {"pid": p, "count": c, "ns": ns, "bytes": b} for p, (c, ns, b) in sorted(sync.items())
    ]
    out["cuda_memcpy_async"] = [{"pid": p, "count": c, "ns": ns} for p, (c, ns) in sorted(pageable.items())]

    memset = {}
    if table_exists(conn, "CUPTI_ACTIVITY_KIND_MEMSET"):
        for corr, gpid, mem_kind in conn.execute(
            "SELECT correlationId, globalPid, memKind FROM CUPTI_ACTIVITY_KIND_MEMSET"
        ):
            call = calls.get((corr, pid(gpid)))
            if call and like(call[0], "cudaMemset") and "async" not in call[0].lower() and mem_kind in (1, 4):
                g = memset.setdefault(pid(gpid), [0, 0])
                g[0] += 1
                g[1] += call[1]
    out["cuda_memset_sync"] = [{"pid": p, "count": c, "ns": ns} for p, (c, ns) in sorted(memset.items())]

    work = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if not table_exists(conn, table):
            continue
        for gpid, dev, start, end in conn.execute(
            f"SELECT globalPid, deviceId, start, \"end\" FROM {table}"
        ):
            work.setdefault((pid(gpid), dev), []).append((start, end))
    gaps, util = [], []
    for (p, dev), spans in sorted(work.items()):
        spans.sort()
        latest, found = None, []
        for start, end in spans:
            if latest is not None and start - latest >= gap_ns:
                found.append(start - latest)
            latest = end if latest is None else max(latest, end)
        if found:
            gaps.append({"pid": p, "device": dev, "count": len(found), "ns": sum(found), "longest": max(found)})
        first, last = spans[0][0], max(e for _, e in spans)
        if last > first:
            span = last - first
            bounds = [first + round(span * k / chunks) for k in range(chunks + 1)]
            busy = [0] * chunks
            for start, end in spans:
                for k in range(chunks):
                    lo, hi = bounds[k], bounds[k + 1]
                    busy[k] += max(0, min(end, hi) - max(start, lo))
            low = sum(
                1 for k in range(chunks)
                if bounds[k + 1] > bounds[k] and 100.0 * busy[k] / (bounds[k + 1] - bounds[k]) < threshold
            )
            util.append({"pid": p, "device": dev, "low_chunks": low, "chunks": chunks})
    out["gpu_gaps"] = gaps
    out["gpu_time_util"] = util
    print(json.dumps(out))


if __name__ == "__main__":
    main()
