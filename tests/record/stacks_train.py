"""A small PyTorch training loop for the sampled stacks of `opscope record`, written
unlike the other tests' programs: a DataLoader with two worker processes, a model of
two Linear layers, and `augment`, a pure-Python helper called once per step that
takes a good part of each step. It times `augment` itself and, at the end, prints one
JSON line: the seconds spent in it, the program's own measure."""

import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def augment(batch):
    # Python work on the host between steps (a metric, a Python-side transform).
    total = 0.0
    for v in batch[0, :64].tolist():
        for _ in range(10000):
            total += v * 0.5
    return total


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(128, 512)
        self.second = torch.nn.Linear(512, 4)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def train_step(net, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    torch.manual_seed(0)
    x = torch.randn(2048, 128)
    y = torch.randint(0, 4, (2048,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, num_workers=2)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    in_augment = 0.0
    for epoch in range(3):
        for xb, yb in loader:
            train_step(net, opt, xb, yb)
            began = time.perf_counter()
            augment(xb)
            in_augment += time.perf_counter() - began
    print(json.dumps({"augment_s": in_augment}), flush=True)


if __name__ == "__main__":
    main()
