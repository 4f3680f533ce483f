"""A small transformer-style block on a 2-D mesh: FSDP2 over "dp", tensor and sequence parallel over "tp".

Run it as any sharded script: `torchrun --nproc-per-node 4 examples/train_2d.py`, or watched:
`torchsleuth watch --nproc 4 examples/train_2d.py` (gloo on the CPU; NCCL, one GPU a rank, when CUDA is there).
The mesh is (dp, tp) = (world / 2, 2) (on one rank, (1, 1)). The norm is sequence parallel (its input's
tokens sharded over tp), the up projection Colwise (it gathers the tokens), the down projection Rowwise (its
partial sums reduce-scattered back onto the tokens); fully_shard then shards every parameter over dp, so a
Colwise weight is sharded on dim 0 over both mesh dims (a _StridedShard over dp). Before each step a max-norm
constraint rescales the weights' rows, read off the 2-D shards; the loss reads the sequence-sharded output.
Every rank draws the same batch, so the run computes what one process would (`watch --parity` compares them).
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.4, 2.5: FSDP2 is torch.distributed._composable.fsdp
    from torch.distributed._composable.fsdp import fully_shard


class Block(torch.nn.Module):
    def __init__(self, width: int = 8, hidden: int = 16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


def main(steps: int = 3) -> float:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    world = int(os.environ["WORLD_SIZE"])
    tp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh(device, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Block().to(device)
    parallelize_module(model, mesh["tp"], {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    })
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(2, 4, 8, generator=generator).to(device)
        target = torch.randn(2, 4, 8, generator=generator).to(device)
        tokens = distribute_tensor(x, mesh["tp"], [Shard(1)])  # sequence parallel: each tp rank holds its tokens
        with torch.no_grad():  # a max-norm constraint: each weight row's norm at most 0.5, on the 2-D shards
            for w in (model.up.weight, model.down.weight):
                w.mul_((0.5 / w.pow(2).sum(-1, keepdim=True).sqrt()).clamp(max=1))
        out = model(tokens)
        loss = torch.nn.functional.mse_loss(out.full_tensor(), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


if __name__ == "__main__":
    loss = main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    if dist.get_rank() == 0:
        print(f"final loss {loss:.4f}")
    dist.destroy_process_group()
