"""A small training run for `torchsleuth watch` (and CI's smoke run): an MLP fit to a fixed target for a few steps.

    torchsleuth watch examples/train_mlp.py
"""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 16), torch.randn(64, 4)
for step in range(5):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss after 5 steps: {loss.item():.4f}")
