"""``torchsleuth shard --backend gloo|nccl`` under ``torchrun``: this process is one rank of the launch.

Design note. ``torchrun --nproc-per-node N -m torchsleuth.cli.main shard --backend
nccl --device cuda`` starts N copies of the command; each joins the process
group torchrun describes (``env://``), binds its GPU (``LOCAL_RANK``), and
plans the same cases in the same order from the same seeds, on the meshes
of the selection that have exactly N ranks (a 1-D mesh of N when none has).
Every rank runs every case in a ``world.Real``; what each rank saw (its
``Ran``) is sent to rank 0 (``gather_object``), which merges them as the
spawned ranks' are merged (ranks.merge) and judges the result as the
simulated sweep does, against the plain op on one device, and alone holds
the run frame (frame.run_frame): the store, the findings file and the repro
scripts. When a case is wrong, rank 0 says so to all ranks
(``broadcast_object_list``) and every rank runs it once more with the blame
trace on, whose checks are collectives too. Rank 0 returns the run, the
others nothing; the command line prints the summary and picks the exit
status.
Findings are not shrunk here: shrinking would need every rank to agree on
each candidate; the repro script of each finding reruns it under torchrun.
Without torchrun, ``--backend gloo`` spawns its own ranks (ranks.py, the
sweep); NCCL needs a launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path

from ..errors import UsageError
from ..frame import Progress, SweepResult, run_frame
from .cases import ShardConfig


def run(config: ShardConfig, *, db: str | Path, progress: Progress | None = None, out: str | Path | None = None,
        json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult | None:
    """This process's part of a torchrun launch: on rank 0 the run as stored, its outputs written; None on the others."""
    if "WORLD_SIZE" not in os.environ:
        raise UsageError(f"--backend {config.backend} runs under torchrun: torchrun --nproc-per-node N -m torchsleuth.cli.main shard "
                         f"--backend {config.backend} ...")
    import torch
    import torch.distributed as dist

    from ..run.imports import load_imports
    from . import cases as shard_cases, judge, placements as placing, run as running
    from .ranks import merge
    from .support import quiet_dtensor
    from .sweep import note_lacking, scripts
    from .world import Real

    load_imports(config.imports)
    quiet_dtensor()
    device = config.device
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group(config.backend)
    try:
        rank, size = dist.get_rank(), dist.get_world_size()
        meshes = tuple(m for m in config.meshes if placing.mesh(m).ranks == size) or (str(size),)
        config = dataclasses.replace(config, meshes=meshes, shrink=False, gloo=0)
        framed = (run_frame(config, db=db, progress=progress, out=out, json=json, junit=junit, scripts=scripts(config))
                  if rank == 0 else contextlib.nullcontext())
        with framed as frame:
            units = shard_cases.units(config)
            if frame is not None:
                frame.start(units=len(units), done=0)
                note_lacking(frame, config)
            for unit in units:
                for case in shard_cases.plan(unit, config):
                    world = Real(shard_cases.mesh_of(case), device)
                    began = time.monotonic()
                    ran = running.run(case, world)
                    gathered = [None] * size if rank == 0 else None
                    # rank 0's expected values and trace serve all: the others send what only they saw
                    dist.gather_object(ran if rank == 0 else dataclasses.replace(ran, expected={}, steps=()), gathered, dst=0)
                    outcome = None
                    if rank == 0:
                        ran = merge(gathered)
                        outcome = judge.outcome(case, ran, seconds=time.monotonic() - began, backend=config.backend)
                    flag = [outcome is not None and outcome.status == "finding"]
                    dist.broadcast_object_list(flag, src=0)
                    if flag[0]:
                        again = running.run(case, world, blame=True)
                        if rank == 0:
                            outcome = judge.outcome(case, ran, blame=lambda: again, seconds=time.monotonic() - began,
                                                    backend=config.backend)
                    if frame is not None:
                        frame.record(outcome)
        dist.barrier()  # no rank tears the group down while another still uses it (rank 0 writes the outputs)
        return frame.result if frame is not None else None
    finally:
        dist.destroy_process_group()


def leave(code: int) -> None:
    """End this rank's process now, with ``code``, everything written and the group destroyed.

    At interpreter exit, after ``destroy_process_group`` returned on every
    rank, gloo's C++ teardown sometimes aborts a rank ("terminate called
    without an active exception": about one launch in ten on a loaded
    machine), and torchrun then reports the whole launch as failed. The
    work is done by then, so the rank leaves without that teardown.
    """
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))
