"""What a deeper oracle costs: the same sweep without and with it, side by side, twice.

    python bench/deep_cost.py ORACLE OPS VARIANTS
    python bench/deep_cost.py capability abs,exp,add,sum functional,backward
    python bench/deep_cost.py each abs,exp,add,sum functional,inplace,out,backward

ORACLE is one oracle, a comma-separated list run together, or ``each``: every
oracle but ``large``, one sweep apiece, beside the same sweep without any
(bench/sweep-cost.md). float32, contiguous layouts, one worker, no shrink
stage; each round runs the sweep without the oracle, then with it, and prints
cases per second.
"""

import sqlite3
import sys
import tempfile
import time

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.judge.plugin import BUILTIN


def main(oracle: str, ops: str, variants: str) -> None:
    chosen = [(name,) for name in BUILTIN.names() if name != "large"] if oracle == "each" else [tuple(oracle.split(","))]
    print("| round | oracles | cases | of them the oracle's | wall s | cases/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for round_ in (1, 2):
        for oracles in [(), *chosen]:
            config = SweepConfig(ops=resolve_ops(ops), dtypes=("float32",), variants=tuple(variants.split(",")),
                                 layouts=("contiguous",), workers=1, oracles=oracles, shrink=False)
            db = tempfile.mktemp(suffix=".db")
            start = time.monotonic()
            result = sweep(config, db=db)
            wall = time.monotonic() - start
            own = _oracle_cases(db)
            print(f"| {round_} | {','.join(oracles) or 'none'} | {result.cases} | {own} | {wall:.1f} | "
                  f"{result.cases / wall:.1f} |", flush=True)


def _oracle_cases(db: str) -> int:
    """Cases of the sweep that belong to an oracle: their ids end in ``|@NAME``."""
    with sqlite3.connect(db) as connection:
        (n,) = connection.execute("select count(*) from outcomes where case_id like '%|@%'").fetchone()
    return n


if __name__ == "__main__":
    main(*sys.argv[1:])
