"""Times the training steps of a small PyTorch CNN on the CPU (random data), for
bench/record.py: WARMUP untimed steps, then STEPS steps each timed with perf_counter.
With --profile the whole loop runs inside torch.profiler.profile(activities=[CPU]), the
peer `opscope record` is compared with. With --itt it runs inside
torch.autograd.profiler.emit_itt() with no collector loaded: what PyTorch's ITT mode,
the one `opscope record` turns on, costs by itself (ittnotify's own stubs take the
calls). Prints {"steps_ms": [...], "faults": [...]} (the minor page faults of each timed
step) as JSON.

One compute thread by default: on a 2-core machine shared with other work, two OpenMP
threads that wait for each other at every op made steps take anywhere from 18 to 340 ms.

    python torch_steps.py [--steps 20] [--warmup 5] [--threads 1] [--profile | --itt]
"""

import argparse
import contextlib
import json
import resource
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--threads", type=int, default=1)
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--profile", action="store_true")
mode.add_argument("--itt", action="store_true")
args = parser.parse_args()
torch.set_num_threads(args.threads)

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 6 * 6, 128), nn.ReLU(), nn.Linear(128, 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 3, 32, 32)
y = torch.randint(0, 10, (64,))

if args.profile:
    from torch.profiler import ProfilerActivity, profile

    context = profile(activities=[ProfilerActivity.CPU])
elif args.itt:
    context = torch.autograd.profiler.emit_itt()
else:
    context = contextlib.nullcontext()

steps_ms = []
faults = []  # minor page faults of each timed step
with context:
    for step in range(args.warmup + args.steps):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step >= args.warmup:
            steps_ms.append((time.perf_counter() - start) * 1e3)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
print(json.dumps({"steps_ms": steps_ms, "faults": faults}))
