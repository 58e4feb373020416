"""opscope in Python: traces as Arrow tables, opscope's reports as DataFrames.

    import opscope
    t = opscope.load("ranks/")          # files or directories, as the CLI reads them
    t.slices.to_pandas()                # pyarrow.Table, handed over without a copy
    opscope.gpu(t)                      # per rank and device, `opscope gpu`'s numbers
    opscope.stats_op(t, order_by="self_cpu_micros")
    opscope.steps(t)
    opscope.advise(t)                   # what bounds the job and what to change
    opscope.diff(t, opscope.load("after/"))   # what changed, line by line, beyond noise
    opscope.report(t)                   # in a notebook: the report page, inline

Every report takes the options of the command it runs, as keywords
(``opscope.gpu(t, exclude_last_step=True)`` is ``opscope gpu --exclude-last-step``),
and gives the numbers that command prints with ``--format json``.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any, Iterable, Union

from . import _opscope
from ._opscope import Error, __version__

__all__ = [
    "Error",
    "Trace",
    "load",
    "gpu",
    "gpu_streams",
    "kernel_types",
    "stats_op",
    "stats_kernel",
    "steps",
    "advise",
    "diff",
    "report",
    "Page",
    "text",
    "frames",
    "REPORT_COMMANDS",
    "main",
    "__version__",
]

# Models cached by another build of opscope are not this one's.
_opscope.set_code_file(_opscope.__file__)

PathLike = Union[str, "os.PathLike[str]"]


class Trace:
    """A trace loaded into opscope's model: its tables as ``pyarrow.Table`` (built on
    first use), and the reports run on it."""

    TABLES = ("slices", "tracks", "counters", "instants", "flows", "samples", "sources")

    def __init__(self, model: Any, inputs: list[str]):
        self._model = model
        self.inputs = inputs

    def table(self, name: str):
        """The table ``name`` (one of ``Trace.TABLES``) as a ``pyarrow.Table``."""
        return self._model.table(name)

    @cached_property
    def slices(self):
        """Ops, kernels, copies, runtime calls, annotations, steps: one row each."""
        return self.table("slices")

    @cached_property
    def tracks(self):
        """Threads, GPU streams and counter tracks, with their process and device."""
        return self.table("tracks")

    @cached_property
    def counters(self):
        """Counter samples (memory, utilisation)."""
        return self.table("counters")

    @cached_property
    def instants(self):
        """Events without a duration."""
        return self.table("instants")

    @cached_property
    def flows(self):
        """Links from a slice to another (a launch to its kernel)."""
        return self.table("flows")

    @cached_property
    def samples(self):
        """Sampled Python stacks (``opscope record``, ``opscope attach``): when, on which
        thread track, the time each stands for, whether the thread ran and held the
        GIL, its innermost function, file and line, and the whole stack outermost first
        (``function (file:line);…``)."""
        return self.table("samples")

    @cached_property
    def sources(self):
        """The files read: format, host, rank, clock and its correction."""
        return self.table("sources")

    def rows(self, name: str) -> int:
        """Rows of table ``name``, without building it."""
        return self._model.rows(name)

    def save(self, path: PathLike, to: str | None = None, force: bool = False) -> str:
        """Writes the trace to ``path`` as ``opscope convert`` writes it: in the format
        ``to`` names (perfetto, json, ctf, folded, speedscope, parquet, svg), else the
        one the file's name says (``.pftrace``, ``.json.gz``, ``.parquet``, …). An
        existing output is replaced only with ``force``. Gives the line that says what
        was written."""
        return self._model.save(os.fspath(path), to, force)

    def run(self, command: str, *args: str, **options: Any) -> str:
        """What ``opscope COMMAND [ARGS] [OPTIONS] TRACE`` prints (``command`` may be
        several words: ``"stats op"``)."""
        words = command.split()
        if not words:
            raise ValueError(f"run: name a command ({', '.join(_opscope.REPORTS)})")
        argv = words + list(args) + _flags(words[0], options)
        return self._model.run(argv)

    def info(self) -> dict:
        """``opscope info --format json``: files, ranks, devices, events per kind."""
        return report(self, "info")

    def __repr__(self) -> str:
        counts = ", ".join(f"{self.rows(n):,} {n}" for n in ("sources", "slices", "counters"))
        return f"<opscope.Trace {', '.join(self.inputs)}: {counts}>"


def load(
    *inputs: PathLike | Iterable[PathLike], cache: bool = True, partial: bool = False
) -> Trace:
    """Loads trace files or directories of them (e.g. one file per rank) into one
    model, as ``opscope info INPUTS`` reads them, from opscope's model cache when it
    holds them (``cache=False`` parses them again). A file that cannot be read to its
    end (cut off while it was written) raises ``opscope.Error``; with ``partial=True``
    it gives what was read before the error, with a warning on stderr, as
    ``--partial`` does."""
    def path(item: Any) -> str:
        # Bytes are a path as the OS spells it (os.listdir(b".") gives them).
        if isinstance(item, (str, bytes, os.PathLike)):
            return os.fsdecode(item)
        raise TypeError(
            f"load: a trace is named by a str, bytes or os.PathLike path, not {type(item).__name__}: {item!r}"
        )

    paths: list[str] = []
    for item in inputs:
        if isinstance(item, (str, bytes, os.PathLike)):
            paths.append(path(item))
        elif hasattr(item, "__iter__"):
            paths.extend(path(p) for p in item)
        else:
            paths.append(path(item))
    if not paths:
        raise ValueError("load: give at least one trace file or directory")
    return Trace(_opscope.load(paths, cache, partial), paths)


def _flags(command: str, options: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for name, value in options.items():
        if getattr(value, "dtype", None) is not None and value.dtype.kind == "b":
            value = bool(value)  # numpy's booleans are flags too
        if value is None or value is False:
            continue
        flag = _opscope.flag(command, name)
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            # One word, so that a negative number is not taken for a flag.
            argv.append(f"{flag}={os.fspath(value) if isinstance(value, os.PathLike) else value}")
    return argv


# The report commands of opscope's engine: name, description, options, frames. Each
# runs on a loaded trace without a command line (the other commands `run` takes, such
# as ``flame`` and ``report``, run theirs).
REPORT_COMMANDS = {name: {"about": about, "options": options, "frames": frames}
                   for name, about, options, frames in _opscope.REPORT_COMMANDS}


def _keywords(options: dict[str, Any]) -> dict[str, Any]:
    """Options as the engine takes them: numpy scalars as Python's, paths as text (a
    list stays a list: it is the command line's comma-separated value)."""
    out = {}
    for name, value in options.items():
        if getattr(value, "dtype", None) is not None and hasattr(value, "item"):
            value = value.item()
        elif isinstance(value, os.PathLike):
            value = os.fspath(value)
        out[name] = value
    return out


def _command(command: str) -> str | None:
    words = " ".join(command.split())
    return words if words in REPORT_COMMANDS else None


def _result(trace: Trace, command: str, options: dict[str, Any]):
    return trace._model.report(command, _keywords(options))


class Page:
    """``opscope report``'s page of a trace: shown inline by Jupyter (in a frame of its
    own, so that its style stays its own), or its HTML as ``html``."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        import html as html_module

        return (
            '<iframe style="width:100%;height:900px;border:0" srcdoc="'
            + html_module.escape(self.html, quote=True)
            + '"></iframe>'
        )

    def save(self, path: PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)


def report(trace: Trace, command: str | None = None, **options: Any) -> Any:
    """The JSON document ``opscope COMMAND --format json`` prints for ``trace``, as
    Python values (``command`` may be several words: ``"stats kernel"``). Without a
    command: ``opscope report``'s page as a :class:`Page`, which a notebook shows
    inline (``top=`` rows in its lists)."""
    if command is None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "report.html")
            trace._model.page(path, **_keywords(options))
            with open(path, encoding="utf-8") as f:
                return Page(f.read())
    if _command(command):
        return json.loads(_result(trace, command, options).json())
    return json.loads(trace.run(command, "--format", "json", **options))


def text(trace: Trace, command: str, **options: Any) -> str:
    """What ``opscope COMMAND`` prints for ``trace``, as text for people; for ``flame``
    and ``report``, which write the file ``output=``, the line that says what they
    wrote."""
    if _command(command):
        return _result(trace, command, options).text()
    words = command.split()
    if words == ["report"]:
        return trace._model.page(**_keywords(options))
    if words == ["flame"]:
        return trace._model.flame(**_keywords(options))
    return trace.run(command, **options)


def frames(trace: Trace, command: str, **options: Any) -> dict:
    """The report command's tables of rows (``REPORT_COMMANDS[command]["frames"]``) as
    DataFrames, built from its result through Arrow."""
    result = _result(trace, command, options)
    return {name: batch.to_pandas() for name, batch in result.frames().items()}


def _frame(trace: Trace, command: str, name: str, options: dict[str, Any], **attrs: str):
    """One frame of ``command``'s; ``attrs`` names fields of the result to keep in its
    ``attrs`` (``across="across"``)."""
    result = _result(trace, command, options)
    frame = result.frames()[name].to_pandas()
    frame.attrs.update({key: result.value(field) for key, field in attrs.items()})
    return frame


def gpu(trace: Trace, **options: Any):
    """HTA's temporal breakdown, one row per rank and device: span, busy, idle,
    computation and other busy time, their shares, and how much of the communication
    overlapped computation (``opscope gpu``). ``attrs["across"]`` holds the spread
    across ranks and the straggler; ``attrs["hosts"]`` the host threads' time of each
    process with no device work."""
    return _frame(trace, "gpu", "ranks", options, across="across", unattributed="unattributed",
                  hosts="hosts")


def gpu_streams(trace: Trace, **options: Any):
    """Per GPU stream: work, busy time, idle time by cause (host wait, kernel wait,
    other) and launch latency (``opscope gpu``'s stream table)."""
    return _frame(trace, "gpu", "streams", options)


def kernel_types(trace: Trace, **options: Any):
    """Exclusive time of each mix of computation, communication and memory work per
    rank and device (HTA's kernel type breakdown)."""
    frame = _frame(trace, "gpu", "kernel_types", options)
    if len(frame):
        frame["classes"] = ["+".join(c) for c in frame["classes"]]
    return frame


def stats_op(trace: Trace, **options: Any):
    """Per op type: calls, CPU time with and without the ops it called, accelerator
    time (tfprof's op view, ``opscope stats op``; tfprof's options as keywords:
    ``order_by="self_cpu_micros"``, ``min_micros=100``, ``select=[...]``)."""
    frame = _frame(trace, "stats op", "ops", options)
    # A list of [shape, count] pairs per op: Arrow holds it as its JSON text.
    if len(frame) and "input_shapes" in frame:
        frame["input_shapes"] = [json.loads(v) if isinstance(v, str) else v for v in frame["input_shapes"]]
    return frame


def stats_kernel(trace: Trace, **options: Any):
    """Per GPU kernel name: Nsight's ``cuda_gpu_kern_sum`` columns (``opscope stats
    kernel``)."""
    return _frame(trace, "stats kernel", "kernels", options)


def steps(trace: Trace, **options: Any):
    """One row per training step of each rank: its time and how the device spent it,
    and the host threads' time (``host_*``: what a run without device work shows, its
    collectives on the CPU its communication) (``opscope steps``). ``attrs["across"]``
    holds the spread across ranks and the straggler."""
    return _frame(trace, "steps", "steps", options, across="across")


def advise(trace: Trace, **options: Any):
    """What bounds the job and what to change (``opscope advise``): one row per
    finding — its rule and the rule's anchor, severity, scope, title, evidence, fix,
    the command that shows more, and the most it could save (``saving_ns``,
    ``saving_pct`` of the steps' time) — ranked by that saving. ``attrs["verdict"]``
    is the one-sentence verdict, ``attrs["not_checked"]`` the rules the trace could
    not answer, ``attrs["tfprof"]`` tfprof's checkers on a RunMetadata."""
    return _frame(trace, "advise", "findings", options, verdict="verdict",
                  not_checked="not_checked", tfprof="tfprof")


def diff(a: Trace | PathLike, b: Trace | PathLike | None = None, **options: Any):
    """What changed from ``a`` to ``b`` (``opscope diff``): Traces, or paths loaded as
    :func:`load` loads them. Without ``b``, parts of ``a``: ``rank=[0, 3]`` or
    ``steps=["10..20", "80..90"]`` (A's, then B's).

    By default one row per matched line (host ops by their place in the step's call
    tree, device work under its launching op): ``kind`` (host, device), ``path``, the
    medians per step on each side, the change and its 95 % interval, the change of the
    mean (``mean_change_ns``, what the line adds to the mean step) and ``verdict``.
    ``attrs`` holds the sides, the step breakdown and the sums. ``by="name"`` gives
    HTA's ``TraceDiff.compare_traces`` columns per name (counts and total durations in
    µs, ``diff_counts``, ``diff_duration``) with ops_diff's category in ``change``."""
    import pandas as pd

    ta = a if isinstance(a, Trace) else load(a)
    tb = None if b is None else (b if isinstance(b, Trace) else load(b))
    argv = ["--format", "json"] + _flags("diff", options)
    doc = json.loads(_opscope.diff(ta._model, None if tb is None else tb._model, argv))
    if "lines" in doc:
        frame = pd.DataFrame(
            [
                {
                    "name": line["name"],
                    "control_counts": line["counts"][0],
                    "test_counts": line["counts"][1],
                    "control_total_duration": line["total_us"][0],
                    "test_total_duration": line["total_us"][1],
                    "diff_counts": line["diff_counts"],
                    "diff_duration": line["diff_duration_us"],
                    "change": line["change"],
                }
                for line in doc["lines"]
            ],
            columns=["name", "control_counts", "test_counts", "control_total_duration",
                     "test_total_duration", "diff_counts", "diff_duration", "change"],
        )
        frame.attrs.update({k: doc[k] for k in ("labels", "ranks", "iterations", "device")})
        return frame
    rows = []
    for kind in ("host", "device"):
        for line in doc[kind]:
            interval = line["interval_ns"] or [None, None]
            rows.append({
                "kind": kind,
                "rank": line["rank"],
                "path": line["path"],
                "main_thread": line["main_thread"],
                "name_a": line["names"][0],
                "name_b": line["names"][1],
                "dims_a": line["dims"][0],
                "dims_b": line["dims"][1],
                "median_a_ns": line["median_ns"][0],
                "median_b_ns": line["median_ns"][1],
                "change_ns": line["change_ns"],
                "interval_low_ns": interval[0],
                "interval_high_ns": interval[1],
                "mean_change_ns": line["mean_change_ns"],
                "verdict": line["verdict"],
            })
    frame = pd.DataFrame(rows)
    frame.attrs.update({k: doc[k] for k in ("sides", "ranks", "breakdown", "splits",
                                             "mean_step_change_ns", "main_thread_lines_ns",
                                             "between_ops_ns", "host_lines", "device_lines")})
    return frame


def main(argv: list[str] | None = None) -> int:
    """The ``opscope`` command line: ``main(["gpu", "ranks/"])`` runs it in this
    process and gives its exit status. With no ``argv`` it is the ``opscope`` command
    the wheel installs and ``python -m opscope``: the process is the command line's,
    and Ctrl-C stops it as it stops the executable (called with ``argv``, from a
    notebook say, Python's Ctrl-C takes effect when the command returns)."""
    import signal
    import sys

    if argv is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        argv = sys.argv[1:]
    return _opscope.main(["opscope"] + [os.fspath(a) for a in argv])
