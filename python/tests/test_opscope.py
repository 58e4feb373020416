"""Tests of the installed wheel: `import opscope` and the `opscope` command it carries.

Run in a fresh venv with the wheel installed (.ci/run does so): every number the module
gives is checked against the command line's JSON (a separate process, reading the files
itself) or against the trace files read here by `json`, which shares no code with
opscope. The shared traces are found through OPSCOPE_SHARED (../shared by default)."""

import decimal
import gzip
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import opscope

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("OPSCOPE_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces"
# The command the wheel installed, beside this interpreter.
WHEEL_CLI = shutil.which("opscope", path=str(Path(sys.executable).parent))
# What the module's numbers are checked against: the opscope executable built from the
# same tree when given (.ci/run gives it), else the wheel's own command.
CLI = os.environ.get("OPSCOPE_CLI") or WHEEL_CLI

TWO_RANKS = TRACES / "kineto/hta/trace_filter"
# One of each kind of input: Kineto ranks, TF timeline, XPlane, RunMetadata, Nsight, CTF.
EACH_FORMAT = [
    TWO_RANKS,
    TRACES / "kineto/hta/amd_trace",
    TRACES / "tf-timeline/dorsal/trace_CNNGender_tf_All-Series.json",
    TRACES / "xplane/GPU-multi-worker",
    TRACES / "tf-timeline/generated-here/tf2.21-cpu-mlp/run_meta",
    TRACES / "nsys-sqlite/cloverleaf-nsys",
    TRACES / "ctf/babeltrace/ctf-traces/succeed/multi-domains",
]


def need(path):
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing on CI")
        pytest.skip(f"{path} not here (set OPSCOPE_SHARED to the shared corpus)")
    return path


def cli_json(*args):
    """The command line's JSON document, from its own process."""
    assert CLI, "the wheel installed no opscope command"
    out = subprocess.run(
        [CLI, *map(str, args), "--format", "json", "--no-cache"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def test_the_wheel_installs_the_command():
    assert WHEEL_CLI is not None
    if os.environ.get("CI"):
        assert os.environ.get("OPSCOPE_CLI"), "on CI the numbers are checked against the executable"
    version = subprocess.run([WHEEL_CLI, "--version"], check=True, capture_output=True, text=True)
    assert version.stdout.strip() == f"opscope {opscope.__version__}"
    usage = subprocess.run([sys.executable, "-m", "opscope"], capture_output=True, text=True)
    assert usage.returncode == 2 and "Usage" in usage.stderr


@pytest.mark.parametrize("trace", EACH_FORMAT, ids=lambda p: p.name)
def test_tables_hold_every_row_info_counts(trace):
    need(trace)
    info = cli_json("info", trace)
    t = opscope.load(trace, cache=False)
    assert t.slices.num_rows == info["slices"]
    assert t.counters.num_rows == info["counter_samples"]
    assert t.instants.num_rows == info["instants"]
    assert t.flows.num_rows == info["flows"]
    assert t.sources.num_rows == len(info["files"])
    kinds = Counter(t.slices.column("kind").to_pylist())
    assert dict(kinds) == info["slices_by_kind"]
    # Every slice's track is a row of the tracks table.
    track_ids = set(t.tracks.column("id").to_pylist())
    assert set(t.slices.column("track").drop_null().to_pylist()) <= track_ids
    # What info says each kind spans, summed here from the durations.
    by_kind = Counter()
    for kind, dur in zip(t.slices.column("kind").to_pylist(), t.slices.column("dur").to_pylist()):
        by_kind[kind] += dur
    assert dict(by_kind) == {k: v for k, v in info["slice_ns_by_kind"].items()}


def test_slices_are_the_files_complete_events():
    """Every complete (X) event of the two Kineto files, as the files say, by rank:
    read here with json, not by opscope."""
    need(TWO_RANKS)
    expected = Counter()
    for path in sorted(TWO_RANKS.glob("*.json.gz")):
        with gzip.open(path, "rt") as f:
            # Exactly: µs near 1.7e15 times 1000 is past what a double holds.
            trace = json.load(f, parse_float=decimal.Decimal)
        rank = trace["distributedInfo"]["rank"]
        ns = lambda us: int((decimal.Decimal(us) * 1000).to_integral_value())
        for e in trace["traceEvents"]:
            if e.get("ph") == "X":
                expected[(rank, e["name"], ns(e["ts"]), ns(e.get("dur", 0)))] += 1
    t = opscope.load(TWO_RANKS)
    s = t.slices.to_pydict()
    got = Counter(zip(s["rank"], s["name"], s["ts"], s["dur"]))
    assert sum(expected.values()) > 9000
    assert got == expected
    # Each slice's rank is its source's, through its track.
    rank_of_source = dict(zip(t.sources.column("source").to_pylist(), t.sources.column("rank").to_pylist()))
    source_of_track = dict(zip(t.tracks.column("id").to_pylist(), t.tracks.column("source").to_pylist()))
    assert s["rank"] == [rank_of_source[source_of_track[track]] for track in s["track"]]
    assert set(t.tracks.column("rank").to_pylist()) == {0, 1}


def test_tables_come_without_a_copy():
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    before = pa.total_allocated_bytes()
    slices = t.slices
    # pyarrow allocated nothing: the buffers are the ones built in Rust.
    assert pa.total_allocated_bytes() == before
    assert slices.nbytes > 100_000
    frame = slices.to_pandas()
    assert len(frame) == slices.num_rows
    assert frame["name"].dtype == "category"


def test_polars_reads_the_tables():
    pl = pytest.importorskip("polars")
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    frame = pl.from_arrow(t.slices)
    assert frame.height == t.slices.num_rows
    kernels = frame.filter(pl.col("kind") == "kernel").height
    assert kernels == Counter(t.slices.column("kind").to_pylist())["kernel"] > 0


def assert_rows_equal(frame, rows, columns):
    """The DataFrame's values equal the JSON rows', column by column, exactly."""
    assert len(frame) == len(rows)
    for i, row in enumerate(rows):
        for column in columns:
            got = frame.iloc[i][column]
            assert got == row[column], (i, column, got, row[column])


def test_gpu_is_the_clis():
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    doc = cli_json("gpu", TWO_RANKS)
    frame = opscope.gpu(t)
    temporal = [dict(r["temporal"], rank=r["rank"], device=r["device"],
                     communication_overlap_pct=r["communication_overlap_pct"]) for r in doc["ranks"]]
    assert_rows_equal(frame, temporal, list(temporal[0].keys()))
    assert frame.attrs["across"] == doc["across"]
    # Options pass as the command line's.
    excluded = cli_json("gpu", "--exclude-last-step", "--kernel-wait-us", "10", TWO_RANKS)
    frame = opscope.gpu(t, exclude_last_step=True, kernel_wait_us=10)
    assert list(frame["busy_ns"]) == [r["temporal"]["busy_ns"] for r in excluded["ranks"]]
    assert list(frame["busy_ns"]) != [r["temporal"]["busy_ns"] for r in doc["ranks"]]
    streams = opscope.gpu_streams(t)
    assert len(streams) == sum(len(r["streams"]) for r in doc["ranks"])
    assert list(streams["busy_ns"]) == [s["busy_ns"] for r in doc["ranks"] for s in r["streams"]]
    assert "idle_host_wait_time_ns" in streams.columns
    types = opscope.kernel_types(t)
    assert list(types["time_ns"]) == [c["time_ns"] for r in doc["ranks"] for c in r["combinations"]]


def test_stats_op_is_the_clis_with_tfprof_options():
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    rows = cli_json("stats", "op", "-order_by", "self_cpu_micros", "-min_micros", "100", TWO_RANKS)
    frame = opscope.stats_op(t, order_by="self_cpu_micros", min_micros=100)
    assert_rows_equal(frame, rows, ["name", "occurrence", "cpu_ns", "self_cpu_ns", "accelerator_ns"])
    assert list(frame["self_cpu_ns"]) == sorted(frame["self_cpu_ns"], reverse=True)
    # Input shapes stay lists of [shape, count] pairs, as in the JSON.
    shapes = opscope.stats_op(t, select="input_shapes")
    rows = {r["name"]: r["input_shapes"] for r in cli_json("stats", "op", "-select", "input_shapes", TWO_RANKS)}
    assert all(shapes.iloc[i]["input_shapes"] == rows[shapes.iloc[i]["name"]] for i in range(len(shapes)))
    kernels = opscope.stats_kernel(t)
    expected = cli_json("stats", "kernel", TWO_RANKS)
    assert_rows_equal(kernels, expected, ["name", "total_ns", "instances", "median_ns"])


def test_steps_are_the_clis():
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    doc = cli_json("steps", TWO_RANKS)
    frame = opscope.steps(t)
    rows = [dict(step, rank=s["rank"]) for s in doc["sources"] for step in s["steps"]]
    assert_rows_equal(frame, rows, ["rank", "name", "start_ns", "dur_ns", "device_busy_ns", "kernels"])
    assert frame.attrs["across"] == doc["across"]


def test_every_report_command_is_the_clis():
    """Every report command of the engine's table, enumerated: its JSON document, its
    text and each of its frames come from the result itself (no command line), and
    equal what the command line prints."""
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    usage = subprocess.run([CLI, "--help"], check=True, capture_output=True, text=True).stdout
    assert len(opscope.REPORT_COMMANDS) >= 6
    for name, command in opscope.REPORT_COMMANDS.items():
        words = name.split()
        assert f"  {words[0]} " in usage, name
        assert opscope.report(t, name) == cli_json(*words, TWO_RANKS), name
        text = subprocess.run([CLI, *words, "--wide", "--no-cache", str(TWO_RANKS)], check=True,
                              capture_output=True, text=True).stdout
        assert opscope.text(t, name) == text, name
        frames = opscope.frames(t, name)
        assert list(frames) == command["frames"], name
        for frame in frames.values():
            assert len(frame.columns) > 0, name
    # A frame holds the figures of the document it comes from, exactly.
    doc = cli_json("stats", "kernel", "--limit", "5", TWO_RANKS)
    kernels = opscope.frames(t, "stats kernel", limit=5)["kernels"]
    assert kernels.to_dict("records") == doc


def test_flame_and_report_write_their_files(tmp_path):
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    svg, html = tmp_path / "flame.svg", tmp_path / "job.html"
    opscope.text(t, "flame", output=svg)
    opscope.text(t, "report", output=html)
    assert svg.read_text().lstrip().startswith("<?xml") or "<svg" in svg.read_text()[:2000]
    assert "<html" in html.read_text()[:2000].lower()
    # The page is the command line's, byte for byte (run on the model, not through it).
    cli_page = tmp_path / "cli.html"
    subprocess.run([CLI, "report", "-q", "--no-cache", "-o", str(cli_page), str(TWO_RANKS)], check=True,
                   capture_output=True)
    assert html.read_bytes() == cli_page.read_bytes()
    said = opscope.text(t, "flame", output=svg, cpu_only=True, title="cpu", force=True)
    assert said.startswith(f"wrote {svg}"), said
    assert ">cpu<" in svg.read_text()
    with pytest.raises(opscope.Error, match="already exists"):
        opscope.text(t, "report", output=html)
    with pytest.raises(TypeError, match="no_such"):
        opscope.text(t, "flame", output=svg, no_such=1)


def test_save_writes_as_convert_does(tmp_path):
    """A loaded trace saved in each format: the Perfetto file reads back with the same
    slices, the folded stacks and the dataset are what `opscope convert` writes from the
    same trace, a name that says another format than `to` and an existing file without
    `force` are refused."""
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    said = t.save(tmp_path / "t.pftrace")
    assert "slices" in said
    back = opscope.load(tmp_path / "t.pftrace", cache=False)
    assert back.slices.num_rows == t.slices.num_rows
    t.save(tmp_path / "t.folded")
    subprocess.run([CLI, "convert", "-q", "--no-cache", str(TWO_RANKS), "-o",
                    str(tmp_path / "cli.folded")], check=True, capture_output=True)
    assert (tmp_path / "t.folded").read_text() == (tmp_path / "cli.folded").read_text()
    t.save(tmp_path / "data", to="parquet")
    assert sorted(p.name for p in (tmp_path / "data").rglob("slices.parquet")) == ["slices.parquet"] * 2
    with pytest.raises(opscope.Error, match="already exists"):
        t.save(tmp_path / "t.pftrace")
    t.save(tmp_path / "t.pftrace", force=True)
    with pytest.raises(opscope.Error, match="the name says json but --to says svg"):
        t.save(tmp_path / "x.json", to="svg")
    with pytest.raises(opscope.Error, match="no format"):
        t.save(tmp_path / "x.bin", to="pdf")


def test_reports_of_a_trace_without_them_have_their_columns(tmp_path):
    """A CPU-only trace: no GPU rows, no steps, but the columns a notebook indexes."""
    path = tmp_path / "cpu.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}')
    t = opscope.load(path)
    full = {"gpu": opscope.gpu, "kernel_types": opscope.kernel_types, "stats_kernel": opscope.stats_kernel,
            "steps": opscope.steps}
    for name, report in full.items():
        frame = report(t)
        assert len(frame) == 0, name
    assert opscope.gpu(t)["busy_ns"].sum() == 0
    assert opscope.stats_kernel(t).columns.tolist()[:3] == ["name", "time_pct", "total_ns"]
    ops = opscope.stats_op(t)
    assert ops["name"].tolist() == ["aten::mm"] and ops["occurrence"].tolist() == [1]
    if TWO_RANKS.exists():
        # The empty frames' columns are the full ones'.
        full_trace = opscope.load(TWO_RANKS)
        for name, report in full.items():
            assert set(report(t).columns) <= set(report(full_trace).columns), name


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(opscope.Error, match="no-such-trace"):
        opscope.load(tmp_path / "no-such-trace.json")
    cut = tmp_path / "cut.json"
    cut.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": "X", "na')
    # A truncated file is an error that offers what was read before the cut.
    with pytest.raises(opscope.Error, match=r"cut\.json: byte 97: .*\(1 slice, instant or sample came before the error: --partial analyses it\)"):
        opscope.load(cut, cache=False)
    assert opscope.load(cut, cache=False, partial=True).slices.num_rows == 1
    if TWO_RANKS.exists():
        t = opscope.load(TWO_RANKS)
        with pytest.raises(opscope.Error, match="no-such-option"):
            opscope.gpu(t, no_such_option=3)
        with pytest.raises(opscope.Error, match="does not report on a loaded trace"):
            t.run("record")
        with pytest.raises(ValueError, match="no table"):
            t.table("nope")


def test_paths_may_be_bytes_and_anything_else_is_named(tmp_path):
    trace = tmp_path / "one.json"
    trace.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]')
    # As os.listdir(b".") and os.fsencode give them.
    assert opscope.load(os.fsencode(trace), cache=False).slices.num_rows == 1
    other = tmp_path / "two.json"
    shutil.copy(trace, other)
    assert opscope.load([os.fsencode(trace), other], cache=False).slices.num_rows == 2
    with pytest.raises(TypeError, match="not int: 3"):
        opscope.load(3)
    with pytest.raises(TypeError, match="not NoneType"):
        opscope.load([trace, None])


def test_python_m_opscope_records_as_the_cli_does(tmp_path):
    """`python -m opscope record` and the `opscope` command record the same program to
    the same ops, and pass its exit status through."""
    program = tmp_path / "train.py"
    program.write_text(
        "import sys\n"
        "import torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))\n"
        "for _ in range(3):\n"
        "    m(torch.randn(8, 32)).sum().backward()\n"
        "sys.exit(3)\n"
    )
    # The recorded program runs in the interpreter that has torch (the test oracles'
    # venv on CI); this venv has only the wheel.
    python = os.environ.get("OPSCOPE_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("OPSCOPE_PYTHON (a Python with torch) is not set on CI")
        pytest.skip("OPSCOPE_PYTHON (a Python with torch) not set")
    ops = {}
    for how, command in [
        ("module", [sys.executable, "-m", "opscope"]),
        ("command", [CLI]),
    ]:
        session = tmp_path / how
        run = subprocess.run(
            [*command, "record", "-q", "-o", str(session), "--", python, str(program)],
            capture_output=True, text=True, timeout=600,
        )
        assert run.returncode == 3, run.stderr
        rows = cli_json("stats", "op", session)
        ops[how] = {r["name"]: r["occurrence"] for r in rows}
    assert ops["module"]["aten::linear"] == 6
    assert ops["module"] == ops["command"]
    # The session reads in Python too.
    t = opscope.load(tmp_path / "module")
    assert t.rows("slices") == cli_json("info", tmp_path / "module")["slices"]
    names = Counter(t.slices.column("name").to_pylist())
    assert names["aten::linear"] == 6


def test_sampled_stacks_of_a_recording_read_as_the_cli_counts_them(tmp_path):
    """A recording's sampled stacks (on by default) are ``t.samples``: the rows ``info``
    counts, and per innermost Python function the time ``stats hot`` gives it (native
    frames under it, where the kernel let them be sampled, count for it there)."""
    session = tmp_path / "s"
    subprocess.run(
        [CLI, "record", "-q", "--no-python", "--sample-hz", "200", "-o", str(session), "--",
         sys.executable, str(REPO / "tests/record/stacks_short.py")],
        check=True, capture_output=True, timeout=600,
    )
    info = cli_json("info", session)
    t = opscope.load(session, cache=False)
    assert t.samples.num_rows == info["stack_samples"] > 0
    running = [r for r in t.samples.to_pylist() if r["running"]]
    assert len(running) == info["stack_samples_on_cpu"]

    def python_frames(stack):
        """The stack's Python frames, outermost first: `function (file.py:line)`."""
        return [f for f in stack.split(";")
                if f.rsplit(" (", 1)[-1].split(":")[0].endswith(".py")
                or f.rsplit(" (", 1)[-1].startswith("<")]

    own = Counter()
    for r in running:
        frames = python_frames(r["stack"])
        if frames:
            own[frames[-1].rsplit(" (", 1)[0]] += r["period"]
    hot = cli_json("stats", "hot", session)
    spin = next(f for f in hot["functions"] if f["function"] == "spin")
    assert own["spin"] == spin["self_ns"] > 0
    # The stack is outermost first: the Python frames from `<module>` to `spin`.
    stacks = [python_frames(r["stack"]) for r in running]
    in_spin = [f for f in stacks if f and f[-1].startswith("spin (")]
    assert in_spin and all(f[0].startswith("<module> (") for f in in_spin)


def test_a_recording_in_this_process_gives_its_signals_back(tmp_path):
    """`record` run by `opscope.main` in a Python process forwards and ignores signals
    while the program runs, and puts Python's handlers back after, flags and all: Ctrl-C
    (SIGINT) is a KeyboardInterrupt again."""
    import signal

    status = opscope.main(["record", "-q", "--no-python", "-o", str(tmp_path / "s"), "--",
                           sys.executable, "-c", "pass"])
    assert status == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        # The handler runs at the next bytecode boundaries.
        for _ in range(1000):
            pass


def test_options_are_passed_as_one_word(tmp_path):
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    # A value that starts with a dash stays a value (here refused as a number).
    with pytest.raises(opscope.Error, match="-5"):
        opscope.gpu(t, kernel_wait_us="-5x")
    numpy = pytest.importorskip("numpy")
    assert opscope.gpu(t, exclude_last_step=numpy.bool_(True)).equals(opscope.gpu(t, exclude_last_step=True))
    with pytest.raises(ValueError, match="name a command"):
        t.run("")


def test_ctrl_c_interrupts_a_load(tmp_path):
    """A load that cannot end (a named pipe nobody writes) is interrupted by Ctrl-C as
    any Python call is, in a process of its own."""
    fifo = tmp_path / "never.json"
    os.mkfifo(fifo)
    script = (
        "import os, signal, sys, threading, opscope\n"
        "threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    opscope.load(sys.argv[1], cache=False)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    os._exit(0)\n"
        "os._exit(1)\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(fifo)], capture_output=True,
                         text=True, timeout=60)
    assert run.stdout.strip() == "interrupted", run.stderr


def test_advise_is_the_clis_and_the_report_shows_inline():
    need(TWO_RANKS)
    t = opscope.load(TWO_RANKS)
    doc = cli_json("advise", TWO_RANKS)
    frame = opscope.advise(t)
    assert len(frame) == len(doc["findings"]) > 0
    assert_rows_equal(frame, doc["findings"], ["rule", "severity", "scope", "title", "saving_ns"])
    assert frame.attrs["verdict"] == doc["verdict"]
    assert frame.attrs["not_checked"] == doc["not_checked"]
    # The findings come ranked by what they save.
    assert list(frame["saving_ns"]) == sorted(frame["saving_ns"], reverse=True)
    page = opscope.report(t)
    assert doc["verdict"].split(":")[0] in page.html
    assert "<details>" in page.html
    shown = page._repr_html_()
    assert shown.startswith("<iframe") and "srcdoc=" in shown and "<details>" not in shown


def test_diff_is_the_clis_by_name_and_matched():
    control = need(TRACES / "kineto/hta/trace_diff/control")
    test = need(TRACES / "kineto/hta/trace_diff/test")
    a, b = opscope.load(control), opscope.load(test)
    # By name: HTA's compare_traces columns, the command line's numbers.
    doc = cli_json("diff", control, test, "--by", "name", "--device", "gpu")
    frame = opscope.diff(a, b, by="name", device="gpu")
    assert list(frame["name"]) == [line["name"] for line in doc["lines"]]
    assert list(frame["test_counts"]) == [line["counts"][1] for line in doc["lines"]]
    assert list(frame["diff_duration"]) == [line["diff_duration_us"] for line in doc["lines"]]
    assert set(frame["change"]) <= {"added", "deleted", "increased", "decreased", "unchanged"}
    assert frame.attrs["iterations"] == doc["iterations"]
    # Matched lines, and paths loaded as `load` does.
    doc = cli_json("diff", control, test)
    frame = opscope.diff(control, test)
    lines = doc["host"] + doc["device"]
    assert list(frame["path"]) == [line["path"] for line in lines]
    assert list(frame["verdict"]) == [line["verdict"] for line in lines]
    assert frame.attrs["mean_step_change_ns"] == doc["mean_step_change_ns"]
    # Parts of one trace: two ranks.
    doc = cli_json("diff", TWO_RANKS, "--rank", "0", "--rank", "1")
    frame = opscope.diff(opscope.load(TWO_RANKS), rank=[0, 1])
    assert [s["rank"] for s in frame.attrs["sides"]] == [0, 1]
    assert list(frame["mean_change_ns"]) == [line["mean_change_ns"] for line in doc["host"] + doc["device"]]
    # Whole traces of two ranks: lines rank by rank, each rank's split.
    doc = cli_json("diff", TWO_RANKS, TWO_RANKS, "--top", "100000")
    frame = opscope.diff(TWO_RANKS, TWO_RANKS, top=100000)
    assert frame.attrs["ranks"] == [0, 1] == doc["ranks"]
    assert list(frame["rank"]) == [line["rank"] for line in doc["host"] + doc["device"]]
    assert set(frame["rank"]) == {0, 1}
    assert [s["rank"] for s in frame.attrs["splits"]] == [0, 1]
    with pytest.raises(opscope.Error, match="--rank twice or --steps"):
        opscope.diff(a)
