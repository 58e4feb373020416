"""When, where and on what a benchmark ran: the line every script under bench/ prints
above its tables, and the raw results it writes beside them. A busy machine skews every
figure; the load average at the start and at the end says whether it was busy, and the
processor says which kind of machine it was (two 2-core guests ran the same load 3x
apart)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def processor() -> str:
    """The processor's model name, family and whether it runs under a hypervisor, from
    /proc/cpuinfo ("?" where there is none)."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
            if not line.strip():
                break
    except OSError:
        return "?"
    name = fields.get("model name", "?")
    family = fields.get("cpu family")
    guest = " (a guest)" if "hypervisor" in fields.get("flags", "").split() else ""
    return f"{name}{f', family {family}' if family else ''}{guest}"


def start(**settings) -> dict:
    """Prints the run's header line and returns it as the raw results' head."""
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "?"
    run = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python3", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "commit": commit,
        "cores": os.cpu_count(),
        "processor": processor(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
        **settings,
    }
    extra = "".join(f"; {k} {v}" for k, v in settings.items())
    print(f"{run['date']} · `{run['command']}` · opscope {commit} · {run['cores']} cores of {run['processor']} · "
          f"load average {run['load_average_at_start']:.2f} at the start{extra}", flush=True)
    return run


def finish(run: dict, results, path: Path | None = None) -> Path:
    """Adds `results` and the load at the end to `run`, writes it as JSON to `path`
    (default: target/bench/SCRIPT.json) and says where."""
    run["load_average_at_end"] = round(os.getloadavg()[0], 2)
    run["results"] = results
    path = path or REPO / "target" / "bench" / f"{Path(sys.argv[0]).stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=2, default=str) + "\n")
    shown = path.resolve()
    if shown.is_relative_to(REPO):
        shown = shown.relative_to(REPO)
    print(f"\nload average {run['load_average_at_end']:.2f} at the end; raw results: {shown}", flush=True)
    return path
