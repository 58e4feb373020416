"""Times the training steps of a small PyTorch CNN on the CPU (random data), for
bench/record.py: WARMUP untimed steps, then STEPS steps each timed with perf_counter.
With --profile the whole loop runs inside torch.profiler.profile(activities=[CPU]), the
peer `opscope record` is compared with. With --itt it runs inside
torch.autograd.profiler.emit_itt() with no collector loaded: what PyTorch's ITT mode,
the one `opscope record` turns on, costs by itself (ittnotify's own stubs take the
calls). Prints {"steps_ms": [...], "faults": [...]} (the minor page faults of each timed
step) as JSON. With --heap, also "arena_bytes" and "in_use_bytes" after each timed step
(glibc's mallinfo2, read outside the timing): whether the heap was trimmed, and what a
mode keeps in it.

One compute thread by default: on a 2-core machine shared with other work, two OpenMP
threads that wait for each other at every op made steps take anywhere from 18 to 340 ms.

    python torch_steps.py [--steps 20] [--warmup 5] [--threads 1] [--profile | --itt] [--heap]
"""

import argparse
import json

from torch_cnn import context, heap, make_step, timed

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--heap", action="store_true")
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--profile", action="store_true")
mode.add_argument("--itt", action="store_true")
args = parser.parse_args()
step = make_step(args.threads)

steps_ms = []
faults = []  # minor page faults of each timed step
heaps = []  # (arena, in use) after each timed step, with --heap
with context("profile" if args.profile else "itt" if args.itt else "plain"):
    for i in range(args.warmup + args.steps):
        ms, step_faults = timed(step)
        if i >= args.warmup:
            steps_ms.append(ms)
            faults.append(step_faults)
            if args.heap:
                heaps.append(heap())
report = {"steps_ms": steps_ms, "faults": faults}
if args.heap:
    report["arena_bytes"] = [arena for arena, _ in heaps]
    report["in_use_bytes"] = [in_use for _, in_use in heaps]
print(json.dumps(report))
