"""A small tensor-parallel MLP trained a few steps: Colwise then Rowwise Linear, a softmax gate between them.

Run it as any sharded script: `torchrun --nproc-per-node 2 examples/train_tp_mlp.py`, or watched:
`torchsleuth watch --nproc 2 examples/train_tp_mlp.py` (gloo on the CPU; NCCL, one GPU a rank, when CUDA is there).
The up projection's output stays a DTensor sharded on its last dim (use_local_output=False), so the softmax
over that dim is a DTensor call whose rule must gather the dim first; a sequence-parallel input flattened
and averaged (the "norm" below) makes a _StridedShard, whose reduction rule must keep its split factor.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Block(torch.nn.Module):
    def __init__(self, width: int = 8, hidden: int = 16):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.softmax(self.up(x), dim=-1))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return x + self.block(x)


def main(steps: int = 3) -> float:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    mesh = init_device_mesh(device, (int(os.environ["WORLD_SIZE"]),))
    torch.manual_seed(0)
    model = MLP().to(device)
    model = parallelize_module(model, mesh, {"block.up": ColwiseParallel(use_local_output=False), "block.down": RowwiseParallel()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        x = torch.randn(2, 4, 8, device=device)  # the same on every rank: seeded alike
        target = torch.randn(2, 4, 8, device=device)
        # sequence parallel: the input's tokens sharded over the ranks, then flattened ([batch, seq] -> rows)
        tokens = distribute_tensor(x, mesh, [Shard(1)]).view(8, 8)
        scale = tokens.pow(2).mean(-1).redistribute(mesh, [Replicate()]).to_local().mean()
        out = model(x / scale.sqrt())
        loss = torch.nn.functional.mse_loss(out, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


if __name__ == "__main__":
    loss = main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    if dist.get_rank() == 0:
        print(f"final loss {loss:.4f}")
    dist.destroy_process_group()
