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
import itertools
import json

from torch_cnn import MODES, context, make_step, timed

parser = argparse.ArgumentParser()
parser.add_argument("--cycles", type=int, default=42, help="best a multiple of 6")
parser.add_argument("--block", type=int, default=6, help="steps per block, the first untimed")
parser.add_argument("--warmup-cycles", type=int, default=1)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()
step = make_step(args.threads)

ORDERS = list(itertools.permutations(MODES))
blocks = []
for cycle in range(args.warmup_cycles + args.cycles):
    for mode in ORDERS[cycle % len(ORDERS)]:
        with context(mode):
            timed_steps = [timed(step) for _ in range(args.block)][1:]
        if cycle >= args.warmup_cycles:
            blocks.append({"mode": mode, "cycle": cycle - args.warmup_cycles,
                           "steps_ms": [ms for ms, _ in timed_steps],
                           "faults": [f for _, f in timed_steps]})
print(json.dumps({"modes": MODES, "blocks": blocks}))
