"""A small model sharded with FSDP2 (fully_shard) trained a few steps, with an L2 penalty read off the sharded parameters.

Run it as any sharded script: `torchrun --nproc-per-node 2 examples/train_fsdp2.py`, or watched:
`torchsleuth watch --nproc 2 examples/train_fsdp2.py` (gloo on the CPU; NCCL, one GPU a rank, when CUDA is there).
Between steps FSDP2's parameters are DTensors sharded on dim 0, so the penalty (a sum of squares of each) is
made of DTensor calls whose rules must leave the sums Partial until they are reduced; the optimizer's step runs
on the shards too.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.4, 2.5: FSDP2 is torch.distributed._composable.fsdp
    from torch.distributed._composable.fsdp import fully_shard


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(8, 16)
        self.decoder = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.decoder(torch.relu(self.encoder(x)))


def main(steps: int = 3) -> float:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    mesh = init_device_mesh(device, (int(os.environ["WORLD_SIZE"]),))
    torch.manual_seed(0)
    model = Net().to(device)
    fully_shard(model.encoder, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    # the same batch on every rank, so the run computes what one process would (`watch --parity` compares them)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(6, 8, generator=generator).to(device)
        target = torch.randn(6, 4, generator=generator).to(device)
        penalty = sum(p.pow(2).sum() for p in model.parameters())  # DTensor calls on the shards
        loss = torch.nn.functional.mse_loss(model(x), target) + 1e-3 * penalty.full_tensor()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


if __name__ == "__main__":
    loss = main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    if dist.get_rank() == 0:
        print(f"final loss {loss:.4f}")
    dist.destroy_process_group()
