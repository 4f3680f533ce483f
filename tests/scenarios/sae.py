"""The first seed story's model: a sparse autoencoder trained with Adam.

The encoder's weight starts as ``decoder.weight.T.clone()``, which keeps the
transposed strides, so the encoder weight (and Adam's state for it, made by
``zeros_like``) is not contiguous. Run it as ``python sae.py [steps]`` or
under ``torchsleuth watch sae.py [steps]``.
"""

import sys

import torch


class SparseAutoencoder(torch.nn.Module):
    def __init__(self, features: int = 32, hidden: int = 64):
        super().__init__()
        self.decoder = torch.nn.Linear(hidden, features)
        self.encoder = torch.nn.Linear(features, hidden)
        with torch.no_grad():
            self.encoder.weight = torch.nn.Parameter(self.decoder.weight.T.clone())  # transposed strides

    def forward(self, x):
        code = torch.relu(self.encoder(x))
        return self.decoder(code), code


def train(steps: int = 5, seed: int = 0) -> float:
    torch.manual_seed(seed)
    model = SparseAutoencoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randn(16, 32)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        optimizer.zero_grad()
        reconstruction, code = model(data)
        loss = torch.nn.functional.mse_loss(reconstruction, data) + 1e-3 * code.abs().mean()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


if __name__ == "__main__":
    print(f"final loss {train(int(sys.argv[1]) if len(sys.argv) > 1 else 5):.4f}")
