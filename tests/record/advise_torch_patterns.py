"""A PyTorch training loop for `opscope advise`'s PyTorch rules, written fresh: an MLP
on CPU (three hidden layers) trained for 8 steps under the program's own `torch.profiler`, which writes
its Kineto trace to OUT.

    python advise_torch_patterns.py bad|good OUT.json

`bad`: the DataLoader loads in the training process (num_workers=0) from a dataset that
takes 25 ms a batch, the optimizer is SGD with foreach=False, and zero_grad writes
zeros (set_to_none=False). `good`: two loader workers that have every batch ready in
their queue before the loop starts, foreach=True, set_to_none=True.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, delay):
        self.delay = delay

    def __len__(self):
        return 128 * 16

    def __getitem__(self, i):
        time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(512, generator=g), torch.randint(0, 10, (), generator=g)


def main():
    mode, out = sys.argv[1], sys.argv[2]
    bad = mode == "bad"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # Three hidden layers: a step long enough (about 150 ms) that taking a ready batch
    # from the workers (a few ms on a loaded machine) stays well under the rule's 5 %.
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=not bad)
    # bad: 128 samples × 0.2 ms = ~25 ms a batch, in the loop; good: workers load ahead.
    loader = DataLoader(
        Slow(0.0002 if bad else 0.0001),
        batch_size=128,
        num_workers=0 if bad else 2,
        prefetch_factor=None if bad else 8,
        persistent_workers=not bad,
    )
    batches = iter(loader)
    if not bad:
        # The workers fill their queue before the profiled steps: every batch the run
        # takes (ten) is there first, however long a loaded machine makes that (a
        # second's sleep left the loop waiting on them: 5.3 % of a step, in a test run
        # sharing two cores).
        deadline = time.monotonic() + 120
        while batches._data_queue.qsize() < 10 and time.monotonic() < deadline:
            time.sleep(0.01)

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=not bad)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    # A helper called before the loop, as real programs warm up.
    train_step(*next(batches))
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=8),
        on_trace_ready=lambda p: p.export_chrome_trace(out),
    ) as prof:
        for _ in range(9):
            x, y = next(batches)
            train_step(x, y)
            prof.step()


if __name__ == "__main__":
    main()
