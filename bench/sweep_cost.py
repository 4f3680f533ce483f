"""How long the default CPU sweep takes, and how its cost grows with the number of ops.

    python bench/sweep_cost.py                 # the full catalog, then subsets
    python bench/sweep_cost.py --full-only

Each measurement is one `torchsleuth.sweep` with default layouts, variants,
dtypes and samples, into a fresh database, with the workers the CLI would use
(one per CPU). Subsets take every k-th op of the sorted catalog so that they
mix cheap and costly ops alike. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

from torchsleuth import SweepConfig, resolve_ops, sweep


def measure(ops, workers):
    with tempfile.TemporaryDirectory() as tmp:
        config = SweepConfig(ops=tuple(ops), workers=workers)
        start = time.perf_counter()
        result = sweep(config, db=os.path.join(tmp, "runs.db"))
        seconds = time.perf_counter() - start
    return seconds, result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full-only", action="store_true")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    everything = resolve_ops(None)
    sizes = [len(everything)] if args.full_only else [len(everything), 400, 200, 100, 50]
    print(f"torch {torch.__version__}, {len(os.sched_getaffinity(0))} CPUs, {args.workers} workers, python {sys.version.split()[0]}")
    print("| ops | cases | wall s | cases/s | s per op | findings |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
        step = len(everything) / size
        ops = [everything[int(i * step)] for i in range(size)]
        seconds, result = measure(ops, args.workers)
        print(f"| {size} | {result.cases} | {seconds:.1f} | {result.cases / seconds:.0f} | {seconds / size:.2f} | {len(result.findings)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
