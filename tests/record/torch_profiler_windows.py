"""A PyTorch training loop whose own profiler runs on a schedule, written fresh: a
Conv1d + GRU sequence classifier on CPU, two DataLoader workers, gradient accumulation
over two batches, the default (one tensor at a time, on CPUs) AdamW, and an evaluation
helper called before the loop. `torch.profiler.schedule(wait=1, warmup=1, active=3,
repeat=2)` makes two windows of three steps each, the second some steps after the
first; each window's trace is written to OUT/window-N.json and torch's own
`key_averages()` of it to OUT/window-N.key_averages.json.

    python torch_profiler_windows.py OUT
"""

import json
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sequences(Dataset):
    def __len__(self):
        return 32 * 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(48, 12, generator=g)
        return x, int(x.mean() > 0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(12, 32, 3, padding=1)
        self.gru = nn.GRU(32, 48, batch_first=True)
        self.head = nn.Linear(48, 2)

    def forward(self, x):
        h = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        out, _ = self.gru(h)
        return self.head(out[:, -1])


def evaluate(model, batches=2):
    model.eval()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(32, 48, 12))
    model.train()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Sequences(), batch_size=32, num_workers=2)
    evaluate(model)

    windows = []

    def window_ready(prof):
        n = len(windows)
        prof.export_chrome_trace(os.path.join(out, f"window-{n}.json"))
        rows = [
            {
                "name": e.key,
                "count": e.count,
                "self_cpu_us": e.self_cpu_time_total,
                "cpu_us": e.cpu_time_total,
            }
            for e in prof.key_averages()
        ]
        with open(os.path.join(out, f"window-{n}.key_averages.json"), "w") as f:
            json.dump(rows, f)
        windows.append(n)

    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=window_ready,
    ) as prof:
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / 2
            loss.backward()
            if i % 2 == 1:
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
            if i == 11:
                break
    assert len(windows) == 2, windows


if __name__ == "__main__":
    main()
