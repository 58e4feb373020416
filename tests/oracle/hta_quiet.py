"""What the HTA oracles share: HTA's warnings and logging off, and its prints kept off
standard output (which carries the oracle's JSON) while it loads and analyses."""

import contextlib
import logging
import os
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


@contextlib.contextmanager
def stdout_to_stderr():
    """HTA prints progress to standard output: send it to standard error meanwhile."""
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def first_rank(trace_dir):
    """HTA's analysis of a folder of traces, and its first rank."""
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=trace_dir)
    return ta, min(ta.t.traces)
