"""What a deeper oracle costs: the same sweep without and with it, side by side, twice.

    python bench/deep_cost.py ORACLE OPS VARIANTS
    python bench/deep_cost.py capability abs,exp,add,sum functional,backward

float32, contiguous layouts, one worker, no shrink stage; each round runs the
sweep without the oracle, then with it, and prints cases per second.
"""

import sys
import tempfile
import time

from torchsleuth import SweepConfig, resolve_ops, sweep


def main(oracle: str, ops: str, variants: str) -> None:
    for round_ in (1, 2):
        for oracles in ((), (oracle,)):
            config = SweepConfig(ops=resolve_ops(ops), dtypes=("float32",), variants=tuple(variants.split(",")),
                                 layouts=("contiguous",), workers=1, oracles=oracles, shrink=False)
            start = time.monotonic()
            result = sweep(config, db=tempfile.mktemp(suffix=".db"))
            wall = time.monotonic() - start
            print(f"round {round_}  oracles={','.join(oracles) or 'none':<10} cases={result.cases:>4}  wall={wall:6.1f} s  "
                  f"{result.cases / wall:5.1f} cases/s  {dict(result.statuses)}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
