"""One rank of a 2-process torchrun job on the CPU (gloo): a few all-reduces between
small matmuls. Each rank writes its pid to argv[1] + ".<rank>"."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.ones(64, 64) * (rank + 1)
for _ in range(3):
    y = x @ x
    dist.all_reduce(y)
# Without a barrier gloo's teardown aborted a rank now and then on busy cores.
dist.barrier()
dist.destroy_process_group()
with open(f"{sys.argv[1]}.{rank}", "w") as out:
    out.write(str(os.getpid()))
