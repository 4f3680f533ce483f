"""Cases per second: LocalTensorMode (one process) against spawned gloo ranks (``--backend gloo``), same cases, one run.

Runs `torchsleuth shard` on one selection twice per mesh, side by side: simulated (`--workers 0`, the cases in
the command's own process) and on the persistent gloo groups the command spawns (`--backend gloo`, no torchrun).
Prints, per run, the cases stored for the matrix, the seconds spent in them (from the store), cases per second,
and the command's wall time (process starts, sample making, groups started, the summary).

    python bench/shard_ranks_bench.py [--ops LIST] [--mesh LIST] [--combinations N]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="softmax,sum,mm,cat,composite.flatten_sum,composite.flatten_softmax,composite.flatten_transpose")
    parser.add_argument("--mesh", default="2,2x2", help="meshes, each measured on its own")
    parser.add_argument("--combinations", default="6")
    args = parser.parse_args()
    print(f"torch {__import__('torch').__version__}, {os.cpu_count()} CPUs; ops {args.ops}")
    with tempfile.TemporaryDirectory() as folder:
        for mesh in args.mesh.split(","):
            common = [sys.executable, "-m", "torchsleuth.cli.main", "shard", "--ops", args.ops, "--mesh", mesh, "--combinations",
                      args.combinations, "--depth", "catalog", "--gloo", "0", "--no-shrink", "--no-progress"]
            runs = {"LocalTensorMode, 1 process": ["--workers", "0"], "spawned gloo ranks": ["--backend", "gloo"]}
            for name, extra in runs.items():
                out = f"{folder}/{mesh}-{extra[-1]}"
                started = time.monotonic()
                done = subprocess.run([*common, *extra, "--out", out], capture_output=True, text=True,
                                      env=dict(os.environ, OMP_NUM_THREADS="1"))
                wall = time.monotonic() - started
                db = sqlite3.connect(f"{out}/runs.db")
                query = "SELECT COUNT(*), SUM(seconds), SUM(status IN ('pass', 'finding')) FROM outcomes WHERE case_id LIKE '%@shard:%'"
                cases, seconds, judged = db.execute(query).fetchone()
                db.close()
                print(f"mesh {mesh:4s} {name:28s} {cases:5d} cases ({judged} judged)  {seconds:7.2f} s in cases  "
                      f"{cases / seconds:7.1f} cases/s  (command wall {wall:.1f} s, exit {done.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
