"""`opscope.load` in Python against the CLI's load, in time and memory: on a directory of
eight rank traces (made from the shared two-rank `hta/trace_filter`), the shared ResNet-50
Kineto trace, and the 2 GB synthetic Kineto trace of bench/view.py.

The CLI is timed as a whole `opscope info` process; Python as `opscope.load()` right
after `import opscope` (the import is printed apart), as a script does it, each warm
(the model cache made by a first run) and cold (parsing the files). Then every table is
made into Arrow (which imports pyarrow). Memory: the CLI's peak RSS, against the Python
process's peak RSS above what it held after `import opscope`, less what importing
pyarrow itself mapped; the bar is the CLI's plus the Arrow buffers. Runs alternate;
minimum and median of --repeat runs. (pyarrow imports numpy, whose BLAS threads spin
for about 0.1 s after the import: a load started within it, on two cores, took 1.15×
as long.)

Then the reports as DataFrames on a loaded trace (`opscope.gpu(t)`, `steps(t)`,
`stats_op(t)`), each call timed in the same process; with --baseline-python (a Python
with another build of opscope, e.g. the previous commit's wheel) both run in turn and
the ratio is printed.

    pip install .   # into the Python that runs this, or name one with --python
    python3 bench/python.py [--repeat 5] [--opscope target/release/opscope] [--no-2g]
                            [--baseline-python PY]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

# Run in a fresh interpreter per measurement, so each peak RSS is its own.
CHILD = r"""
import json, sys, time
def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key + ":"))
begun = time.perf_counter()
import opscope
imported = time.perf_counter()
baseline = status("VmRSS")
t = opscope.load(sys.argv[1], cache=sys.argv[2] == "warm")
loaded = time.perf_counter()
peak_loading = status("VmHWM")
before = status("VmRSS")
import pyarrow
libraries = status("VmRSS") - before
made_begun = time.perf_counter()
tables = {name: t.table(name) for name in opscope.Trace.TABLES}
made = time.perf_counter()
print(json.dumps({
    "import_s": imported - begun, "load_s": loaded - imported, "tables_s": made - made_begun,
    "over_bytes": max(peak_loading - baseline, status("VmHWM") - baseline - libraries),
    "arrow_bytes": sum(x.nbytes for x in tables.values()),
}))
"""


# The reports on one loaded model: each function called `repeat` times in turn.
REPORTS_CHILD = r"""
import json, sys, time
import opscope
# What a first report imports (pandas, pyarrow) is not the report's time.
import pandas, pyarrow
t = opscope.load(sys.argv[1])
repeat = int(sys.argv[2])
times = {}
for _ in range(repeat):
    for name in ("gpu", "steps", "stats_op"):
        begun = time.perf_counter()
        frame = getattr(opscope, name)(t)
        times.setdefault(name, []).append(time.perf_counter() - begun)
        assert len(frame.columns) > 0
print(json.dumps(times))
"""


def run_measured(argv) -> tuple[float, int, str]:
    """Wall time, peak RSS in bytes, and stdout of one process."""
    begun = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        took = time.perf_counter() - begun
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {err.read().decode(errors='replace')[-2000:]}")
        return took, usage.ru_maxrss * 1024, out.read().decode()


def find_python(given):
    candidates = [given] if given else [sys.executable, str(Path.home() / ".cache/opscope-ci/venv-wheel/bin/python")]
    for python in candidates:
        if python and subprocess.run([python, "-c", "import opscope"], capture_output=True).returncode == 0:
            return python
    raise SystemExit("no Python here imports opscope: `pip install .` first, or name one with --python")


def ms(values) -> str:
    return f"{min(values) * 1e3:,.0f} / {statistics.median(values) * 1e3:,.0f} ms"


def mib(n) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--python", help="a Python that imports opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    parser.add_argument("--no-2g", action="store_true", help="leave out the 2 GB trace")
    parser.add_argument("--baseline-python", help="a Python with another build of opscope, for the reports' ratio")
    args = parser.parse_args()
    python = find_python(args.python)
    version = subprocess.run([python, "-c", "import opscope; print(opscope.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="opscope-bench-python-") as tmp:
        from sql import eight_ranks

        inputs = [
            ("8 ranks (trace_filter ×4)", eight_ranks(args.shared, Path(tmp) / "ranks"), args.repeat),
            ("resnet50 (Kineto, tb_plugin)", args.shared / "traces/kineto/kineto-tb_plugin/resnet50_num_workers_0",
             args.repeat),
        ]
        if not args.no_2g:
            from view import two_gb_trace

            big = two_gb_trace(args.shared)
            inputs.append((f"2 GB Kineto ({big.stat().st_size / 2**30:.1f} GiB)", big, max(2, args.repeat // 2)))
        run = runinfo.start(repeat=args.repeat, module=version)
        rows = []
        print(f"opscope {version} (Python module) against {args.opscope}; min / median of runs")
        print()
        print("| data | cache | CLI `info` (process) | `opscope.load()` | load / CLI (median) "
              "| `import opscope` | all tables to Arrow | CLI peak RSS | Python peak RSS over `import opscope` "
              "| Arrow buffers | Python over (CLI + Arrow) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for label, trace, repeat in inputs:
            for mode in ("warm", "cold"):
                cli_argv = [str(args.opscope), "info", "-q", str(trace)] + (["--no-cache"] if mode == "cold" else [])
                py_argv = [python, "-c", CHILD, str(trace), mode]
                if mode == "warm":  # each makes its own cache entry (keyed by its own code)
                    run_measured(cli_argv)
                    run_measured(py_argv)
                cli_times, py_times, imports, tables = [], [], [], []
                cli_rss, py_over, arrow = 0, 0, 0
                for _ in range(repeat):
                    took, rss, _ = run_measured(cli_argv)
                    cli_times.append(took)
                    cli_rss = max(cli_rss, rss)
                    _, _, out = run_measured(py_argv)
                    got = json.loads(out)
                    py_times.append(got["load_s"])
                    imports.append(got["import_s"])
                    tables.append(got["tables_s"])
                    py_over = max(py_over, got["over_bytes"])
                    arrow = got["arrow_bytes"]
                ratio = statistics.median(py_times) / statistics.median(cli_times)
                print(f"| {label} | {mode} | {ms(cli_times)} | {ms(py_times)} | {ratio:.2f}× | {ms(imports)} "
                      f"| {ms(tables)} | {mib(cli_rss)} | {mib(py_over)} | {mib(arrow)} "
                      f"| {py_over / (cli_rss + arrow):.2f}× |")
                rows.append({"data": label, "cache": mode, "cli_s": cli_times, "load_s": py_times,
                             "import_s": imports, "tables_s": tables, "cli_rss": cli_rss,
                             "python_over_import_rss": py_over, "arrow_bytes": arrow})
        print()
        print("Reports as DataFrames on a loaded trace (warm), each call; min / median")
        print()
        baseline = args.baseline_python
        print("| data | report | this build | " + ("baseline | baseline / this (median) |" if baseline else ""))
        print("|---|---|---|" + ("---|---|" if baseline else ""))
        report_rows = []
        for label, trace, repeat in inputs:
            ours, theirs = {}, {}
            for _ in range(2):  # alternate the two builds, each warm (its own cache entry)
                for interpreter, into in [(python, ours)] + ([(baseline, theirs)] if baseline else []):
                    _, _, out = run_measured([interpreter, "-c", REPORTS_CHILD, str(trace), str(repeat)])
                    for name, times in json.loads(out).items():
                        into.setdefault(name, []).extend(times)
            for name, times in ours.items():
                line = f"| {label} | `opscope.{name}(t)` | {ms(times)} |"
                if baseline:
                    before = theirs[name]
                    line += f" {ms(before)} | {statistics.median(before) / statistics.median(times):.2f}× |"
                print(line)
                report_rows.append({"data": label, "report": name, "s": times, "baseline_s": theirs.get(name)})
        rows.append({"reports": report_rows})
        runinfo.finish(run, rows)


if __name__ == "__main__":
    main()
