"""A PyTorch DataLoader with 2 worker processes feeding a tiny model; writes the pids
of the workers (and of the main process) to argv[1]."""

import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Slow(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        time.sleep(0.03)  # so that both workers live through a few samples
        return torch.full((4,), float(i)), os.getpid()


if __name__ == "__main__":
    loader = DataLoader(Slow(), batch_size=2, num_workers=2)
    model = torch.nn.Linear(4, 1)
    workers = set()
    for x, pids in loader:
        model(x).sum().backward()
        workers.update(int(p) for p in pids)
    with open(sys.argv[1], "w") as out:
        json.dump({"main": os.getpid(), "workers": sorted(workers)}, out)
