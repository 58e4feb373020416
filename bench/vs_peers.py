"""Side-by-side benchmarks of opscope against Python peers on Kineto traces.

--task info (the default): loading a trace.
  opscope    `opscope info FILE --format json`
  json.load  Python's `json.load(gzip.open(FILE))` alone: what any Python reader pays
  HTA        HolisticTraceAnalysis `TraceAnalysis(trace_dir=DIR)`, DIR holding only FILE

--task gpu: loading a trace (one file, or a folder of per-rank files) and answering
where the GPU time goes and which ops take it.
  opscope    `opscope gpu --exclude-last-step DIR --format json`, then
             `opscope stats op DIR --format json`: two processes, wall times added,
             the larger peak RSS
  HTA        the same load, then get_temporal_breakdown, get_gpu_kernel_breakdown,
             get_idle_time_breakdown (all ranks) and get_comm_comp_overlap

For each trace below, one run of this script measures, each in its own fresh
subprocess, the wall time and the peak RSS (ru_maxrss of that child, from os.wait4) of
each tool.

The tools are interleaved round by round (after untimed warm-up rounds), and the medians
are reported with their ratios to opscope, so that machine noise hits all tools alike.
Wall time is the whole process, interpreter start and imports included; "load s" is the
time the Python tools spend in the load call itself.

Linux counts in a child's ru_maxrss the memory of the process it was spawned from, up to
the exec, so a child shows max(this script's peak RSS, its own peak). This script never
holds a trace in memory, to keep that floor low (about 15 MiB), and prints it (the
ru_maxrss of `true` spawned the same way) beside each table: a figure above the floor is
the tool's own peak; a figure at the floor means "at most this".

Run it from the repository root with the venv that bench/setup-venv.sh makes:

    "$(bench/setup-venv.sh | tail -n 1)" bench/vs_peers.py [--task info|gpu] [--repeat 3] [--json OUT]
"""

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Traces under the shared data folder (--shared): a directory and the pattern of its
# per-rank files (each task lists the traces it runs on).
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

TASKS = {"info": ("opscope", "json.load", "HTA"), "gpu": ("opscope", "HTA")}
WORKER_FLAG = "--worker"
OPSCOPE_KEYS = ("slices", "instants", "counter_samples", "flows", "model_bytes")


@dataclass
class Run:
    wall_s: float
    max_rss_kib: int
    stdout: bytes

    @property
    def report(self) -> dict:
        """What the child printed: opscope's JSON, or a Python worker's counts."""
        return json.loads(self.stdout)


def run_worker(tool: str, task: str, path: str) -> None:
    """Child side of a Python tool: load PATH (and for the gpu task, analyse it), then
    print one JSON line of counts."""
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
    else:
        sys.exit(f"unknown worker tool {tool!r}")
    json.dump({"load_s": load_s, **counts}, report)
    report.close()


def measure_all(commands: list[list[str]]) -> Run:
    """Run COMMANDS one after another: wall times add up, the peak RSS is the larger,
    and the report is the first command's."""
    runs = [measure(argv) for argv in commands]
    return Run(
        sum(r.wall_s for r in runs), max(r.max_rss_kib for r in runs), runs[0].stdout
    )


def measure(argv: list[str]) -> Run:
    """Run ARGV as a fresh process, with its stderr kept aside and shown if it fails."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
            (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
        ]
        start = time.perf_counter()
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        wall_s = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            tail = err.read()[-4000:].decode(errors="replace")
            sys.exit(f"exit code {code} from: {' '.join(argv)}\n--- stderr (tail) ---\n{tail}")
        out.seek(0)
        return Run(wall_s, usage.ru_maxrss, out.read())


def rss_floor_mib() -> float:
    """The least peak RSS a child spawned by this process can show now."""
    return measure(["true"]).max_rss_kib / 1024


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
    if tool != "opscope":
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


def bench_trace(
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
            "json.load": [[sys.executable, __file__, WORKER_FLAG, "json.load", task, one]],
            "HTA": [[sys.executable, __file__, WORKER_FLAG, "HTA", task, trace_dir]],
        }
        runs: dict[str, list[Run]] = {tool: [] for tool in tools}
        for round_ in range(warmup + repeat):
            for tool in tools:
                run = measure_all(commands[tool])
                if round_ >= warmup:
                    runs[tool].append(run)

    results = {}
    for tool, tool_runs in runs.items():
        in_python = tool != "opscope"
        load_s = statistics.median(r.report["load_s"] for r in tool_runs) if in_python else None
        results[tool] = {
            "wall_s": statistics.median(r.wall_s for r in tool_runs),
            "peak_rss_mib": statistics.median(r.max_rss_kib for r in tool_runs) / 1024,
            "load_s": load_s,
            "runs": [{"wall_s": r.wall_s, "peak_rss_mib": r.max_rss_kib / 1024} for r in tool_runs],
            "counts": counts_of(tool, task, tool_runs[-1].report, one),
        }
    if "opscope" in results:
        base = results["opscope"]
        for result in results.values():
            result["time_vs_opscope"] = result["wall_s"] / base["wall_s"]
            result["rss_vs_opscope"] = result["peak_rss_mib"] / base["peak_rss_mib"]
    return results


def print_table(
    name: str, gzip_bytes: int, json_bytes: int, floor: float, results: dict
) -> None:
    mib = 1024 * 1024
    sizes = f"{gzip_bytes / mib:.1f} MiB gzip, {json_bytes / mib:.1f} MiB JSON"
    print(f"\n== {name}  ({sizes}; peak RSS floor {floor:.1f} MiB)")
    with_ratios = "opscope" in results
    header = f"{'tool':<10} {'wall s':>8} {'load s':>8} {'peak RSS MiB':>13}"
    if with_ratios:
        header += f" {'time/opscope':>13} {'RSS/opscope':>12}"
    print(header)
    for tool, r in results.items():
        load = f"{r['load_s']:.3f}" if r["load_s"] is not None else "-"
        line = f"{tool:<10} {r['wall_s']:>8.3f} {load:>8} {r['peak_rss_mib']:>13.1f}"
        if with_ratios:
            line += f" {r['time_vs_opscope']:>12.2f}x {r['rss_vs_opscope']:>11.2f}x"
        print(line)
    for tool, r in results.items():
        counts = ", ".join(
            f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}"
            for key, value in r["counts"].items()
        )
        print(f"  {tool}: {counts}")


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
        help="info: load a trace; gpu: load it and break down GPU time (default: info)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (default: 3)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed rounds before them (default: 1)"
    )
    parser.add_argument(
        "--tools",
        help="comma-separated subset of the task's tools (default: all of them)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = parser.parse_args()
    known = TASKS[args.task]
    args.tools = args.tools.split(",") if args.tools else list(known)
    unknown = set(args.tools) - set(known)
    if unknown:
        parser.error(f"unknown tools {sorted(unknown)} for --task {args.task}; choose from {', '.join(known)}")
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be at least 1 and --warmup at least 0")
    if "opscope" in args.tools and not os.access(args.opscope, os.X_OK):
        parser.error(
            f"no opscope binary at {args.opscope}: build it with "
            "`cargo build --release -p opscope`, or leave it out with --tools"
        )
    return args


def main() -> None:
    if sys.argv[1:2] == [WORKER_FLAG]:
        run_worker(*sys.argv[2:])
        return
    args = parse_args()
    # A busy machine skews every figure: the load average tells the reader whether it was.
    output = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "task": args.task,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "cores": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "traces": {},
    }
    print(
        f"{output['date']}: task {args.task}, {args.repeat} timed rounds after {args.warmup} warm-up, medians; "
        f"{output['cores']} cores, load average {output['load_average_at_start']:.2f}; "
        f"Python {sys.version.split()[0]}"
    )
    for directory, pattern in TRACES[args.task]:
        files = find_traces(args.shared / "traces", directory, pattern)
        if len(files) > 1 and args.task != "gpu":
            sys.exit(f"--task {args.task} reads one file; {directory} has {len(files)}")
        json_bytes = json_size(files)
        gzip_bytes = sum(f.stat().st_size for f in files)
        results = bench_trace(
            files, args.task, args.tools, args.opscope.resolve(), args.repeat, args.warmup
        )
        floor = rss_floor_mib()
        name = f"{directory}/{files[0].name}" if len(files) == 1 else f"{directory} ({len(files)} ranks)"
        print_table(name, gzip_bytes, json_bytes, floor, results)
        output["traces"][name] = {
            "gzip_bytes": gzip_bytes,
            "json_bytes": json_bytes,
            "rss_floor_mib": floor,
            "tools": results,
        }
    if args.json:
        args.json.write_text(json.dumps(output, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
