"""A 2-rank DistributedDataParallel loop on the CPU (gloo), for `opscope diff` of two
runs of a job: with `slow` as argv[1], rank 1 alone does 30 extra 128x128 matmuls per
step before its forward pass. gloo's runloop threads wait inside each all-reduce longer
than the main thread works, so the busiest thread is not the step's."""

import sys

import torch
import torch.distributed as dist
from torch import nn

STEPS = 30


def warm_up(model):
    # A helper called before the loop: its ops belong to no step.
    with torch.no_grad():
        model(torch.randn(4, 64))


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
warm_up(model)
slow = sys.argv[1] == "slow" and rank == 1
for step in range(STEPS):
    x = torch.randn(32, 64)
    if slow:
        for _ in range(30):
            torch.randn(128, 128).mm(torch.randn(128, 128))
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
# Without it, gloo's teardown aborted one rank ("terminate called without an active
# exception") in 2 of 10 runs on two busy cores, with or without opscope; 0 of 12 with.
dist.barrier()
dist.destroy_process_group()
