"""HTA's launch queue length (`TraceCounters`: `get_queue_length_time_series`,
`get_time_spent_blocked_on_full_queue` at `max_queue_length` 1,024) for a folder's
first rank, as JSON: the deepest queue over the rank's streams and the time the
queues spent full, in ns, summed over the streams.

    python hta_queue_length.py TRACE_DIR
"""

import json
import sys

from hta_quiet import first_rank, stdout_to_stderr


def main():
    from hta.analyzers.trace_counters import TraceCounters

    with stdout_to_stderr():
        ta, rank = first_rank(sys.argv[1])
        series = TraceCounters.get_queue_length_time_series(ta.t, [rank])
        blocked = TraceCounters.get_time_spent_blocked_on_full_queue(ta.t, series, 1024)
    deepest = int(series[rank].queue_length.max())
    blocked_us = 0.0 if blocked is None else float(blocked.duration_at_max_queue_length.sum())
    print(json.dumps({"deepest": deepest, "blocked_ns": round(blocked_us * 1000)}))


if __name__ == "__main__":
    main()
