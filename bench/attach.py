"""What sampling a running program's Python stacks costs it: the median step time of a
PyTorch CPU training loop (bench/record/attach_steps.py, which times its own steps)
run alone, with `opscope attach` sampling it at 100 Hz, and with `py-spy record` at
100 Hz (its default, which stops the process for each sample, and --nonblocking, which
reads it running as opscope does); and run under `opscope record` with its default
stack sampling (100 Hz) and with `--no-stacks`, whose ratio is what the sampling costs
a recording, and with `--no-native` (Python stacks only), whose ratio is what the
native stacks cost on top. Each round runs the variants in turn (the order rotating); the figures
are the medians over rounds and their ratio to alone.

    python3 bench/attach.py [--rounds 9] [--steps 400] [--opscope target/release/opscope]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    cache = Path(os.environ.get("OPSCOPE_CACHE") or Path.home() / ".cache/opscope-ci")
    parser.add_argument("--python", help="a python with torch and py-spy (default: $OPSCOPE_PYTHON, "
                        "else the tests' venv, which .ci/run makes from tests/requirements.txt)",
                        default=os.environ.get("OPSCOPE_PYTHON") or str(cache / "venv-tests/bin/python"))
    args = parser.parse_args()
    py_spy = str(Path(args.python).with_name("py-spy"))
    if not Path(py_spy).exists():
        py_spy = shutil.which("py-spy") or parser.error(f"no py-spy beside {args.python} or on PATH")
    run = runinfo.start(rounds=args.rounds, steps=args.steps)
    script = REPO / "bench/record/attach_steps.py"
    def recorded(*options):
        return lambda out: [args.opscope, "record", "-q", *options, "-o", out, "--"]

    # Samplers started beside the program once it is ready; launchers it runs under.
    launchers = {
        "opscope record": recorded(),
        "opscope record --no-stacks": recorded("--no-stacks"),
        "opscope record --no-native": recorded("--no-native"),
    }
    variants = {
        "alone": None,
        "opscope record": None,
        "opscope record --no-stacks": None,
        "opscope record --no-native": None,
        "opscope attach": lambda pid, out: [args.opscope, "attach", str(pid), "--duration",
                                            "120s", "--rate", "100", "-o", out],
        "py-spy record": lambda pid, out: [py_spy, "record", "--pid", str(pid), "--rate", "100",
                                           "--format", "raw", "-o", out + ".raw"],
        "py-spy --nonblocking": lambda pid, out: [py_spy, "record", "--nonblocking", "--pid",
                                                  str(pid), "--rate", "100", "--format", "raw",
                                                  "-o", out + ".raw"],
    }
    medians = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="opscope-bench-attach-") as tmp:
        for r in range(args.rounds):
            names = list(variants)
            names = names[r % len(names):] + names[:r % len(names)]
            for name in names:
                out = os.path.join(tmp, f"{r}-{name.replace(' ', '_')}")
                launcher = launchers[name](out) if name in launchers else []
                program = subprocess.Popen([*launcher, args.python, str(script), str(args.steps)],
                                           stdout=subprocess.PIPE, text=True)
                assert program.stdout.readline().strip() == "ready"
                sampler = None
                if variants[name]:
                    sampler = subprocess.Popen(variants[name](program.pid, out),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                median_us = float(program.stdout.readline())
                program.wait()
                if sampler:
                    sampler.terminate()
                    sampler.wait()
                medians[name].append(median_us)
    alone = statistics.median(medians["alone"])
    print("| variant | median step (µs) | / alone |")
    print("|---|---|---|")
    for name, values in medians.items():
        m = statistics.median(values)
        print(f"| {name} | {m:.1f} | {m / alone:.3f} |")
    # Paired by round: what the stacks cost a recording, round by round.
    pairs = [a / b for a, b in zip(medians["opscope record"], medians["opscope record --no-stacks"])]
    print(f"\nrecord / record --no-stacks, median of {len(pairs)} rounds: "
          f"{statistics.median(pairs):.3f} (min {min(pairs):.3f}, max {max(pairs):.3f})")
    native = [a / b for a, b in zip(medians["opscope record"], medians["opscope record --no-native"])]
    print(f"record / record --no-native (what native stacks add), median of {len(native)} rounds: "
          f"{statistics.median(native):.3f} (min {min(native):.3f}, max {max(native):.3f})")
    runinfo.finish(run, medians)


if __name__ == "__main__":
    main()
