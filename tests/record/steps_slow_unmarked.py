"""A PyTorch training loop with no step markers of any kind (no profiler, no
record_function): a two-layer MLP on random batches, 16 steps, one of which (step 9)
sleeps 1.5 s after its backward pass. The agent finds its steps by the repeating op
sequence, and its `slow-step` trigger must judge them as it judges marked ones."""

import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(16):
    x = torch.randn(256, 512)
    loss = (model(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    if step == 9:
        time.sleep(1.5)
    optimizer.step()
