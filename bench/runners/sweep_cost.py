"""How long the default sweep takes, and how its cost grows with the number of ops.

    python3 bench/run.py sweep-cost --out DIR                 # the full catalog, then subsets of 400, 200, 100, 50 ops
    python3 bench/run.py sweep-cost --sizes all --out DIR     # the full catalog only

Each measurement is one `torchsleuth.sweep` with default layouts, variants,
dtypes and samples, into a fresh database, with the workers the CLI would use
(one per CPU). Subsets take every k-th op of the sorted catalog so that they
mix cheap and costly ops alike. Prints a Markdown table; the record
(DIR/sweep-cost.json) is the same table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import _record


def measure(ops, workers, device):
    from torchsleuth import SweepConfig, sweep

    with tempfile.TemporaryDirectory() as tmp:
        config = SweepConfig(ops=tuple(ops), workers=workers, device=device)
        start = time.perf_counter()
        result = sweep(config, db=os.path.join(tmp, "runs.db"))
        seconds = time.perf_counter() - start
    return seconds, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="all,400,200,100,50", help="how many ops in each sweep, 'all' the catalog (default all,400,200,100,50)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    from torchsleuth import resolve_ops

    everything = resolve_ops(None)
    sizes = [len(everything) if size == "all" else int(size) for size in args.sizes.split(",")]
    print(f"torch {torch.__version__}, {len(os.sched_getaffinity(0))} CPUs, {args.workers} workers, python {sys.version.split()[0]}")
    print("| ops | cases | wall s | cases/s | s per op | findings |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for size in sizes:
        step = len(everything) / size
        ops = [everything[int(i * step)] for i in range(size)]
        seconds, result = measure(ops, args.workers, args.device)
        rows.append([size, result.cases, round(seconds, 1), round(result.cases / seconds), round(seconds / size, 2), len(result.findings)])
        print(f"| {size} | {result.cases} | {seconds:.1f} | {result.cases / seconds:.0f} | {seconds / size:.2f} | {len(result.findings)} |", flush=True)
    _record.write(args.out, "sweep-cost", device=args.device,
                  table=_record.table(["ops", "cases", "wall s", "cases/s", "s per op", "findings"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
