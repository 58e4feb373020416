"""A small PyTorch CNN trained on random data for a few steps on the CPU. With
`profile` it runs under torch.profiler and prints key_averages() counts as JSON."""

import json
import sys

import torch
import torch.nn as nn


def train():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 15 * 15, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 3, 32, 32)
    y = torch.randint(0, 10, (16,))
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


if sys.argv[1:] == ["profile"]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train()
    print(json.dumps({e.key: e.count for e in prof.key_averages()}))
else:
    train()
