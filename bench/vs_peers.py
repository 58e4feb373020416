"""Side-by-side benchmarks of opscope against peer tools on real traces.

--task info (the default): loading a Kineto trace.
  opscope    `opscope info FILE --format json`
  json.load  Python's `json.load(gzip.open(FILE))` alone: what any Python reader pays
  HTA        HolisticTraceAnalysis `TraceAnalysis(trace_dir=DIR)`, DIR holding only FILE

--task gpu: loading a Kineto trace (one file, or a folder of per-rank files) and
answering where the GPU time goes and which ops take it.
  opscope    `opscope gpu --exclude-last-step DIR --format json`, then
             `opscope stats op DIR --format json`: two processes, wall times added,
             the larger peak RSS. Each round starts with an empty model cache (a fresh
             OPSCOPE_CACHE_DIR): `gpu` parses the trace and saves its model, `stats op`
             reads that model back, as a user's second command on a trace does.
  opscope-no-cache  the same two commands with --no-cache: each parses the trace
  HTA        the same load, then get_temporal_breakdown, get_gpu_kernel_breakdown,
             get_idle_time_breakdown (all ranks) and get_comm_comp_overlap

--task ctf: reading a CTF (LTTng) trace, every event of it.
  opscope      `opscope info DIR --format json`
  babeltrace2  `babeltrace2 DIR -c sink.utils.counter --params=step=+0`: decodes every
               event and prints how many messages of each kind it saw
  on the largest shared CTF trace (ctf/tracecompass/memory) and on a trace of a few
  million events that this script records itself with LTTng (below). The event count is
  babeltrace2's "Event messages"; each tool's events/s is that count over its wall time.
  opscope's JSON gives the events it read per file (`files[].events`) beside what it
  made of them (instants, slices, counter samples); the script checks that count is
  babeltrace2's.

  The recorded trace follows the "large trace without loss: blocking channel" recipe of
  shared/peer-outputs/lttng-session.txt: a user-space session (a session daemon is
  started with `lttng-sessiond --daemonize --no-kernel` if none answers, and left
  running), one blocking channel `bigch` (4 MiB x 8 sub-buffers, so no event is lost)
  with the `lttng_ust_libc:*` events and the vpid, vtid and procname contexts, and this
  Python running `json.dumps` --lttng-iterations times (default 2,000,000: about 2.4
  million malloc/free/realloc/calloc events, 108 MiB with those contexts) under
  LD_PRELOAD=liblttng-ust-libc-wrapper.so.1. It is recorded into
  ${OPSCOPE_CACHE:-~/.cache/opscope-ci}/bench-lttng/libc-python-N, with a stamp file
  holding the recipe, and reused while the stamp matches. Both tools read its stream
  folder <out>/ust/uid/<uid>/64-bit. Without `lttng` (Debian packages lttng-tools and
  liblttng-ust-dev) that trace is skipped with a message.

--task ctf-own: reading the CTF that opscope itself writes.
  opscope      `opscope info DIR --format json`
  babeltrace2  `babeltrace2 DIR -c sink.utils.counter --params=step=+0`
  on the CTF that `opscope convert FILE -o DIR --to ctf` writes (untimed, into a
  temporary folder, with the --opscope binary) from each of the two largest shared
  Kineto traces (CTF_OWN below) and from bench/view.py's synthetic Kineto trace at
  0.25 GB (about 2 M CTF events; made once into ~/.cache/opscope-bench): slice begins
  and ends with typed args, instants and counter samples. Events and rates are counted
  as in --task ctf.

--task xplane: importing an XSpace protobuf (*.xplane.pb), as TensorFlow, JAX and
PyTorch/XLA profilers write them.
  opscope  `opscope info FILE --format json`
  xprof    xprof's trace_viewer conversion, the one that made the golden files in
           traces/xplane/xprof-golden/ (it reproduces them but for the `flow` ids in args):
           `xprof.convert.raw_to_tool_data.xspace_to_tool_data([FILE], "trace_viewer",
           {"use_saved_result": False})`, which returns the Chrome-trace JSON as a
           string; FILE is a link in a fresh temporary folder, xprof's session folder
  on every *.xplane.pb under traces/xplane/, largest first. How many trace events
  xprof's JSON holds is counted in one more, untimed, run: parsing that JSON is not part
  of the conversion.

For each trace, one run of this script measures, each in its own fresh subprocess, the
wall time and the peak RSS (ru_maxrss of that child, from os.wait4) of each tool.

The tools are interleaved round by round (after untimed warm-up rounds), and the medians
are reported with their ratios to opscope, so that machine noise hits all tools alike.
Wall time is the whole process, interpreter start and imports included; "load s" is the
time the Python tools spend in the load (or conversion) call itself.

Linux counts in a child's ru_maxrss the memory of the process it was spawned from, up to
the exec, so a child shows max(this script's peak RSS, its own peak). This script never
holds a trace in memory, to keep that floor low (about 16 MiB), and prints it (the
ru_maxrss of `true` spawned the same way) beside each table: a figure above the floor is
the tool's own peak; a figure at the floor means "at most this".

Run it from the repository root with the venv that bench/setup-venv.sh makes (it holds
HTA and xprof; babeltrace2 is the Debian package):

    "$(bench/setup-venv.sh | tail -n 1)" bench/vs_peers.py [--task info|gpu|ctf|ctf-own|xplane]
        [--repeat 3] [--lttng-iterations 2000000] [--json OUT]
"""

import argparse
import collections.abc
import gzip
import importlib.util
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent

# Kineto traces under the shared data folder (--shared): a directory and the pattern of
# its per-rank files (each task lists the traces it runs on).
TRACES = {
    "info": [
        ("kineto/hta/mtia_trace_single_rank", "mtia_rank_0.json.gz"),
        ("kineto/hta/df_index_resolver", "df_index_resolver.json.gz"),
        ("kineto/kineto-tb_plugin/resnet50_num_workers_0", "worker0.*.pt.trace.json.gz"),
    ],
    "gpu": [
        ("kineto/hta/trace_filter", "sampled_rank-*.json.gz"),
        ("kineto/kineto-tb_plugin/resnet50_num_workers_0", "worker0.*.pt.trace.json.gz"),
        ("kineto/hta/mtia_trace_single_rank", "mtia_rank_0.json.gz"),
        ("kineto/hta/df_index_resolver", "df_index_resolver.json.gz"),
    ],
}
# The largest shared CTF trace (328k events, 12 MB); the recorded one comes after it.
CTF_SHARED = ["ctf/tracecompass/memory"]
XPLANE_PATTERN = "xplane/**/*.xplane.pb"
# --task ctf-own: the Kineto traces whose CTF (as opscope writes it) is read.
CTF_OWN = [
    "kineto/hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
]
# And a larger one, where reading outweighs starting a process: bench/view.py's
# synthetic Kineto trace (ns_resolution_trace replicated) at this many GB of JSON.
CTF_OWN_SYNTHETIC_GB = 0.25

TASKS = {
    "info": ("opscope", "json.load", "HTA"),
    "gpu": ("opscope", "opscope-no-cache", "HTA"),
    "ctf": ("opscope", "babeltrace2"),
    "ctf-own": ("opscope", "babeltrace2"),
    "xplane": ("opscope", "xprof"),
}
WORKER_FLAG = "--worker"
# In the gpu task, opscope's two commands share a model cache that is empty at the
# start of each round (on the file system of ~/.cache, where users have it); every
# other opscope run has the cache turned off (OPSCOPE_CACHE_DIR=off, set in main), so
# that it parses its input every time.
FRESH_CACHE = ("gpu", "opscope")
OPSCOPE_KEYS = ("slices", "instants", "counter_samples", "flows", "model_bytes")

# The LTTng recipe of shared/peer-outputs/lttng-session.txt (blocking channel, no loss).
LTTNG_CHANNEL = "bigch"
LTTNG_APP = (
    "import json; x=[json.dumps({{'a':list(range(i%50))}}) for i in range({iterations})]; "
    "print(len(x))"
)
LTTNG_APP_ENV = {
    "LTTNG_UST_ALLOW_BLOCKING": "1",
    "LD_PRELOAD": "liblttng-ust-libc-wrapper.so.1",
}
LTTNG_PACKAGES = "lttng-tools liblttng-ust-dev"


@dataclass
class Run:
    wall_s: float
    max_rss_kib: int
    stdout: bytes

    @property
    def report(self) -> dict:
        """What the child printed: opscope's JSON, or a Python worker's counts."""
        return json.loads(self.stdout)


def run_worker(tool: str, task: str, path: str, *flags: str) -> None:
    """Child side of a Python tool: load PATH (and for the gpu task, analyse it), then
    print one JSON line of counts. With the flag `count`, xprof also parses its output
    to count the trace events."""
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the tool's own output goes to stderr, which the parent keeps aside
    if tool == "json.load":
        start = time.perf_counter()
        with gzip.open(path) as f:
            trace = json.load(f)
        load_s = time.perf_counter() - start
        counts = {"events": len(trace["traceEvents"])}
    elif tool == "HTA":
        from hta.trace_analysis import TraceAnalysis

        start = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=path)
        load_s = time.perf_counter() - start
        rows = {rank: len(df) for rank, df in analysis.t.traces.items()}
        if not rows or min(rows.values()) == 0:
            sys.exit(f"HTA parsed no events from {path}: rows per rank {rows}")
        counts = {"rows": sum(rows.values()), "ranks": sorted(rows)}
        if task == "gpu":
            start = time.perf_counter()
            temporal = analysis.get_temporal_breakdown(visualize=False)
            analysis.get_gpu_kernel_breakdown(visualize=False)
            analysis.get_idle_time_breakdown(ranks=sorted(rows), visualize=False)
            analysis.get_comm_comp_overlap(visualize=False)
            counts["analysis_s"] = time.perf_counter() - start
            counts["idle_us"] = [float(v) for v in temporal["idle_time(us)"]]
    elif tool == "xprof":
        from xprof.convert import raw_to_tool_data

        start = time.perf_counter()
        data, _ = raw_to_tool_data.xspace_to_tool_data(
            [path], "trace_viewer", {"use_saved_result": False}
        )
        load_s = time.perf_counter() - start
        if not data:
            sys.exit(f"xprof made no trace_viewer data from {path}")
        counts = {"json_chars": len(data)}
        if "count" in flags:
            counts["events"] = len(json.loads(data)["traceEvents"])
    else:
        sys.exit(f"unknown worker tool {tool!r}")
    json.dump({"load_s": load_s, **counts}, report)
    report.close()


def measure_all(commands: list[list[str]], fresh_cache: bool = False) -> Run:
    """Run COMMANDS one after another: wall times add up, the peak RSS is the larger,
    and the report is the first command's. With FRESH_CACHE (the argument) they
    share an opscope model cache that starts empty."""
    home_cache = Path.home() / ".cache"
    home_cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="opscope-bench-cache-", dir=home_cache) as cache:
        env = {"OPSCOPE_CACHE_DIR": cache} if fresh_cache else None
        runs = [measure(argv, env) for argv in commands]
    return Run(
        sum(r.wall_s for r in runs), max(r.max_rss_kib for r in runs), runs[0].stdout
    )


def measure(argv: list[str], env: dict | None = None) -> Run:
    """Run ARGV as a fresh process, with its stderr kept aside and shown if it fails."""
    code, wall_s, max_rss_kib, stdout, stderr_tail = spawn(argv, env)
    if code != 0:
        sys.exit(f"exit code {code} from: {' '.join(argv)}\n--- stderr (tail) ---\n{stderr_tail}")
    return Run(wall_s, max_rss_kib, stdout)


def spawn(argv: list[str], env: dict | None = None) -> tuple[int, float, int, bytes, str]:
    """Run ARGV as a fresh process (stdin /dev/null; ENV added to this one's): its exit
    code, wall time, peak RSS (KiB), stdout, and the tail of its stderr if it failed.
    The stderr is read only then, so as not to raise this process's peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
            (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
        ]
        start = time.perf_counter()
        pid = os.posix_spawnp(argv[0], argv, {**os.environ, **(env or {})}, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        wall_s = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        tail = ""
        if code != 0:
            err.seek(max(0, err.seek(0, os.SEEK_END) - 4000))
            tail = err.read().decode(errors="replace")
        out.seek(0)
        return code, wall_s, usage.ru_maxrss, out.read(), tail


def run_rounds(
    commands: dict[str, list[list[str]]], repeat: int, warmup: int, task: str = ""
) -> dict[str, list[Run]]:
    """Run each tool's COMMANDS once per round, the tools one after the other in every
    round, and keep the runs of the REPEAT rounds after the WARMUP ones."""
    runs: dict[str, list[Run]] = {tool: [] for tool in commands}
    for round_ in range(warmup + repeat):
        for tool, argvs in commands.items():
            run = measure_all(argvs, fresh_cache=(task, tool) == FRESH_CACHE)
            if round_ >= warmup:
                runs[tool].append(run)
    return runs


def timing(runs: list[Run]) -> dict:
    """Median wall time and peak RSS of RUNS, and each run's."""
    return {
        "wall_s": statistics.median(r.wall_s for r in runs),
        "peak_rss_mib": statistics.median(r.max_rss_kib for r in runs) / 1024,
        "runs": [{"wall_s": r.wall_s, "peak_rss_mib": r.max_rss_kib / 1024} for r in runs],
    }


def add_ratios(results: dict) -> None:
    """Each tool's median wall time and peak RSS over opscope's, when opscope ran."""
    if "opscope" not in results:
        return
    base = results["opscope"]
    for result in results.values():
        result["time_vs_opscope"] = result["wall_s"] / base["wall_s"]
        result["rss_vs_opscope"] = result["peak_rss_mib"] / base["peak_rss_mib"]


def rss_floor_mib() -> float:
    """The least peak RSS a child spawned by this process can show now."""
    return measure(["true"]).max_rss_kib / 1024


def print_results(
    heading: str,
    results: dict,
    column: tuple[str, collections.abc.Callable[[dict], str]] = ("load s", lambda r: fmt(r.get("load_s"), ".3f")),
) -> None:
    """A table of RESULTS under HEADING: one line per tool with its median wall time,
    COLUMN (a header and how to fill it), peak RSS and ratios to opscope; then the
    counts each tool reported."""
    mib_width = 13
    name_width = max(10, *(len(tool) for tool in results))
    print(f"\n== {heading}")
    with_ratios = "opscope" in results
    header = f"{'tool':<{name_width}} {'wall s':>8} {column[0]:>11} {'peak RSS MiB':>{mib_width}}"
    if with_ratios:
        header += f" {'time/opscope':>13} {'RSS/opscope':>12}"
    print(header)
    for tool, r in results.items():
        line = (
            f"{tool:<{name_width}} {r['wall_s']:>8.3f} {column[1](r):>11} "
            f"{r['peak_rss_mib']:>{mib_width}.1f}"
        )
        if with_ratios:
            line += f" {r['time_vs_opscope']:>12.2f}x {r['rss_vs_opscope']:>11.2f}x"
        print(line)
    for tool, r in results.items():
        counts = ", ".join(f"{key} {fmt(value, '.1f')}" for key, value in r["counts"].items())
        print(f"  {tool}: {counts}")


def fmt(value, spec: str) -> str:
    """VALUE formatted with SPEC if it is a float, as it is otherwise, "-" if None."""
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, float) else str(value)


# --- Kineto tasks: info and gpu -----------------------------------------------------


def json_size(files: list[Path]) -> int:
    """Decompressed size of FILES, read in chunks so as not to raise the RSS floor."""
    total = 0
    for file in files:
        with gzip.open(file) as f:
            total += sum(len(chunk) for chunk in iter(lambda: f.read(1 << 16), b""))
    return total


def find_traces(shared: Path, directory: str, pattern: str) -> list[Path]:
    matches = sorted((shared / directory).glob(pattern))
    if not matches:
        sys.exit(f"no {pattern} in {shared / directory}")
    return [m.resolve() for m in matches]


def counts_of(tool: str, task: str, report: dict, trace: str) -> dict:
    """What a tool found in TRACE; for opscope also the model's bytes per slice."""
    if not tool.startswith("opscope"):
        return {key: value for key, value in report.items() if key != "load_s"}
    if task == "gpu":
        ranks = report["ranks"]
        return {
            "ranks": len(ranks),
            "streams": sum(len(r["streams"]) for r in ranks),
            "idle_us": [r["temporal"]["idle_ns"] / 1000 for r in ranks],
        }
    missing = [key for key in OPSCOPE_KEYS if key not in report]
    if missing:
        sys.exit(f"`opscope info --format json` lacks {missing} for {trace}")
    counts = {key: report[key] for key in OPSCOPE_KEYS}
    slices = counts["slices"]
    counts["bytes_per_slice"] = counts["model_bytes"] / slices if slices else None
    return counts


def bench_kineto_trace(
    files: list[Path], task: str, tools: list[str], opscope: Path, repeat: int, warmup: int
) -> dict:
    """Median wall time, peak RSS and counts of each tool on the trace FILES (ranks)."""
    with tempfile.TemporaryDirectory(prefix="opscope-bench-") as trace_dir:
        # HTA reads a directory of per-rank traces: give it one holding only these
        # files; opscope reads the same directory.
        for file in files:
            (Path(trace_dir) / file.name).symlink_to(file)
        one = str(files[0]) if len(files) == 1 else trace_dir
        opscope_runs = {
            "info": [["info", one, "--format", "json"]],
            "gpu": [
                ["gpu", "--exclude-last-step", one, "--format", "json"],
                ["stats", "op", one],
            ],
        }[task]
        commands = {
            "opscope": [[str(opscope), *args] for args in opscope_runs],
            "opscope-no-cache": [[str(opscope), *args, "--no-cache"] for args in opscope_runs],
            "json.load": [[sys.executable, __file__, WORKER_FLAG, "json.load", task, one]],
            "HTA": [[sys.executable, __file__, WORKER_FLAG, "HTA", task, trace_dir]],
        }
        runs = run_rounds({tool: commands[tool] for tool in tools}, repeat, warmup, task)

    results = {}
    for tool, tool_runs in runs.items():
        in_python = not tool.startswith("opscope")
        load_s = statistics.median(r.report["load_s"] for r in tool_runs) if in_python else None
        results[tool] = {
            **timing(tool_runs),
            "load_s": load_s,
            "counts": counts_of(tool, task, tool_runs[-1].report, one),
        }
    add_ratios(results)
    return results


def bench_kineto(args: argparse.Namespace) -> dict:
    """--task info or gpu on the Kineto traces of TRACES; prints a table per trace."""
    output = {}
    for directory, pattern in TRACES[args.task]:
        files = find_traces(args.shared / "traces", directory, pattern)
        if len(files) > 1 and args.task != "gpu":
            sys.exit(f"--task {args.task} reads one file; {directory} has {len(files)}")
        json_bytes = json_size(files)
        gzip_bytes = sum(f.stat().st_size for f in files)
        results = bench_kineto_trace(
            files, args.task, args.tools, args.opscope, args.repeat, args.warmup
        )
        floor = rss_floor_mib()
        name = f"{directory}/{files[0].name}" if len(files) == 1 else f"{directory} ({len(files)} ranks)"
        mib = 1024 * 1024
        sizes = f"{gzip_bytes / mib:.1f} MiB gzip, {json_bytes / mib:.1f} MiB JSON"
        print_results(f"{name}  ({sizes}; peak RSS floor {floor:.1f} MiB)", results)
        output[name] = {
            "gzip_bytes": gzip_bytes,
            "json_bytes": json_bytes,
            "rss_floor_mib": floor,
            "tools": results,
        }
    return output


# --- CTF task -------------------------------------------------------------------------


def lttng_steps(session: str, out: str, python: str, iterations: int) -> list[tuple[dict, list[str]]]:
    """The recording, as (extra environment, argv) per step."""
    lttng_u = ["-s", session, "-u"]
    app = LTTNG_APP.format(iterations=iterations)
    return [
        ({}, ["lttng", "create", session, f"--output={out}"]),
        ({}, ["lttng", "enable-channel", *lttng_u, "--subbuf-size=4M", "--num-subbuf=8",
              "--blocking-timeout=inf", LTTNG_CHANNEL]),
        ({}, ["lttng", "enable-event", *lttng_u, "-c", LTTNG_CHANNEL, "lttng_ust_libc:*"]),
        ({}, ["lttng", "add-context", *lttng_u, "-c", LTTNG_CHANNEL,
              "-t", "vpid", "-t", "vtid", "-t", "procname"]),
        ({}, ["lttng", "start", session]),
        (LTTNG_APP_ENV, [python, "-c", app]),
        ({}, ["lttng", "stop", session]),
        ({}, ["lttng", "destroy", session]),
    ]


def lttng_recipe(iterations: int) -> str:
    """What the stamp file of a recorded trace holds: the steps, with placeholders for
    what changes from one recording to the next, and the versions that shape the trace."""
    version = measure(["lttng", "--version"]).stdout.decode().strip()
    lines = [
        " ".join([*(f"{k}={v}" for k, v in env.items()), shlex.join(argv)])
        for env, argv in lttng_steps("SESSION", "OUT", "PYTHON", iterations)
    ]
    return "\n".join([*lines, f"# {version}", f"# PYTHON: Python {sys.version.split()[0]}"]) + "\n"


def lttng_stream_dir(out: Path) -> Path | None:
    """The stream folder <out>/ust/uid/<uid>/64-bit of a recorded trace, if there is one."""
    found = sorted(out.glob("ust/uid/*/64-bit"))
    return found[0] if len(found) == 1 and (found[0] / "metadata").is_file() else None


def recorded_lttng_trace(cache: Path, iterations: int) -> Path | None:
    """The stream folder of the LTTng trace of ITERATIONS, recorded into CACHE the first
    time and reused while its stamp matches the recipe; None without LTTng."""
    missing = [tool for tool in ("lttng", "lttng-sessiond") if shutil.which(tool) is None]
    # The preloaded wrapper that emits the libc events (liblttng-ust-dev's package set).
    if not any(Path(d).glob("liblttng-ust-libc-wrapper.so*")
               for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")):
        missing.append("liblttng-ust-libc-wrapper.so.1")
    if missing:
        print(
            f"\n== recorded LTTng trace: skipped, {' and '.join(missing)} not found; "
            f"install the Debian packages {LTTNG_PACKAGES} (apt-get install {LTTNG_PACKAGES})"
        )
        return None
    out = cache / "bench-lttng" / f"libc-python-{iterations}"
    stamp = out / "opscope-bench-recipe.txt"
    recipe = lttng_recipe(iterations)
    stream_dir = lttng_stream_dir(out)
    if stream_dir and stamp.is_file() and stamp.read_text() == recipe:
        return stream_dir

    if spawn(["lttng", "list"])[0] != 0:
        print("starting an LTTng session daemon: lttng-sessiond --daemonize --no-kernel")
        measure(["lttng-sessiond", "--daemonize", "--no-kernel"])
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    session = f"opscope-bench-{os.getpid()}"
    print(f"recording {out} ({iterations} iterations; reused on later runs)", flush=True)
    start = time.perf_counter()
    created = False
    try:
        for env, argv in lttng_steps(session, str(partial), sys.executable, iterations):
            code, _, _, stdout, stderr_tail = spawn(argv, env)
            if code != 0:
                sys.exit(
                    f"LTTng recording failed (exit code {code}) at: {shlex.join(argv)}\n"
                    f"{stdout.decode(errors='replace')}{stderr_tail}"
                )
            if argv[:2] == ["lttng", "create"]:
                created = True
            elif argv[:2] == ["lttng", "destroy"]:
                created = False
    finally:
        if created:
            spawn(["lttng", "destroy", session])
    if lttng_stream_dir(partial) is None:
        sys.exit(f"the LTTng recording left no ust/uid/*/64-bit stream folder in {partial}")
    (partial / stamp.name).write_text(recipe)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    print(f"recorded in {time.perf_counter() - start:.1f} s", flush=True)
    return lttng_stream_dir(out)


def babeltrace2_counts(stdout: bytes) -> dict:
    """The "N Event messages" and "N Discarded event messages" lines of sink.utils.counter."""
    lines = dict(
        (what, int(n))
        for n, what in re.findall(r"^\s*(\d+) (.+?)\s*$", stdout.decode(), re.MULTILINE)
    )
    if "Event messages" not in lines:
        sys.exit(f"no 'Event messages' line in babeltrace2's output:\n{stdout.decode()}")
    return {
        "events": lines["Event messages"],
        "discarded_event_messages": lines.get("Discarded event messages", 0),
    }


def opscope_ctf_counts(report: dict) -> dict:
    """What opscope made of the events, and the count of events read if it gives one."""
    files = report["files"]
    counts = {key: report[key] for key in ("slices", "instants", "counter_samples")}
    counts["events_discarded"] = sum(f.get("events_discarded") or 0 for f in files)
    if "events" in report:
        counts["events"] = report["events"]
    elif files and all("events" in f for f in files):
        counts["events"] = sum(f["events"] for f in files)
    return counts


def bench_ctf_trace(trace_dir: Path, tools: list[str], opscope: Path, repeat: int, warmup: int) -> dict:
    """Median wall time, event rate, peak RSS and counts of each tool on TRACE_DIR."""
    commands = {
        "opscope": [[str(opscope), "info", str(trace_dir), "--format", "json"]],
        "babeltrace2": [
            ["babeltrace2", str(trace_dir), "-c", "sink.utils.counter", "--params=step=+0"]
        ],
    }
    runs = run_rounds({tool: commands[tool] for tool in tools}, repeat, warmup)
    results = {}
    for tool, tool_runs in runs.items():
        last = tool_runs[-1]
        counts = babeltrace2_counts(last.stdout) if tool == "babeltrace2" else opscope_ctf_counts(last.report)
        results[tool] = {**timing(tool_runs), "counts": counts}
    add_ratios(results)
    return results


def ctf_events(results: dict) -> tuple[int | None, str]:
    """The trace's event count (babeltrace2's, else opscope's if it gives one) and where
    it comes from; sets each tool's events_per_s from it."""
    counted = {tool: r["counts"]["events"] for tool, r in results.items() if "events" in r["counts"]}
    events = counted.get("babeltrace2", counted.get("opscope"))
    for r in results.values():
        r["events_per_s"] = events / r["wall_s"] if events else None
    if len(set(counted.values())) > 1:
        source = "!! the tools count differently: " + ", ".join(
            f"{tool} {n:,}" for tool, n in counted.items()
        )
    elif "babeltrace2" in counted and "opscope" not in counted:
        source = "babeltrace2's 'Event messages'; opscope's JSON gives no count of events read"
    else:
        source = " and ".join(counted) or "opscope's JSON gives no count of events read, and babeltrace2 did not run"
    return events, source


def bench_ctf(args: argparse.Namespace) -> dict:
    """--task ctf on the shared CTF traces and the recorded one; a table per trace."""
    traces = [(name, args.shared / "traces" / name) for name in CTF_SHARED]
    if args.lttng_iterations > 0:
        recorded = recorded_lttng_trace(args.cache, args.lttng_iterations)
        if recorded:
            name = f"recorded here: lttng-ust libc, python json.dumps x {args.lttng_iterations}"
            traces.append((name, recorded))
    output = {}
    for name, trace_dir in traces:
        if not (trace_dir / "metadata").is_file():
            sys.exit(f"no CTF metadata file in {trace_dir}")
        size = sum(f.stat().st_size for f in trace_dir.rglob("*") if f.is_file())
        results = bench_ctf_trace(trace_dir.resolve(), args.tools, args.opscope, args.repeat, args.warmup)
        floor = rss_floor_mib()
        heading = f"{name}  ({size / 2**20:.1f} MiB on disk; peak RSS floor {floor:.1f} MiB)"
        events, source = ctf_events(results)
        print_results(heading, results, ("events/s", lambda r: fmt(r["events_per_s"], ",.0f")))
        print(f"  events: {events:,} ({source})" if events else f"  events: - ({source})")
        if {"opscope", "babeltrace2"} <= results.keys():
            # Both read the same events: the ratio of rates is that of wall times.
            ratio = results["babeltrace2"]["wall_s"] / results["opscope"]["wall_s"]
            print(f"opscope {ratio:.2f}x babeltrace2's event rate")
        output[name] = {"bytes": size, "events": events, "rss_floor_mib": floor, "tools": results}
    return output


def bench_ctf_own(args: argparse.Namespace) -> dict:
    """--task ctf-own: the CTF opscope writes from each CTF_OWN trace, read by both."""
    output = {}
    sources = [(name, args.shared / "traces" / name) for name in CTF_OWN]
    # Made in a process of its own: building it here would leave this process large,
    # and every tool spawned after slower to start and heavier in its peak RSS.
    make = (
        f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); from pathlib import Path; "
        f"from view import synthetic_trace; "
        f"print(synthetic_trace(Path({str(args.shared)!r}), {CTF_OWN_SYNTHETIC_GB}))"
    )
    made = subprocess.run([sys.executable, "-c", make], check=True, capture_output=True, text=True)
    synthetic = Path(made.stdout.strip().splitlines()[-1])
    sources.append((f"synthetic Kineto trace, {CTF_OWN_SYNTHETIC_GB:g} GB of JSON ({synthetic})", synthetic))
    with tempfile.TemporaryDirectory(prefix="opscope-bench-ctf-") as folder:
        for name, source in sources:
            trace_dir = Path(folder) / (Path(name).name.split(".")[0] + ".ctf")
            measure([str(args.opscope), "convert", "--quiet", str(source), "-o", str(trace_dir), "--to", "ctf"])
            size = sum(f.stat().st_size for f in trace_dir.rglob("*") if f.is_file())
            results = bench_ctf_trace(trace_dir, args.tools, args.opscope, args.repeat, args.warmup)
            floor = rss_floor_mib()
            heading = f"{name} as CTF by opscope  ({size / 2**20:.1f} MiB on disk; peak RSS floor {floor:.1f} MiB)"
            events, source_of_count = ctf_events(results)
            print_results(heading, results, ("events/s", lambda r: fmt(r["events_per_s"], ",.0f")))
            print(f"  events: {events:,} ({source_of_count})" if events else f"  events: - ({source_of_count})")
            if {"opscope", "babeltrace2"} <= results.keys():
                ratio = results["babeltrace2"]["wall_s"] / results["opscope"]["wall_s"]
                print(f"opscope {ratio:.2f}x babeltrace2's event rate")
            output[name] = {"bytes": size, "events": events, "rss_floor_mib": floor, "tools": results}
    return output


# --- XPlane task ----------------------------------------------------------------------


def bench_xplane_file(file: Path, tools: list[str], opscope: Path, repeat: int, warmup: int) -> dict:
    """Median wall time, peak RSS and counts of each tool on the xplane.pb FILE."""
    with tempfile.TemporaryDirectory(prefix="opscope-bench-") as folder:
        # xprof takes the file's folder as its session: give it one of its own.
        link = Path(folder) / file.name
        link.symlink_to(file)
        worker = [sys.executable, __file__, WORKER_FLAG, "xprof", "xplane", str(link)]
        commands = {
            "opscope": [[str(opscope), "info", str(link), "--format", "json"]],
            "xprof": [worker],
        }
        xprof_events = measure([*worker, "count"]).report["events"] if "xprof" in tools else None
        runs = run_rounds({tool: commands[tool] for tool in tools}, repeat, warmup)
    results = {}
    for tool, tool_runs in runs.items():
        report = tool_runs[-1].report
        if tool == "opscope":
            counts = {key: report[key] for key in OPSCOPE_KEYS}
            load_s = None
        else:
            counts = {"trace_events": xprof_events, "json_chars": report["json_chars"]}
            load_s = statistics.median(r.report["load_s"] for r in tool_runs)
        results[tool] = {**timing(tool_runs), "load_s": load_s, "counts": counts}
    add_ratios(results)
    return results


def bench_xplane(args: argparse.Namespace) -> dict:
    """--task xplane on every shared *.xplane.pb, largest first; a table per file."""
    traces = args.shared / "traces"
    files = sorted(traces.glob(XPLANE_PATTERN), key=lambda f: (-f.stat().st_size, f))
    if not files:
        sys.exit(f"no {XPLANE_PATTERN} in {traces}")
    output = {}
    for file in files:
        name = str(file.relative_to(traces))
        size = file.stat().st_size
        results = bench_xplane_file(file.resolve(), args.tools, args.opscope, args.repeat, args.warmup)
        floor = rss_floor_mib()
        print_results(f"{name}  ({size / 2**20:.1f} MiB; peak RSS floor {floor:.1f} MiB)", results)
        if {"opscope", "xprof"} <= results.keys():
            print(f"opscope {results['xprof']['time_vs_opscope']:.2f}x faster than xprof")
        output[name] = {"bytes": size, "rss_floor_mib": floor, "tools": results}
    return output


# --- command line ---------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shared",
        type=Path,
        default=REPO.parent / "shared",
        help="shared data folder holding traces/ (default: ../shared)",
    )
    parser.add_argument(
        "--opscope",
        type=Path,
        default=REPO / "target/release/opscope",
        help="opscope binary (default: target/release/opscope)",
    )
    parser.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="info",
        help="info: load a Kineto trace; gpu: load it and break down GPU time; "
        "ctf: read CTF (LTTng) traces; ctf-own: read the CTF opscope writes; xplane: import XSpace protobufs (default: info)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (default: 3)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed rounds before them (default: 1)"
    )
    parser.add_argument(
        "--tools",
        help="comma-separated subset of the task's tools (default: all of them)",
    )
    parser.add_argument(
        "--lttng-iterations",
        type=int,
        default=2_000_000,
        metavar="N",
        help="--task ctf: size of the recorded LTTng trace, in iterations of the traced "
        "Python loop (default: 2000000, about 2.4 million events; 0: no recorded trace)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = parser.parse_args()
    known = TASKS[args.task]
    args.tools = args.tools.split(",") if args.tools else list(known)
    unknown = set(args.tools) - set(known)
    if unknown:
        parser.error(f"unknown tools {sorted(unknown)} for --task {args.task}; choose from {', '.join(known)}")
    if args.repeat < 1 or args.warmup < 0 or args.lttng_iterations < 0:
        parser.error("--repeat must be at least 1, --warmup and --lttng-iterations at least 0")
    if "opscope" in args.tools and not os.access(args.opscope, os.X_OK):
        parser.error(
            f"no opscope binary at {args.opscope}: build it with "
            "`cargo build --release -p opscope`, or leave it out with --tools"
        )
    if "babeltrace2" in args.tools and shutil.which("babeltrace2") is None:
        parser.error("no babeltrace2: install the Debian package babeltrace2, or leave it out with --tools")
    python_peers = {"HTA": "hta", "xprof": "xprof"}
    for tool in args.tools:
        if tool in python_peers and importlib.util.find_spec(python_peers[tool]) is None:
            parser.error(
                f"{tool} is not installed in {sys.executable}: run this script with the "
                "python that bench/setup-venv.sh prints"
            )
    args.opscope = args.opscope.resolve()
    args.shared = args.shared.resolve()
    args.cache = Path(os.environ.get("OPSCOPE_CACHE") or Path.home() / ".cache/opscope-ci")
    return args


def run_header(args: argparse.Namespace, **extra) -> dict:
    """The run's header (runinfo.start) with the rounds it times."""
    return runinfo.start(task=args.task, rounds=f"{args.repeat} timed after {args.warmup} warm-up, medians",
                         **extra)


def main() -> None:
    if sys.argv[1:2] == [WORKER_FLAG]:
        run_worker(*sys.argv[2:])
        return
    args = parse_args()
    # Every opscope run parses its input, but the gpu task's opscope (FRESH_CACHE).
    os.environ["OPSCOPE_CACHE_DIR"] = "off"
    output = run_header(args, python=sys.version.split()[0])
    bench = {
        "info": bench_kineto,
        "gpu": bench_kineto,
        "ctf": bench_ctf,
        "ctf-own": bench_ctf_own,
        "xplane": bench_xplane,
    }
    runinfo.finish(output, {"traces": bench[args.task](args)},
                   args.json or runinfo.REPO / f"target/bench/vs_peers-{args.task}.json")


if __name__ == "__main__":
    main()
