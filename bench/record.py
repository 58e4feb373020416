"""What `opscope record` costs the recorded program, measured beside its peers in one run.

--task pairs: the cost of one ITT task begin+end on one thread, through opscope's
  collector, against one pair of LTTng-UST tracepoints with the same payload (begin: the
  domain and task name strings; end: nothing), and through no collector at all (the ITT
  static part's no-op). record/itt_vs_lttng.c, built twice: with ittnotify's static part
  (from the ittapi-sys crate's C sources) and with the tracepoint provider
  record/tp_provider.h. Pairs come in bursts that fit the buffers, with pauses between
  them for the recorders to drain (untimed; see the C file for why). opscope runs with
  INTEL_LIBITTNOTIFY64=target/release/libopscope_record.so and its defaults (4 MiB ring
  per thread, drained every 50 ms
  or when a ring passes a quarter full); LTTng in a session of its own (a session daemon is
  started with `lttng-sessiond --daemonize --no-kernel` if none answers, and left
  running) with one user-space channel in flight-recorder mode (`--overwrite`, 4
  sub-buffers of 1 MiB per CPU) written to disk. Each run checks that every event was
  recorded: opscope's slices, and the events `opscope info` reads from LTTng's CTF.
  Besides the time of a pair on the program's thread, each run gives the CPU per event
  of all the work recording took: the program's every thread (opscope's writer thread,
  which encodes and compresses, among them) and, for LTTng, what its session and
  consumer daemons used meanwhile (from /proc, in clock ticks).

--task rate: bytes on disk per event, and events lost, for an op stream of 1 million
  events per second on one thread (record/itt_paced.c: 500,000 ITT tasks per second,
  each a begin and an end, for --seconds) run under `opscope record -q -o DIR` with the
  default buffers. Bytes per event: the size of every DIR/opscope-PID.pftrace over the
  events emitted; lost: emitted - 2 x the slices `opscope info` counts, checked against
  the count of the recorder's "events dropped" instants (which count refused records:
  a dropped begin counts once, and its end is then discarded without being counted).

--task steps: the median training-step time of a Keras CNN (record/keras_steps.py) run
  plain and under `opscope record`, and of a PyTorch CNN (record/torch_steps.py) run
  plain, under `opscope record`, inside torch.profiler (CPU), and inside PyTorch's ITT
  mode with no collector (`emit_itt alone`: what the mode `opscope record` turns on costs
  by itself). The scripts time each step themselves; each run gives the median of its
  steps. The frameworks use --threads
  compute threads (default 1: on 2 shared cores, two threads that meet at every op
  made the step time swing twentyfold). Every variant runs a second time with glibc's
  heap trimming fixed (GLIBC_TUNABLES), which takes out how much tensor memory each run
  happens to refault every step, and leaves what the variants themselves cost. With
  the default heap, step time grows with the minor page faults of a step, which differ
  from run to run of one variant: a least-squares fit (one slope, one intercept per
  variant) gives each PyTorch variant's step time at equal faults, with a bootstrap
  interval over rounds (whole rounds resampled, so that the variants stay paired).

--task interleaved: the PyTorch CNN's modes (plain, ITT, torch.profiler) taking turns in
  blocks of steps within one process (record/torch_interleaved.py), run plain and under
  `opscope record --no-python`: the blocks of one process share the heap's history and
  the machine's drift, which the separate processes of --task steps do not, so the ratio
  of their steps is what each mode costs. One process of each kind a round, no warm-up
  rounds (the script warms up a cycle itself).

--task heap: why separate processes of --task steps put PyTorch's ITT mode (and so the
  recorded run) behind torch.profiler with glibc's default heap. The PyTorch script runs
  in its four variants with --heap: after each step, glibc's mallinfo2 tells whether the
  main heap shrank since the step before (a trim: free() gave the heap's top back, and
  the next step faults that memory in again) and how much the program keeps in the heap.
  Per variant: trims per 100 steps, heap kept per step, faults, step time.

--task jax: what recording a JAX program costs, against JAX's own profiler alone: a
  jitted MLP loop of about 5 s (record/jax_train.py) run plain, inside
  `jax.profiler.trace` with JAX's defaults (what a program that profiles itself pays),
  and under `opscope record` (which runs JAX's profiler without its Python tracer, and
  marks each jitted call). Per variant: the whole command's wall time, the program's own
  wall time (first line to last) and its median step; the ratios to plain and of
  opscope to jax.profiler.

--task all (the default): pairs, rate, steps and interleaved, then one table of every
  figure with its target.

There are --warmup untimed rounds, then --repeat timed ones; within a round the variants
run one after the other (for steps: plain, record, profiler, plain, ...), so that the
noise of this machine hits them alike, and medians over rounds are reported. The C
programs are compiled with gcc into ${OPSCOPE_CACHE:-~/.cache/opscope-ci}/bench-record/
the first time. The frameworks run in --python (default: $OPSCOPE_PYTHON, else the
tests' venv ~/.cache/opscope-ci/venv-tests, which .ci/run makes from
tests/requirements.txt with torch and tensorflow-cpu); this script needs only the
standard library.

    python3 bench/record.py [--task all|pairs|rate|steps|interleaved|heap|jax] [--repeat 5] [--json OUT]
"""

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import runinfo
from vs_peers import run_header, spawn

REPO = Path(__file__).resolve().parent.parent
SOURCES = Path(__file__).resolve().parent / "record"
DROPPED = "opscope: events dropped (buffer full)"
# What the recorded programs must not inherit from this process: the baselines run
# with no collector.
INJECTION_ENV = ("INTEL_LIBITTNOTIFY64", "NVTX_INJECTION64_PATH", "OPSCOPE_SESSION_DIR")
LTTNG_CHANNEL = ["--overwrite", "--subbuf-size=1M", "--num-subbuf=4"]


def run(argv: list, env: dict | None = None) -> bytes:
    """ARGV's stdout; exits with its stderr's tail if it fails."""
    argv = [str(a) for a in argv]
    code, _, _, stdout, tail = spawn(argv, env)
    if code != 0:
        sys.exit(f"exit code {code} from: {' '.join(argv)}\n--- stderr (tail) ---\n{tail}")
    return stdout


def run_json(argv: list, env: dict | None = None) -> dict:
    """The JSON line a benchmark program prints last (frameworks may print before it),
    with "cpu_s": the CPU seconds (user + system, all its threads) the program took."""
    before = children_cpu_s()
    report = json.loads(run(argv, env).decode().strip().splitlines()[-1])
    report["cpu_s"] = children_cpu_s() - before
    return report


def children_cpu_s() -> float:
    """CPU seconds (user + system) of every child this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lttng_daemons_cpu_s() -> float:
    """CPU seconds of LTTng's session and consumer daemons so far (they move the
    buffers of a traced program out of it, so their work is part of what tracing costs)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if name.startswith("lttng-"):
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


# --- building the C programs ----------------------------------------------------------


def itt_sources() -> Path:
    """ittnotify's C library as the ittapi-sys crate ships it (the dataflow example's
    dependency), found with cargo metadata, else in cargo's registry."""
    try:
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--offline",
             "--manifest-path", str(REPO / "Cargo.toml")],
            capture_output=True, check=True).stdout)
        found = [Path(p["manifest_path"]).parent for p in meta["packages"] if p["name"] == "ittapi-sys"]
    except (OSError, subprocess.CalledProcessError):
        found = []
    found += sorted(Path.home().glob(".cargo/registry/src/*/ittapi-sys-*"))
    for crate in found:
        if (crate / "c-library/src/ittnotify/ittnotify_static.c").is_file():
            return crate / "c-library"
    sys.exit("cannot find the ittapi-sys crate's C sources: run `cargo fetch` in the workspace")


def build(cache: Path) -> dict[str, Path]:
    """The benchmark programs, compiled into CACHE once per version of their sources."""
    itt = itt_sources()
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(gcc.encode() + str(itt).encode())
    for source in sorted(SOURCES.glob("*.[ch]")):
        key.update(source.name.encode() + source.read_bytes())
    out = cache / "bench-record" / key.hexdigest()[:16]
    bins = {name: out / name for name in ("itt_pairs", "itt_paced", "lttng_pairs")}
    if all(b.exists() for b in bins.values()):
        return bins
    print(f"compiling the benchmark programs into {out}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    itt_flags = ["-O2", f"-I{itt}/include", f"-I{itt}/src/ittnotify"]
    static = out / "ittnotify_static.o"
    run(["gcc", *itt_flags, "-c", itt / "src/ittnotify/ittnotify_static.c", "-o", static])
    for name, source in (("itt_pairs", "itt_vs_lttng.c"), ("itt_paced", "itt_paced.c")):
        run(["gcc", *itt_flags, SOURCES / source, static, "-ldl", "-lpthread", "-o", bins[name]])
    code, _, _, _, tail = spawn(["gcc", "-O2", "-DWITH_LTTNG", f"-I{SOURCES}",
                                 str(SOURCES / "itt_vs_lttng.c"), "-llttng-ust", "-ldl",
                                 "-o", str(bins["lttng_pairs"])])
    if code != 0:
        print(f"LTTng-UST program not built (apt-get install liblttng-ust-dev):\n{tail}")
        bins["lttng_pairs"].write_text("")  # marks the failure, so it is not retried
    return bins


# --- what a recording holds -----------------------------------------------------------


def opscope_recorded(opscope: Path, trace: Path) -> dict:
    """Slices in TRACE, and the events its dropped-events instants count."""
    info = json.loads(run([opscope, "info", trace, "--format", "json"]))
    dropped = 0
    if info["instants"]:  # only then can there be dropped-events instants to read
        with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
            out = Path(tmp) / "trace.json"
            run([opscope, "convert", "-q", trace, "-o", out])
            dropped = sum(
                int((e.get("args") or {}).get("count", 0))
                for e in json.loads(out.read_text())["traceEvents"]
                if e.get("name") == DROPPED
            )
    return {"slices": info["slices"], "instants": info["instants"], "dropped_instant_count": dropped}


def lttng_recorded(opscope: Path, out: Path) -> dict:
    """Events in the CTF streams of LTTng's OUT, as opscope reads them."""
    streams = sorted(out.glob("ust/uid/*/64-bit"))
    if not streams:
        sys.exit(f"LTTng wrote no ust/uid/*/64-bit streams into {out}")
    files = json.loads(run([opscope, "info", *streams, "--format", "json"]))["files"]
    return {
        "events": sum(f.get("events") or 0 for f in files),
        "discarded": sum(f.get("events_discarded") or 0 for f in files),
    }


def lttng_run(argv: list, out: Path) -> dict:
    """Runs ARGV traced by a fresh LTTng session writing into OUT."""
    session = f"opscope-bench-record-{os.getpid()}"
    run(["lttng", "create", session, f"--output={out}"])
    try:
        run(["lttng", "enable-channel", "-s", session, "-u", *LTTNG_CHANNEL, "bench"])
        run(["lttng", "enable-event", "-s", session, "-u", "-c", "bench", "opscope_bench:*"])
        daemons = lttng_daemons_cpu_s()
        run(["lttng", "start", session])
        report = run_json(argv)
        run(["lttng", "stop", session])  # waits for the consumer to write the buffers out
        report["daemons_cpu_s"] = lttng_daemons_cpu_s() - daemons
        report["cpu_s"] += report["daemons_cpu_s"]
    finally:
        spawn(["lttng", "destroy", session])
    return report


def lttng_ready() -> bool:
    """Whether LTTng can record here, starting a session daemon if none answers."""
    if shutil.which("lttng") is None or shutil.which("lttng-sessiond") is None:
        print("LTTng-UST skipped: no lttng; apt-get install lttng-tools liblttng-ust-dev")
        return False
    if spawn(["lttng", "list"])[0] != 0:
        print("starting an LTTng session daemon: lttng-sessiond --daemonize --no-kernel")
        run(["lttng-sessiond", "--daemonize", "--no-kernel"])
    return True


# --- tasks ----------------------------------------------------------------------------


def bench_pairs(args: argparse.Namespace, bins: dict[str, Path]) -> dict:
    """ns per ITT pair with no collector and with opscope's, and per LTTng-UST pair."""
    argv = [args.pairs, args.burst, args.pause_ms]
    tools = ["no collector", "opscope"]
    if bins["lttng_pairs"].stat().st_size and lttng_ready():
        tools.append("LTTng-UST")
    runs: dict[str, list[dict]] = {tool: [] for tool in tools}
    for round_ in range(args.warmup + args.repeat):
        for tool in tools:
            with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
                out = Path(tmp) / "trace"
                if tool == "no collector":
                    report, kept, lost = run_json([bins["itt_pairs"], *argv]), None, 0
                elif tool == "opscope":
                    env = {"INTEL_LIBITTNOTIFY64": str(args.library), "OPSCOPE_SESSION_DIR": str(out)}
                    report = run_json([bins["itt_pairs"], *argv], env)
                    counts = opscope_recorded(args.opscope, out)
                    kept = 2 * counts["slices"]
                    lost = 2 * report["pairs"] - kept
                else:
                    report = lttng_run([bins["lttng_pairs"], *argv], out)
                    counts = lttng_recorded(args.opscope, out)
                    kept, lost = counts["events"], 2 * report["pairs"] - counts["events"]
                size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if kept else None
            if round_ >= args.warmup:
                runs[tool].append({
                    "ns_per_pair": report["ns"] / report["pairs"],
                    "cpu_ns_per_event": report["cpu_s"] * 1e9 / (2 * report["pairs"]),
                    "daemons_cpu_ns_per_event": report.get("daemons_cpu_s", 0) * 1e9 / (2 * report["pairs"]),
                    "events_recorded": kept,
                    "events_lost": lost,
                    "bytes_per_event": size / kept if size else None,
                })
    results = {}
    for tool, tool_runs in runs.items():
        results[tool] = {
            "ns_per_pair": statistics.median(r["ns_per_pair"] for r in tool_runs),
            "cpu_ns_per_event": statistics.median(r["cpu_ns_per_event"] for r in tool_runs),
            "daemons_cpu_ns_per_event": statistics.median(r["daemons_cpu_ns_per_event"] for r in tool_runs),
            "events_lost_max": max(r["events_lost"] for r in tool_runs),
            "bytes_per_event": median_of(tool_runs, "bytes_per_event"),
            "runs": tool_runs,
        }
    print(f"\n== ITT task begin+end vs LTTng-UST tracepoints: {args.pairs:,} pairs on one "
          f"thread, bursts of {args.burst:,}, {args.pause_ms} ms pauses")
    # CPU/event: all the CPU the run took (the program's threads, opscope's writer thread
    # among them; for LTTng also its daemons' share), over the events, pauses included.
    print(f"{'tool':<14} {'ns/pair':>9} {'vs opscope':>11} {'CPU ns/event':>13} {'lost (max)':>11} "
          f"{'bytes/event':>12}")
    for tool, r in results.items():
        ratio = r["ns_per_pair"] / results["opscope"]["ns_per_pair"]
        print(f"{tool:<14} {r['ns_per_pair']:>9.1f} {ratio:>10.2f}x {r['cpu_ns_per_event']:>13.1f} "
              f"{r['events_lost_max']:>11,} {fmt(r['bytes_per_event'], '.2f'):>12}")
    return results


def bench_rate(args: argparse.Namespace, bins: dict[str, Path]) -> dict:
    """Bytes per event and events lost at --rate events/s under `opscope record`."""
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
            out = Path(tmp) / "session"
            report = run_json([args.opscope, "record", "-q", "-o", out, "--",
                               bins["itt_paced"], args.rate, args.seconds])
            size = sum(f.stat().st_size for f in out.glob("opscope-[0-9]*.pftrace"))
            counts = opscope_recorded(args.opscope, out)
        runs.append({
            **report,
            **counts,
            "bytes": size,
            "bytes_per_event": size / report["events"],
            "bytes_per_slice": size / counts["slices"] if counts["slices"] else None,
            "events_lost": report["events"] - 2 * counts["slices"],
        })
    results = {
        "bytes_per_event": statistics.median(r["bytes_per_event"] for r in runs),
        "bytes_per_slice": median_of(runs, "bytes_per_slice"),
        "events_lost_max": max(r["events_lost"] for r in runs),
        "dropped_instant_count_max": max(r["dropped_instant_count"] for r in runs),
        "late_pairs_max": max(r["late_pairs"] for r in runs),
        "runs": runs,
    }
    r = runs[-1]
    print(f"\n== {args.rate:,} events/s on one thread for {args.seconds} s under opscope "
          f"record ({r['events']:,} events = {r['pairs']:,} ITT tasks, begin and end each "
          f"one event), {args.repeat} runs")
    print(f"bytes/event {results['bytes_per_event']:.2f} (median), bytes/slice "
          f"{fmt(results['bytes_per_slice'], '.2f')}, events lost {results['events_lost_max']:,} "
          f"(worst run; dropped-events instants count {results['dropped_instant_count_max']:,}), "
          f"tasks started late {results['late_pairs_max']:,} (worst run)")
    return results


# glibc trims the heap's top when a free leaves more than trim_threshold there, and
# moves that threshold with the largest block it unmapped; which tensors a trim gives
# back then depends on every small block anyone keeps, and PyTorch refaults them at the
# next step. Fixed high, nothing is trimmed and the heap is the same in every variant.
FIXED_HEAP_TUNABLES = "glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=33554432"


# --scripts names of the step scripts.
STEP_SCRIPTS = {"keras": "keras", "torch": "torch", "keras-fixed": "keras, fixed heap",
                "torch-fixed": "torch, fixed heap"}


def bench_steps(args: argparse.Namespace) -> dict:
    """Median step times of the Keras and PyTorch CNNs, plain and recorded."""
    py = args.python
    scripts = {
        "keras": [py, SOURCES / "keras_steps.py", "--steps", args.steps, "--threads", args.threads],
        "torch": [py, SOURCES / "torch_steps.py", "--steps", args.steps, "--threads", args.threads],
    }
    # The same PyTorch script with glibc's heap trimming and dynamic mmap threshold
    # fixed: step times then show what each variant itself costs, apart from where
    # the heap happens to be trimmed (see BENCHMARKS.md).
    scripts["keras, fixed heap"] = scripts["keras"]
    scripts["torch, fixed heap"] = scripts["torch"]
    fixed_heap = dict(os.environ, GLIBC_TUNABLES=FIXED_HEAP_TUNABLES)
    # TensorFlow turns oneDNN (whose primitives are what the recorder sees of a Keras
    # step) on by default only on CPUs with AVX512_VNNI, AVX_VNNI, AVX512_BF16 or AMX:
    # ask for it, so that every machine measures the same work.
    onednn = {"TF_ENABLE_ONEDNN_OPTS": "1"}
    variants = {
        "keras": ["plain", "opscope record"],
        "torch": TORCH_VARIANTS,
        "keras, fixed heap": ["plain", "opscope record"],
        "torch, fixed heap": TORCH_VARIANTS,
    }
    chosen = [STEP_SCRIPTS[name] for name in args.scripts]
    scripts = {name: argv for name, argv in scripts.items() if name in chosen}
    runs = {(s, v): [] for s in scripts for v in variants[s]}
    faults = {(s, v): [] for s in scripts for v in variants[s]}
    for timed, (script, variant) in alternating_rounds(args, list(runs)):
        with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
            argv = variant_argv(args, variant, scripts[script], Path(tmp) / "session")
            env = dict(fixed_heap if script.endswith("fixed heap") else os.environ)
            if script.startswith("keras"):
                env.update(onednn)
            report = run_json(argv, env)
        if timed:
            runs[script, variant].append(statistics.median(report["steps_ms"]))
            faults[script, variant].append(statistics.median(report["faults"]))
    results = {}
    for script in scripts:
        plain = statistics.median(runs[script, "plain"])
        results[script] = {
            v: {"step_ms": statistics.median(runs[script, v]),
                "vs_plain": statistics.median(runs[script, v]) / plain,
                "runs_step_ms": runs[script, v],
                "faults_per_step": statistics.median(faults[script, v]),
                "runs_faults_per_step": faults[script, v]}
            for v in variants[script]
        }
    print(f"\n== training step time (median of {args.steps} steps per run, median of "
          f"{args.repeat} runs)")
    # Minor page faults per step tell how much of a step went to faulting in memory
    # that glibc had trimmed at the step before (see BENCHMARKS.md).
    print(f"{'script':<17} {'variant':<15} {'step ms':>8} {'vs plain':>9} {'faults':>7}   "
          "per-run medians (ms/faults)")
    for script, by_variant in results.items():
        for variant, r in by_variant.items():
            per_run = " ".join(f"{ms:.1f}/{f:.0f}" for ms, f in zip(r["runs_step_ms"], r["runs_faults_per_step"]))
            print(f"{script:<17} {variant:<15} {r['step_ms']:>8.2f} {r['vs_plain']:>8.3f}x "
                  f"{r['faults_per_step']:>7.0f}   {per_run}")
    return results


TORCH_VARIANTS = ["plain", "emit_itt alone", "opscope record", "torch.profiler"]


def alternating_rounds(args: argparse.Namespace, variants: list):
    """(timed, variant) for each variant of each round: --warmup untimed rounds, then
    --repeat timed ones. The order is reversed every other round, so that no variant
    always runs after the same one or at the same point of the machine's drift."""
    for round_ in range(args.warmup + args.repeat):
        for variant in variants if round_ % 2 == 0 else variants[::-1]:
            yield round_ >= args.warmup, variant


def variant_argv(args: argparse.Namespace, variant: str, argv: list, session: Path) -> list:
    """A step script's command line for one variant."""
    if variant == "opscope record":
        return [args.opscope, "record", "-q", "-o", session, "--", *argv]
    if variant == "torch.profiler":
        return [*argv, "--profile"]
    if variant == "emit_itt alone":
        return [*argv, "--itt"]
    return argv


def bench_jax(args: argparse.Namespace) -> dict:
    """Wall and step times of a JAX loop: plain, under jax.profiler, under opscope."""
    variants = ["plain", "jax.profiler", "opscope record"]
    runs = {v: [] for v in variants}
    for timed, variant in alternating_rounds(args, variants):
        with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
            argv = [args.python, SOURCES / "jax_train.py", "--steps", args.jax_steps]
            if variant == "jax.profiler":
                argv += ["--profile", Path(tmp) / "profile"]
            elif variant == "opscope record":
                argv = [args.opscope, "record", "-q", "-o", Path(tmp) / "session", "--", *argv]
            start = time.monotonic()
            report = run_json(argv)
            command_s = time.monotonic() - start
        if timed:
            runs[variant].append({"command_s": command_s, "program_s": report["wall_s"],
                                  "step_ms": statistics.median(report["steps_ms"])})
    results = {v: {k: statistics.median(r[k] for r in rs) for k in ("command_s", "program_s", "step_ms")}
               for v, rs in runs.items()}
    plain = results["plain"]
    print(f"\n== a JAX loop of {args.jax_steps} steps (medians of {args.repeat} runs)")
    print(f"{'variant':<16} {'command s':>10} {'program s':>10} {'step ms':>8} {'vs plain':>9}")
    for v, r in results.items():
        print(f"{v:<16} {r['command_s']:>10.2f} {r['program_s']:>10.2f} {r['step_ms']:>8.2f} "
              f"{r['command_s'] / plain['command_s']:>8.3f}x")
    ratio = results["opscope record"]["command_s"] / results["jax.profiler"]["command_s"]
    print(f"opscope record / jax.profiler alone: {ratio:.3f} (whole command), "
          f"{results['opscope record']['program_s'] / results['jax.profiler']['program_s']:.3f} (the program)")
    results["record_vs_jax_profiler"] = ratio
    results["runs"] = runs
    return results


def bench_heap(args: argparse.Namespace) -> dict:
    """How often each PyTorch variant's heap is trimmed, and what it keeps in the heap."""
    argv = [args.python, SOURCES / "torch_steps.py", "--steps", args.steps, "--threads", args.threads, "--heap"]
    runs = {variant: [] for variant in TORCH_VARIANTS}
    for timed, variant in alternating_rounds(args, TORCH_VARIANTS):
        with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
            report = run_json(variant_argv(args, variant, argv, Path(tmp) / "session"))
        if not timed:
            continue
        arena, in_use = report["arena_bytes"], report["in_use_bytes"]
        runs[variant].append({
            "step_ms": statistics.median(report["steps_ms"]),
            "faults_per_step": statistics.median(report["faults"]),
            "trims_per_100_steps": 100 * sum(b < a for a, b in zip(arena, arena[1:])) / (len(arena) - 1),
            "kept_kb_per_step": (in_use[-1] - in_use[0]) / 1024 / (len(in_use) - 1)})
    print(f"\n== glibc's heap per PyTorch step ({args.steps} steps a run, medians of {args.repeat} runs)")
    print(f"{'variant':<15} {'step ms':>8} {'faults':>7} {'trims/100':>10} {'kept KB':>8}   per-run trims")
    results = {}
    for variant, variant_runs in runs.items():
        results[variant] = {key: statistics.median(r[key] for r in variant_runs) for key in variant_runs[0]}
        results[variant]["runs"] = variant_runs
        r = results[variant]
        print(f"{variant:<15} {r['step_ms']:>8.2f} {r['faults_per_step']:>7.0f} {r['trims_per_100_steps']:>10.1f} "
              f"{r['kept_kb_per_step']:>8.1f}   " + " ".join(f"{x['trims_per_100_steps']:.0f}" for x in variant_runs))
    return results


# The PyTorch ratios given at equal page faults: what the recorder adds to PyTorch's ITT
# mode, what that mode costs against the profiler's hooks, and the two together.
EQUAL_FAULTS_RATIOS = [("opscope record", "emit_itt alone"), ("emit_itt alone", "torch.profiler"),
                       ("opscope record", "torch.profiler")]


def steps_at_equal_faults(torch_runs: dict, rounds: int = 2000) -> dict:
    """EQUAL_FAULTS_RATIOS at the median faults of all runs, each with a 95 % percentile
    bootstrap interval. Whole rounds are resampled (the same picks for every variant):
    the machine drifts over a run, and the variants of one round saw the same drift.
    With a dozen rounds such intervals run narrow: read them as a hint."""
    faults = statistics.median(f for r in torch_runs.values() for f in r["runs_faults_per_step"])
    fit = at_equal_faults(torch_runs, faults)
    rng = random.Random(0)
    n = min(len(r["runs_step_ms"]) for r in torch_runs.values())
    resampled_fits = []
    for _ in range(rounds):
        picks = [rng.randrange(n) for _ in range(n)]
        sample = {
            variant: {"runs_step_ms": [r["runs_step_ms"][i] for i in picks],
                      "runs_faults_per_step": [r["runs_faults_per_step"][i] for i in picks]}
            for variant, r in torch_runs.items()
        }
        resampled_fits.append(at_equal_faults(sample, faults))
    ratios = {}
    for ours, theirs in EQUAL_FAULTS_RATIOS:
        spread = sorted(f[ours] / f[theirs] for f in resampled_fits)
        ratios[f"{ours} / {theirs}"] = {
            "faults": faults, "step_ms": fit, "ratio": fit[ours] / fit[theirs],
            "low": spread[int(0.025 * rounds)], "high": spread[int(0.975 * rounds) - 1]}
    print(f"\ntorch at {faults:.0f} faults a step (fit over all runs): "
          + ", ".join(f"{v} {ms:.2f} ms" for v, ms in fit.items()))
    for name, r in ratios.items():
        print(f"  {name}: {r['ratio']:.3f} (95 % bootstrap interval {r['low']:.3f}-{r['high']:.3f})")
    return ratios


def steps_ratios(torch_runs: dict, rounds: int = 2000) -> dict:
    """EQUAL_FAULTS_RATIOS as ratios of the variants' median steps over runs, each with
    a 95 % percentile bootstrap interval, whole rounds resampled as above."""
    rng = random.Random(0)
    n = min(len(r["runs_step_ms"]) for r in torch_runs.values())
    ratios = {}
    for ours, theirs in EQUAL_FAULTS_RATIOS:
        a, b = torch_runs[ours]["runs_step_ms"], torch_runs[theirs]["runs_step_ms"]
        spread = []
        for _ in range(rounds):
            picks = [rng.randrange(n) for _ in range(n)]
            spread.append(statistics.median(a[i] for i in picks) / statistics.median(b[i] for i in picks))
        spread.sort()
        ratios[f"{ours} / {theirs}"] = {
            "ratio": statistics.median(a) / statistics.median(b),
            "low": spread[int(0.025 * rounds)], "high": spread[int(0.975 * rounds) - 1]}
    print("\ntorch, medians over runs:")
    for name, r in ratios.items():
        print(f"  {name}: {r['ratio']:.3f} (95 % bootstrap interval {r['low']:.3f}-{r['high']:.3f})")
    return ratios


def at_equal_faults(by_variant: dict, faults: float) -> dict[str, float]:
    """Each variant's step time at `faults` minor page faults a step, from a least-squares
    fit over its runs of step = intercept[variant] + slope * faults (one shared slope)."""
    num = den = 0.0
    means = {}
    for variant, r in by_variant.items():
        pairs = list(zip(r["runs_faults_per_step"], r["runs_step_ms"]))
        mean_f = statistics.fmean(f for f, _ in pairs)
        mean_t = statistics.fmean(t for _, t in pairs)
        means[variant] = (mean_f, mean_t)
        num += sum((f - mean_f) * (t - mean_t) for f, t in pairs)
        den += sum((f - mean_f) ** 2 for f, _ in pairs)
    slope = num / den if den else 0.0
    return {v: mean_t - slope * mean_f + slope * faults for v, (mean_f, mean_t) in means.items()}


# The PyTorch ratios of the interleaved task, each within one process kind:
# (process kind, mode, mode). In a process under `opscope record --no-python` the "itt"
# blocks are what the recorder records; in a plain one they are PyTorch's ITT mode with
# ittnotify's no-op stubs.
INTERLEAVED_RATIOS = {
    "record / torch.profiler": ("opscope record", "itt", "profile"),
    "record / plain": ("opscope record", "itt", "plain"),
    "torch.profiler / plain": ("python", "profile", "plain"),
    "emit_itt alone / plain": ("python", "itt", "plain"),
    "emit_itt alone / torch.profiler": ("python", "itt", "profile"),
}


# "No slower" cannot be measured at zero: a ratio of step times is "not slower" when
# the upper end of its 95 % interval is within this margin of 1.
NOT_SLOWER_MARGIN = 0.005
INTERLEAVED_MODES = ("plain", "itt", "profile")
INTERLEAVED_BLOCK = 6  # steps per block, the first untimed


def bench_interleaved(args: argparse.Namespace) -> dict:
    """PyTorch's modes taking turns in blocks of steps within one process
    (record/torch_interleaved.py), in a plain process and in one under `opscope record
    --no-python` (which turns on no mode itself: the script does), one of each a round,
    which goes first alternating. Blocks of one process share the heap's history and
    the machine's drift, which make separate processes of one variant differ by up to
    10 %. Each ratio is the median over cycles of the ratio of two blocks' median steps;
    its 95 % interval comes from a two-level bootstrap (processes, then cycles within
    each), since cycles of one process are not independent. Each recorded session is
    read back: it must hold slices, none dropped, and only from the ITT blocks (a whole
    number of slices per ITT-block step)."""
    argv = [args.python, SOURCES / "torch_interleaved.py", "--cycles", args.cycles,
            "--block", INTERLEAVED_BLOCK, "--threads", args.threads]
    kinds = ("python", "opscope record")
    processes = {kind: [] for kind in kinds}  # per kind, per process: [{mode: block median}]
    faults = {kind: [] for kind in kinds}  # per kind, per process: {mode: median faults}
    recorded = []
    for round_ in range(args.repeat):
        for kind in kinds[::1 if round_ % 2 == 0 else -1]:
            with tempfile.TemporaryDirectory(prefix="opscope-bench-") as tmp:
                command = argv
                session = Path(tmp) / "session"
                if kind == "opscope record":
                    command = [args.opscope, "record", "-q", "--no-python", "-o", session, "--", *argv]
                report = run_json(command)
                if kind == "opscope record":
                    recorded.append(check_interleaved_session(args, session, report))
            by_cycle = {}
            for block in report["blocks"]:
                by_cycle.setdefault(block["cycle"], {})[block["mode"]] = statistics.median(block["steps_ms"])
            processes[kind].append(list(by_cycle.values()))
            faults[kind].append({m: statistics.median(f for b in report["blocks"] if b["mode"] == m
                                                      for f in b["faults"]) for m in INTERLEAVED_MODES})
    rng = random.Random(0)
    results = {"cycles": args.cycles, "block": INTERLEAVED_BLOCK, "threads": args.threads,
               "recorded": recorded}
    print(f"\n== PyTorch modes interleaved in one process ({args.cycles} cycles of "
          f"{INTERLEAVED_BLOCK - 1} timed steps a mode, {args.repeat} processes of each kind)")
    print(f"  recorded sessions: slices per ITT-block step "
          + " ".join(f"{r['slices_per_itt_step']:g}" for r in recorded) + ", none dropped")
    for name, (kind, mode_a, mode_b) in INTERLEAVED_RATIOS.items():
        per_process = [[c[mode_a] / c[mode_b] for c in cycles] for cycles in processes[kind]]
        pooled = [r for ratios in per_process for r in ratios]
        spread = []
        for _ in range(2000):
            picked = rng.choices(per_process, k=len(per_process))
            spread.append(statistics.median(r for ratios in picked for r in rng.choices(ratios, k=len(ratios))))
        spread.sort()
        results[name] = {"ratio": statistics.median(pooled), "low": spread[50], "high": spread[1949],
                         "per_process": [statistics.median(r) for r in per_process], "cycles": len(pooled)}
        r = results[name]
        print(f"  {name:<32} {r['ratio']:.4f} (95 % interval {r['low']:.4f}-{r['high']:.4f}; "
              f"per process {' '.join(f'{x:.4f}' for x in r['per_process'])})")
    medians = {}
    for kind in kinds:
        medians[kind] = [{m: statistics.median(c[m] for c in cycles) for m in INTERLEAVED_MODES}
                         for cycles in processes[kind]]
        pooled = {m: statistics.median(c[m] for cycles in processes[kind] for c in cycles) for m in INTERLEAVED_MODES}
        results[f"{kind} step_ms"] = {**pooled, "per_process": medians[kind]}
        results[f"{kind} faults"] = faults[kind]
        print(f"  {kind}: step ms " + ", ".join(f"{m} {ms:.2f}" for m, ms in pooled.items())
              + "; median faults a step " + " ".join(
                  "/".join(f"{f[m]:g}" for m in INTERLEAVED_MODES) for f in faults[kind]))
    # Across processes (the two of a round ran one after the other, in turns): what having
    # the recorder loaded costs the steps it records nothing of, and the issue's comparison
    # of a recorded run with one under torch.profiler. No interval: a handful of rounds.
    for name, (mode_a, mode_b) in {"record process plain / python plain": ("plain", "plain"),
                                   "record / torch.profiler, separate processes": ("itt", "profile")}.items():
        ratios = [a[mode_a] / b[mode_b] for a, b in zip(medians["opscope record"], medians["python"])]
        results[name] = {"ratio": statistics.median(ratios), "per_process": ratios}
        print(f"  {name}: {statistics.median(ratios):.4f} (per round {' '.join(f'{x:.4f}' for x in ratios)})")
    return results


def check_interleaved_session(args: argparse.Namespace, session: Path, report: dict) -> dict:
    """What the recorded process's session holds: it must have recorded the ITT blocks,
    dropped nothing, and recorded nothing else (a whole number of slices a step)."""
    got = opscope_recorded(args.opscope, session)
    itt_steps = sum(1 for b in report["blocks"] if b["mode"] == "itt") * INTERLEAVED_BLOCK
    itt_steps += INTERLEAVED_BLOCK  # the untimed first cycle's ITT block
    if got["slices"] == 0 or got["dropped_instant_count"]:
        sys.exit(f"recorded session {session}: {got}: nothing recorded, or events dropped")
    per_step = got["slices"] / itt_steps
    if per_step != int(per_step):
        sys.exit(f"recorded session {session}: {got['slices']} slices for {itt_steps} ITT-block "
                 "steps: slices outside the ITT blocks, or some missing")
    return {**got, "slices_per_itt_step": per_step}


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_targets(results: dict) -> list[dict]:
    """One table of every figure, its target and whether it is met."""
    rows = []

    def row(figure, value, spec, target="", met=None):
        rows.append({"figure": figure, "value": value, "target": target, "met": met})
        verdict = "" if met is None else ("yes" if met else "NO")
        print(f"{figure:<44} {fmt(value, spec):>10} {target:>10} {verdict:>5}")

    print("\n== figures and targets")
    print(f"{'figure':<44} {'value':>10} {'target':>10} {'met':>5}")
    pairs = results.get("pairs")
    if pairs:
        ours = pairs["opscope"]["ns_per_pair"]
        row("ITT pair, no collector (ns)", pairs["no collector"]["ns_per_pair"], ".1f")
        row("ITT pair, opscope collector (ns)", ours, ".1f")
        if "LTTng-UST" in pairs:
            theirs = pairs["LTTng-UST"]["ns_per_pair"]
            row("LTTng-UST tracepoint pair (ns)", theirs, ".1f")
            row("opscope pair / LTTng-UST pair", ours / theirs, ".3f", "<= 0.333", ours / theirs <= 1 / 3)
        row("CPU per event, opscope, writer included (ns)", pairs["opscope"]["cpu_ns_per_event"], ".1f")
        if "LTTng-UST" in pairs:
            row("CPU per event, LTTng-UST, daemons incl. (ns)", pairs["LTTng-UST"]["cpu_ns_per_event"], ".1f")
            row("  of which LTTng's daemons (ns, 10 ms ticks)", pairs["LTTng-UST"]["daemons_cpu_ns_per_event"], ".1f")
    rate = results.get("rate")
    if rate:
        row("bytes per event at 1 M events/s", rate["bytes_per_event"], ".2f", "<= 12", rate["bytes_per_event"] <= 12)
        row("bytes per slice at 1 M events/s", rate["bytes_per_slice"], ".2f")
        row("events lost at 1 M events/s (worst run)", rate["events_lost_max"], ",", "0", rate["events_lost_max"] == 0)
    jax = results.get("jax")
    if jax:
        row("jax: command, plain (s)", jax["plain"]["command_s"], ".2f")
        row("jax: jax.profiler alone / plain", jax["jax.profiler"]["command_s"] / jax["plain"]["command_s"], ".3f")
        row("jax: record / plain", jax["opscope record"]["command_s"] / jax["plain"]["command_s"], ".3f")
        ratio = jax["record_vs_jax_profiler"]
        row("jax: record / jax.profiler alone", ratio, ".3f", "<= 1.00", ratio <= 1)
    steps = results.get("steps")
    if steps and "keras" in steps:
        keras = steps["keras"]
        row("keras step, plain (ms)", keras["plain"]["step_ms"], ".2f")
        row("keras step, opscope record (ms)", keras["opscope record"]["step_ms"], ".2f")
        slower = keras["opscope record"]["vs_plain"]
        row("keras: record / plain", slower, ".3f", "<= 1.03", slower <= 1.03)
    if steps and "torch" in steps:
        torch = steps["torch"]
        row("torch step, plain (ms)", torch["plain"]["step_ms"], ".2f")
        row("torch step, emit_itt alone (ms)", torch["emit_itt alone"]["step_ms"], ".2f")
        row("torch step, opscope record (ms)", torch["opscope record"]["step_ms"], ".2f")
        row("torch step, torch.profiler (ms)", torch["torch.profiler"]["step_ms"], ".2f")
        ratio = torch["opscope record"]["step_ms"] / torch["torch.profiler"]["step_ms"]
        row("torch: record / torch.profiler", ratio, ".3f", "<= 1.00", ratio <= 1)
        # What the recorder adds to PyTorch's ITT mode, and what that mode costs alone.
        row("torch: record / emit_itt alone", torch["opscope record"]["step_ms"] / torch["emit_itt alone"]["step_ms"], ".3f")
        row("torch: emit_itt alone / torch.profiler", torch["emit_itt alone"]["step_ms"] / torch["torch.profiler"]["step_ms"], ".3f")
        for name, r in results.get("steps_ratios", {}).items():
            row(f"torch: {shorten(name)}, 95 % interval", f"{r['low']:.3f}-{r['high']:.3f}", "")
        for name, equal in results.get("steps_equal_faults", {}).items():
            row(f"torch, equal faults: {shorten(name)}", equal["ratio"], ".3f")
            row("  95 % interval", f"{equal['low']:.3f}-{equal['high']:.3f}", "")
    if steps and "keras, fixed heap" in steps:
        slower = steps["keras, fixed heap"]["opscope record"]["vs_plain"]
        row("keras, fixed heap: record / plain", slower, ".3f", "<= 1.03", slower <= 1.03)
    if steps and "torch, fixed heap" in steps:
        fixed = steps["torch, fixed heap"]
        row("torch, fixed heap: plain (ms)", fixed["plain"]["step_ms"], ".2f")
        row("torch, fixed heap: emit_itt alone / plain", fixed["emit_itt alone"]["vs_plain"], ".3f")
        row("torch, fixed heap: record / plain", fixed["opscope record"]["vs_plain"], ".3f")
        row("torch, fixed heap: profiler / plain", fixed["torch.profiler"]["vs_plain"], ".3f")
        ratio = fixed["opscope record"]["step_ms"] / fixed["torch.profiler"]["step_ms"]
        row("torch, fixed heap: record / profiler", ratio, ".3f", "<= 1.00", ratio <= 1)
    interleaved = results.get("interleaved")
    if interleaved:
        for name, r in interleaved.items():
            if not isinstance(r, dict) or "ratio" not in r:
                continue
            if "low" not in r:  # across processes: no interval
                row(f"torch, {name}", r["ratio"], ".4f")
                continue
            target = ("", None)
            if name == "record / torch.profiler":
                target = (f"high<={1 + NOT_SLOWER_MARGIN:g}", r["high"] <= 1 + NOT_SLOWER_MARGIN)
            row(f"torch, one process: {name}", r["ratio"], ".4f", *target)
            row("  95 % interval", f"{r['low']:.4f}-{r['high']:.4f}", "")
    return rows


def shorten(ratio_name: str) -> str:
    for long, short in (("opscope record", "record"), ("torch.profiler", "profiler"),
                        ("emit_itt alone", "emit_itt")):
        ratio_name = ratio_name.replace(long, short)
    return ratio_name


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["all", "pairs", "rate", "steps", "interleaved", "heap", "jax"],
                        default="all")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (default: 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before them (default: 1)")
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--pairs", type=int, default=4_000_000, help="--task pairs: pairs per run (default: 4000000)")
    parser.add_argument("--burst", type=int, default=25_000,
                        help="--task pairs: pairs per timed burst (default: 25000, 2 MB of opscope records: half its ring)")
    parser.add_argument("--pause-ms", type=int, default=20, help="--task pairs: pause between bursts (default: 20)")
    parser.add_argument("--rate", type=int, default=1_000_000, help="--task rate: events per second (default: 1000000)")
    parser.add_argument("--seconds", type=float, default=3.0, help="--task rate: how long (default: 3)")
    parser.add_argument("--steps", type=int, default=20, help="--task steps: timed steps per run (default: 20)")
    parser.add_argument("--jax-steps", type=int, default=120, help="--task jax: steps per run (default: 120)")
    parser.add_argument("--scripts", nargs="+", choices=list(STEP_SCRIPTS), default=list(STEP_SCRIPTS),
                        help="--task steps: which step scripts run; -fixed ones with glibc's heap trimming "
                        "fixed (default: all four)")
    parser.add_argument("--cycles", type=int, default=42,
                        help="--task interleaved: cycles of the three modes per process, best a multiple of 6, "
                        "the orders of the modes (default: 42)")
    parser.add_argument("--threads", type=int, default=1,
                        help="--task steps and interleaved: the frameworks' compute threads (default: 1; see record/torch_steps.py)")
    parser.add_argument("--python", type=Path, help="--task steps: python with torch and tensorflow "
                        "(default: $OPSCOPE_PYTHON, else ~/.cache/opscope-ci/venv-tests/bin/python)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = parser.parse_args()
    if args.task == "interleaved":
        args.warmup = 0  # the script's first cycle is its warm-up
    args.cache = Path(os.environ.get("OPSCOPE_CACHE") or Path.home() / ".cache/opscope-ci")
    args.python = args.python or Path(os.environ.get("OPSCOPE_PYTHON") or args.cache / "venv-tests/bin/python")
    args.opscope = args.opscope.resolve()
    args.library = args.opscope.parent / "libopscope_record.so"
    for built in (args.opscope, args.library):
        if not built.is_file():
            parser.error(f"no {built}: run `cargo build --release --workspace`")
    if args.task in ("all", "steps", "interleaved", "heap", "jax") and not os.access(args.python, os.X_OK):
        parser.error(f"no python at {args.python}: give one with torch and tensorflow-cpu (--python)")
    return args


def main() -> None:
    args = parse_args()
    for name in INJECTION_ENV:
        os.environ.pop(name, None)
    output = run_header(args)
    bins = build(args.cache) if args.task in ("all", "pairs", "rate") else {}
    results = {}
    if args.task in ("all", "pairs"):
        results["pairs"] = bench_pairs(args, bins)
    if args.task in ("all", "rate"):
        results["rate"] = bench_rate(args, bins)
    if args.task in ("all", "steps"):
        results["steps"] = bench_steps(args)
        if "torch" in results["steps"]:
            results["steps_ratios"] = steps_ratios(results["steps"]["torch"])
            results["steps_equal_faults"] = steps_at_equal_faults(results["steps"]["torch"])
    if args.task in ("all", "interleaved"):
        results["interleaved"] = bench_interleaved(args)
    if args.task == "heap":
        results["heap"] = bench_heap(args)
    if args.task == "jax":
        results["jax"] = bench_jax(args)
    output["targets"] = print_targets(results)
    runinfo.finish(output, results, args.json or runinfo.REPO / f"target/bench/record-{args.task}.json")


if __name__ == "__main__":
    main()
