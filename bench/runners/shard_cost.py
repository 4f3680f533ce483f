"""Cases per second of `torchsleuth shard`: LocalTensorMode (one process) against real gloo ranks, the same cases.

    python3 bench/run.py shard-cost --out DIR                                   # spawned gloo ranks, meshes 2 and 2x2
    python3 bench/run.py shard-cost --ranks torchrun --mesh 2 --depth deep --out DIR   # gloo processes under torchrun

Per mesh (each measured on its own), `torchsleuth shard` over one selection twice, side by side: simulated
(``--workers 0``: the cases in the command's own process) and on gloo ranks, either the persistent groups the command
spawns itself (``--ranks spawned``: ``--backend gloo``) or N processes under ``torchrun`` (``--ranks torchrun``).
Per run: the cases stored for the matrix, how many were judged, the seconds spent in them (from the store), cases per
second, and the command's wall time (process starts, sample making, groups started, the summary). The record
(DIR/shard-cost.json) is that table.
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import subprocess
import sys
import time

import _record

OPS = "softmax,sum,mm,cat,composite.flatten_sum,composite.flatten_softmax,composite.flatten_transpose"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=OPS)
    parser.add_argument("--mesh", default="2,2x2", help="meshes, each measured on its own (2,2x2)")
    parser.add_argument("--combinations", default="6")
    parser.add_argument("--depth", default="catalog", help="the shard command's --depth (catalog)")
    parser.add_argument("--ranks", choices=("spawned", "torchrun"), default="spawned", help="how the gloo ranks start (spawned)")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; ops {args.ops}")
    columns = ["mesh", "run", "cases", "judged", "seconds in cases", "cases/s", "command wall s", "exit"]
    rows = []
    for mesh in args.mesh.split(","):
        ranks = math.prod(int(part) for part in mesh.split("x"))
        common = ["shard", "--ops", args.ops, "--mesh", mesh, "--combinations", args.combinations, "--depth", args.depth,
                  "--gloo", "0", "--no-shrink", "--no-progress"]
        module = [sys.executable, "-m", "torchsleuth.cli.main"]
        runs = {"LocalTensorMode, 1 process": [*module, *common, "--workers", "0"]}
        if args.ranks == "spawned":
            runs[f"spawned gloo ranks, {ranks} processes"] = [*module, *common, "--backend", "gloo"]
        else:
            runs[f"gloo, {ranks} processes under torchrun"] = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                                                               str(ranks), "-m", "torchsleuth.cli.main", *common, "--backend", "gloo"]
        for name, command in runs.items():
            out = os.path.join(args.out, f"{mesh}-{'local' if 'LocalTensorMode' in name else args.ranks}")
            started = time.monotonic()
            done = subprocess.run([*command, "--out", out], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            wall = time.monotonic() - started
            with sqlite3.connect(os.path.join(out, "runs.db")) as db:
                query = "SELECT COUNT(*), SUM(seconds), SUM(status IN ('pass', 'finding')) FROM outcomes WHERE case_id LIKE '%@shard:%'"
                cases, seconds, judged = db.execute(query).fetchone()
            rows.append([mesh, name, cases, judged, round(seconds, 2), round(cases / seconds, 1), round(wall, 1), done.returncode])
            print(f"mesh {mesh:4s} {name:36s} {cases:5d} cases ({judged} judged)  {seconds:7.2f} s in cases  "
                  f"{cases / seconds:7.1f} cases/s  (command wall {wall:.1f} s, exit {done.returncode})", flush=True)
    _record.write(args.out, "shard-cost", table=_record.table(columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
