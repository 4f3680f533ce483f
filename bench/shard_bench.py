"""Cases per second: LocalTensorMode (one process) against real gloo process groups (torchrun), same cases.

Runs `torchsleuth shard` twice on one selection, simulated and under
`torchrun --nproc-per-node N ... --backend gloo`, and prints each run's case
count, wall time of its cases (from the store) and cases per second.

    python bench/shard_bench.py [--ops LIST] [--mesh N] [--nproc N]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="softmax,sum,mm,cat,composite.flatten_sum,composite.flatten_softmax,composite.flatten_transpose")
    parser.add_argument("--mesh", default="2")
    parser.add_argument("--combinations", default="6")
    args = parser.parse_args()
    ranks = 1
    for part in args.mesh.split("x"):
        ranks *= int(part)
    bin_dir = Path(sys.executable).parent
    common = ["shard", "--ops", args.ops, "--mesh", args.mesh, "--combinations", args.combinations, "--no-progress", "--no-shrink"]
    with tempfile.TemporaryDirectory() as folder:
        runs = {
            "LocalTensorMode (1 process)": [str(bin_dir / "torchsleuth"), *common, "--gloo", "0", "--out", f"{folder}/local"],
            f"gloo ({ranks} processes, torchrun)": [str(bin_dir / "torchrun"), "--nproc-per-node", str(ranks), "-m", "torchsleuth.cli.main",
                                                    *common, "--backend", "gloo", "--out", f"{folder}/gloo"],
        }
        for name, command in runs.items():
            started = time.monotonic()
            subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            wall = time.monotonic() - started
            out = command[command.index("--out") + 1]
            db = sqlite3.connect(f"{out}/runs.db")
            cases, seconds = db.execute("SELECT COUNT(*), SUM(seconds) FROM outcomes").fetchone()
            judged = db.execute("SELECT COUNT(*) FROM outcomes WHERE status IN ('pass', 'finding')").fetchone()[0]
            db.close()
            print(f"{name:34s} {cases:5d} cases ({judged} judged)  {seconds:7.2f} s in cases  {cases / seconds:7.1f} cases/s"
                  f"  (command wall {wall:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
