"""Where a span probe's seconds go: the large oracle's span form alone, profiled in this process (bench/cuda-pointed.md).

    python3 bench/probes/span_cost.py --ops nn.functional.interpolate [--device cpu] [--out DIR]

Sweeps the ops' first sample in float32, functional and contiguous, with ``large:span`` as the only oracle and one
worker (this process, under cProfile), and prints the wall time, the statuses and the 35 costliest calls by
cumulative time. Run on 2026-12-07 on this machine's CPU (torch 2.13.0+cpu, 2 cores): 14 span cases of the seven
interpolate ops in 211 s, 160 s of it in ``judge.verdict.precision`` (float64 and its nudged runs over 2^24 entries).
"""

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

import _out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="nn.functional.interpolate", help="the ops (comma-separated or globs)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="also keep the output in OUT/span_cost.txt")
    args = parser.parse_args()
    from torchsleuth import SweepConfig, resolve_ops, sweep

    config = SweepConfig(ops=resolve_ops(args.ops), device=args.device, dtypes=("float32",), layouts=("contiguous",),
                         variants=("functional",), samples=1, workers=0, search=(), oracles=("large:span",), shrink=False)
    with _out.tee(args.out, "span_cost.txt"), tempfile.TemporaryDirectory() as tmp:
        profile, started = cProfile.Profile(), time.perf_counter()
        profile.enable()
        result = sweep(config, db=os.path.join(tmp, "runs.db"))
        profile.disable()
        print(f"wall {time.perf_counter() - started:.1f} s; {result.statuses}")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(35)
    return 0


if __name__ == "__main__":
    sys.exit(main())
