"""A PyTorch training loop for `opscope attach`, written fresh: an MLP on CPU with a
fixed seed, trained for STEPS steps (argv[1], default 600: a few seconds; counted, not
timed: the same steps every run), printing `ready` after the first step and its final
loss at the end, so that a run with opscope attached can be compared with one without."""

import sys

import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 600

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(256, 256)
y = torch.randint(0, 10, (256,))


def train_step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


loss = train_step()
print("ready", flush=True)
for _ in range(STEPS):
    loss = train_step()
print(f"final loss {loss:.6f}", flush=True)
