"""Two gloo ranks started by torch.multiprocessing.spawn, as many DDP tutorials start
them: each process gets its rank as an argument, and no RANK, WORLD_SIZE or LOCAL_RANK
in its environment. Each rank appends {"rank": R, "pid": PID} to argv[1] (one line):
the oracle of which process is which rank."""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world, port, log):
    dist.init_process_group(
        "gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world
    )
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 8)
    for _ in range(3):
        model(torch.randn(16, 64)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    with open(log, "a") as f:
        f.write(json.dumps({"rank": rank, "pid": os.getpid()}) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(name, None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(2, port, sys.argv[1]), nprocs=2)
