"""A real DTensor bug of torch 2.13 in a training loop: the L2 penalty of FSDP2's sharded parameters, logged with .item().

Launched by bench/runners/watch_sharded.py under `torchsleuth watch --nproc 2` (bench/watch-sharded.md). Between steps FSDP2's
parameters are DTensors sharded on dim 0; the sum of squares of one is Partial(sum), and `.item()` of a Partial
DTensor reads each rank's own share (aten._local_scalar_dense skips sharding propagation: bench/shard.md, surface A),
so the number logged differs between ranks and from the single-device one. Nothing is raised.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
fully_shard(model, mesh=mesh)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
generator = torch.Generator().manual_seed(1)
for step in range(2):
    x, target = torch.randn(6, 8, generator=generator), torch.randn(6, 4, generator=generator)
    loss = torch.nn.functional.mse_loss(model(x), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    penalty = model[0].weight.pow(2).sum()  # Partial(sum) over the ranks' shards
    print(f"rank {dist.get_rank()} step {step}: loss {loss.item():.4f}, L2 of the first weight {penalty.item():.4f}")
dist.destroy_process_group()
