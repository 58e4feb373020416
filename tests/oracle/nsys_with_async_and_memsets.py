"""A copy of an Nsight Systems export whose program also copies asynchronously from
pageable memory and sets pinned memory synchronously — what the shared exports never
do — so that Nsight's `cuda_memcpy_async` and `cuda_memset_sync` rules have something
to find: the first half of its host-to-device `cudaMemcpy` calls become
`cudaMemcpyAsync` (their copies stay pageable), and its first three device-to-host
copies become synchronous `cudaMemset`s of pinned memory (memKind 1) with the copy's
times, device and stream. Only the export's own tables change.

    python nsys_with_async_and_memsets.py IN.sqlite OUT.sqlite
"""

import shutil
import sqlite3
import sys


def new_string(conn, text):
    (top,) = conn.execute("SELECT MAX(id) FROM StringIds").fetchone()
    conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (top + 1, text))
    return top + 1


def main():
    src, out = sys.argv[1], sys.argv[2]
    shutil.copyfile(src, out)
    conn = sqlite3.connect(out)
    async_id = new_string(conn, "cudaMemcpyAsync_v3020")
    memset_id = new_string(conn, "cudaMemset_v3020")

    h2d = [r[0] for r in conn.execute(
        "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 ORDER BY start")]
    for corr in h2d[: len(h2d) // 2]:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE correlationId = ?",
                     (async_id, corr))

    conn.execute("""CREATE TABLE IF NOT EXISTS CUPTI_ACTIVITY_KIND_MEMSET (
        start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
        contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
        globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
        graphNodeId INTEGER, memKind INTEGER)""")
    d2h = conn.execute(
        "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 ORDER BY start LIMIT 3").fetchall()
    for start, end, device, context, stream, corr, gpid, size in d2h:
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE correlationId = ?", (corr,))
        conn.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, value, bytes, graphNodeId, memKind) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, 1)",
            (start, end, device, context, stream, corr, gpid, size))
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE correlationId = ?",
                     (memset_id, corr))
    conn.commit()
    conn.close()


if __name__ == "__main__":
    main()
