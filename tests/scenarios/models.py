"""Small real models for watch's clean runs: an MLP, a CNN in channels_last, a transformer block."""

import torch


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)), torch.randn(8, 16)


def cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 4),
    ).to(memory_format=torch.channels_last)
    return model, torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
    return layer, torch.randn(2, 5, 16)


def train(build, steps: int = 3, seed: int = 0) -> float:
    torch.manual_seed(seed)
    model, data = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(data).float().pow(2).mean()
        loss.backward()
        optimizer.step()
    return float(loss.detach())
