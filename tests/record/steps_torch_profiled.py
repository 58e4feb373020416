"""A PyTorch program written unlike the other steps programs: a GRU over random
sequences fed by a DataLoader with two worker processes, under the program's own
torch.profiler with a schedule (wait 1, warm-up 1, active 3, twice) that writes
through tensorboard_trace_handler into argv[2], `prof.step()` after each batch; the
loop stops after STEPS batches though the loader has more. Each iteration, from the
batch in hand to the end of its optimizer step, goes to the step log (argv[1]).
opscope's emit_itt stands aside while the profiler records: the steps must stay, as
many as the loop ran, and the step the last `prof.step()` opens is none."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from steps_log import StepLog

STEPS = 14


class Sequences(Dataset):
    def __len__(self):
        return 40 * 16

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(24, 32, generator=g), torch.randint(0, 5, (), generator=g)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, 128, batch_first=True)
        self.head = nn.Linear(128, 5)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Sequences(), batch_size=16, num_workers=2)
    log = StepLog(sys.argv[1])
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(sys.argv[2]),
    ) as prof:
        for step, (x, y) in enumerate(loader):
            log.begin()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            log.end()
            prof.step()
            if step + 1 == STEPS:
                break


if __name__ == "__main__":
    main()
