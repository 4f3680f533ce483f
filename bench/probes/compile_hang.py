"""Why the compile oracle's cases of arange/linspace/logspace hung on CUDA (bench/deep-compile.md).

For each op: its first and last sample's compile case in one process (as a sweep's worker
runs them), then the last alone in a fresh process; each timed, and the Python stacks of every
thread dumped if one runs past --dump seconds.

    python3 bench/probes/compile_hang.py --device cuda --out DIR      # what it prints, also in DIR/compile-hang.txt
"""

from __future__ import annotations

import argparse
import faulthandler
import subprocess
import sys
import time
import warnings

import _out

CASES = {"arange": 26, "linspace": 61, "logspace": 400}


def one_process(ids: list[str], dump: float) -> None:
    warnings.simplefilter("ignore")
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    for case_id in ids:
        faulthandler.dump_traceback_later(dump, exit=True)
        start = time.perf_counter()
        outcome = run_case(Case.parse(case_id))
        faulthandler.cancel_dump_traceback_later()
        print(f"{time.perf_counter() - start:7.1f} s  {outcome.status:8} {case_id}  {outcome.reason[:120]}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--dump", type=float, default=75.0)
    parser.add_argument("--ids", nargs="*")
    parser.add_argument("--out", metavar="DIR")
    args = parser.parse_args()
    if args.ids:
        one_process(args.ids, args.dump)
        return 0
    with _out.tee(args.out, "compile-hang.txt"):
        for op, last in CASES.items():
            ids = [f"{op}|functional|{args.dtype}|{args.device}|s{i}|contiguous|@compile" for i in (0, last)]
            for group in (ids, ids[1:]):
                print(f"-- one process: {', '.join(i.split('|')[4] for i in group)} of {op}", flush=True)
                subprocess.run([sys.executable, __file__, "--dump", str(args.dump), "--ids", *group], timeout=4 * args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
