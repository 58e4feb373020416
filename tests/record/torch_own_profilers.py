"""A PyTorch program that runs its own profilers, one after the other, with plain work
between them: torch.profiler (plain, and with a schedule writing through
tensorboard_trace_handler), autograd's profiler, the legacy profiler, and emit_itt.
Each block uses an op of its own, so what each profiler saw can be told apart.

Prints, as JSON, what each of its profilers counted per op and the files they wrote
under OUT (argv[1]) with their event counts: the same, with or without opscope record."""

import json
import os
import sys

import torch
import torch.autograd.profiler_legacy as legacy
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

OUT = sys.argv[1]
x = torch.randn(32, 32)


def plain():
    """Work no profiler of the program's sees: only opscope records it."""
    for _ in range(10):
        torch.sin(x)


def counts(events):
    got = {}
    for e in events:
        if e.key.startswith("aten::"):
            got[e.key] = e.count
    return got


report = {}
plain()
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(10):
        torch.cos(x)
report["torch.profiler"] = counts(p.key_averages())
p.export_chrome_trace(os.path.join(OUT, "profile.json"))
plain()

steps = schedule(wait=1, warmup=1, active=2, repeat=1)
with profile(
    activities=[ProfilerActivity.CPU],
    schedule=steps,
    on_trace_ready=tensorboard_trace_handler(os.path.join(OUT, "tb")),
) as p:
    for _ in range(6):
        torch.exp(x)
        p.step()
report["torch.profiler schedule"] = counts(p.key_averages())
plain()

with torch.autograd.profiler.profile() as p:
    for _ in range(10):
        torch.tan(x)
report["autograd profiler"] = counts(p.key_averages())
plain()

with legacy.profile() as p:
    for _ in range(10):
        torch.sqrt(x)
report["legacy profiler"] = counts(p.key_averages())

with torch.autograd.profiler.emit_itt():
    for _ in range(10):
        torch.sigmoid(x)
plain()

files = {}
for root, _, names in os.walk(OUT):
    for name in names:
        path = os.path.join(root, name)
        with open(path) as f:
            trace = json.load(f)
        ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
        # tensorboard_trace_handler names its file after the host, pid and time.
        key = os.path.relpath(root, OUT) + "/" + ("*.pt.trace.json" if root != OUT else name)
        files[key] = len(ops)
report["files"] = files
print(json.dumps(report, sort_keys=True))
