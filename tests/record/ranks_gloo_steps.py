"""A 2-rank data-parallel training loop on the CPU (gloo), written unlike ranks.py: an
MLP whose gradients each rank all-reduces itself after backward, parameter by
parameter, timing those calls. Each rank writes, per step, the step's start and end and
the time its all-reduce calls took (one JSON object per line, to argv[1] + ".RANK"):
the oracle of the communication opscope finds on the CPU."""

import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

STEPS = 10

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
out = open("%s.%d" % (sys.argv[1], rank), "w")
for step in range(STEPS):
    start = (time.monotonic_ns(), time.time_ns())
    x = torch.randn(128, 256)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    talking = 0
    for p in model.parameters():
        t = time.monotonic_ns()
        dist.all_reduce(p.grad)
        talking += time.monotonic_ns() - t
    opt.step()
    end = (time.monotonic_ns(), time.time_ns())
    out.write(json.dumps({
        "monotonic": [start[0], end[0]],
        "unix": [start[1], end[1]],
        "communication_ns": talking,
    }) + "\n")
out.close()
# Without a barrier gloo's teardown aborted a rank now and then on busy cores.
dist.barrier()
dist.destroy_process_group()
