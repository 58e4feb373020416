"""A PyTorch CPU training loop that times its own steps, for bench/attach.py: an MLP
(one compute thread), 30 warm-up steps, then `ready` on stdout and STEPS timed steps;
prints the median step time in microseconds at the end."""

import statistics
import sys
import time

import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 512)
y = torch.randint(0, 10, (128,))


def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(30):
    step()
print("ready", flush=True)
times = []
for _ in range(STEPS):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
print(f"{statistics.median(times) * 1e6:.1f}", flush=True)
