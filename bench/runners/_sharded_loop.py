"""The sharded training loop watch-sharded times: a tensor-parallel MLP on the ranks of a launch, each step timed.

Launched by bench/runners/watch_sharded.py under torchrun, or under ``torchsleuth watch --nproc N`` (the same
environment), with ``STEPS WIDTH``; rank 0 prints one line ``STEP-SECONDS [s0, s1, ...]`` of every step's seconds.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def main(steps: int, width: int) -> None:
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
    model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, target = torch.randn(64, width), torch.randn(64, width)
    seconds = []
    for _ in range(steps):
        dist.barrier()
        began = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        dist.barrier()
        seconds.append(time.perf_counter() - began)
    if dist.get_rank() == 0:
        print("STEP-SECONDS " + json.dumps(seconds), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
