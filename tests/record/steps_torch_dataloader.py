"""A small CNN trained for a few steps from a DataLoader with 2 worker processes, as a
training loop is usually written; each step, from asking the loader for a batch to the
end of the optimizer step, goes to the step log (argv[1]). Making the iterator (which
starts the workers) is set-up, not a step."""

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from steps_log import StepLog

STEPS = 12
# Steps of over 100 ms: 1 % of one (the tests' bound) stays above the time between the
# program's log and the loader's first recorded call, however busy the machine. In the
# first step that is 0.2-0.7 ms: the copy-on-write faults the parent takes after forking
# its workers, before its first range (no tracer sees them without a marker). Batches
# of 256 made steps of 52-64 ms on a faster machine, where 0.7 ms was 1.1 %.
BATCH = 512


class Images(Dataset):
    def __len__(self):
        return STEPS * BATCH

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10


def note_worker(_):
    """Each worker's pid, for the test that checks which processes are workers."""
    path = os.environ.get("STEPS_WORKER_PIDS")
    if path:
        with open(path, "a") as f:
            f.write("%d\n" % os.getpid())


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=BATCH, num_workers=2, worker_init_fn=note_worker)
    log = StepLog(sys.argv[1])
    batches = iter(loader)
    while True:
        log.begin()
        try:
            x, y = next(batches)
        except StopIteration:
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        log.end()
