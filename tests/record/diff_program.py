"""A small PyTorch training loop on the CPU for `diff`: run as given (`same`), with
the data loader sleeping 15 ms per batch (`sleep`; `slows`: in the second half of
the steps only), or with its middle layer 4x wider (`wide`). argv[1] is the variant; the steps are not marked in any way.

With argv[2] and argv[3] (a directory and a count), the loop starts only once that
many runs are ready to start theirs, so that runs compared side by side share the
machine alike. With `--log PATH`, the program writes its own timing of each step to
PATH at the end, one line per step: the nanoseconds its data loader took to hand over
the batch, then the whole step's (the tests' reference for what `diff` measures from
the trace, taken in the same run and so under the same load)."""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

ARGS = sys.argv[1:]
LOG = None
if "--log" in ARGS:
    at = ARGS.index("--log")
    LOG = ARGS[at + 1]
    del ARGS[at : at + 2]
VARIANT = ARGS[0]
STEPS = 60


class Data(Dataset):
    def __len__(self):
        return 32 * STEPS

    def __getitem__(self, i):
        if i % 32 == 0 and (VARIANT == "sleep" or (VARIANT == "slows" and i >= len(self) // 2)):
            time.sleep(0.015)
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g), torch.randn(10, generator=g)


def build():
    hidden = 4096 if VARIANT == "wide" else 1024
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def wait_for_the_others():
    if len(ARGS) < 3:
        return
    ready, count = ARGS[1], int(ARGS[2])
    os.makedirs(ready, exist_ok=True)
    open(os.path.join(ready, str(os.getpid())), "w").close()
    while len(os.listdir(ready)) < count:
        time.sleep(0.001)


torch.manual_seed(0)
torch.set_num_threads(1)
model = build()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
wait_for_the_others()
batches = iter(DataLoader(Data(), batch_size=32))
timings = []
while True:
    start = time.perf_counter_ns()
    try:
        x, y = next(batches)
    except StopIteration:
        break
    loaded = time.perf_counter_ns()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    timings.append((loaded - start, time.perf_counter_ns() - start))
if LOG:
    with open(LOG, "w") as log:
        log.writelines(f"{loader} {step}\n" for loader, step in timings)
