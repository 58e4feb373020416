"""Times the training steps of bench/record/torch_steps.py's CNN in one process, in
blocks that take turns: plain, inside torch.autograd.profiler.emit_itt() (PyTorch's ITT
mode: under `opscope record --no-python` our collector takes its calls, otherwise
ittnotify's no-op stubs do) and inside torch.profiler.profile(activities=[CPU]).

Separate processes of one variant differ by up to 10 % in step time, with where glibc's
heap happens to be trimmed and with the machine's drift; blocks of one process share the
heap's history and the drift, so their differences are what each mode costs. The first
step of every block is left out (entering the profiler allocates), and the cycles go
through the six orders of the three modes in turn: over 6 cycles the profiler's exit
(its post-processing) is followed by a plain block and by an ITT block 3 times each,
and the profiler follows each of them 3 times.
Prints {"modes": [...], "blocks": [{"mode", "cycle", "steps_ms", "faults"}, ...]}.

    python torch_interleaved.py [--cycles 42] [--block 6] [--warmup-cycles 1] [--threads 1]
"""

import argparse
import contextlib
import itertools
import json
import resource
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--cycles", type=int, default=42, help="best a multiple of 6")
parser.add_argument("--block", type=int, default=6, help="steps per block, the first untimed")
parser.add_argument("--warmup-cycles", type=int, default=1)
parser.add_argument("--threads", type=int, default=1)
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


def context(mode):
    if mode == "profile":
        from torch.profiler import ProfilerActivity, profile

        return profile(activities=[ProfilerActivity.CPU])
    if mode == "itt":
        return torch.autograd.profiler.emit_itt()
    return contextlib.nullcontext()


MODES = ["plain", "itt", "profile"]
ORDERS = list(itertools.permutations(MODES))
blocks = []
for cycle in range(args.warmup_cycles + args.cycles):
    for mode in ORDERS[cycle % len(ORDERS)]:
        steps_ms, faults = [], []
        with context(mode):
            for step in range(args.block):
                faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
                if step > 0:
                    steps_ms.append((time.perf_counter() - start) * 1e3)
                    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
        if cycle >= args.warmup_cycles:
            blocks.append({"mode": mode, "cycle": cycle - args.warmup_cycles,
                           "steps_ms": steps_ms, "faults": faults})
print(json.dumps({"modes": MODES, "blocks": blocks}))
