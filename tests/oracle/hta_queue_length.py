"""HTA's launch queue length (`TraceCounters`: `get_queue_length_time_series`,
`get_time_spent_blocked_on_full_queue` at `max_queue_length` 1,024) for a folder's
first rank, as JSON: the deepest queue over the rank's streams and the time the
queues spent full, in ns, summed over the streams.

    python hta_queue_length.py TRACE_DIR
"""

import json
import logging
import os
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

from hta.analyzers.trace_counters import TraceCounters  # noqa: E402
from hta.trace_analysis import TraceAnalysis  # noqa: E402


def main():
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        ta = TraceAnalysis(trace_dir=sys.argv[1])
        rank = min(ta.t.traces)
        series = TraceCounters.get_queue_length_time_series(ta.t, [rank])
        blocked = TraceCounters.get_time_spent_blocked_on_full_queue(ta.t, series, 1024)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
    deepest = int(series[rank].queue_length.max())
    blocked_us = 0.0 if blocked is None else float(blocked.duration_at_max_queue_length.sum())
    print(json.dumps({"deepest": deepest, "blocked_ns": round(blocked_us * 1000)}))


if __name__ == "__main__":
    main()
