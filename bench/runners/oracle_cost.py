"""What an oracle costs: the same sweep without and with it, side by side, twice.

    python3 bench/run.py oracle-cost --oracles capability --ops abs,exp,add,sum --variants functional,backward --out DIR
    python3 bench/run.py oracle-cost --oracles each --ops abs,exp,add,sum --variants functional,inplace,out,backward --out DIR

``--oracles`` is one oracle, a comma-separated list run together, or ``each``:
every oracle but ``large``, one sweep apiece, beside the same sweep without any
(bench/sweep-cost.md). By default float32, contiguous layouts, one worker, no
shrink stage; each round runs the sweep without the oracle, then with it, and
prints cases per second. The record (DIR/oracle-cost.json) is the table, with
the seconds inside the cases and inside the oracle's own cases (``|@NAME``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

import _record
from _sample import expand_classes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oracles", required=True, help="an oracle, several together (a,b), or each")
    parser.add_argument("--ops", metavar="SPEC", help="ops (names or globs, class:NAME for an OpInfo class's entries; default every op "
                        "of the default selection)")
    parser.add_argument("--variants", default="functional", help="comma-separated, or 'default' for the sweep's own")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--layouts", default="contiguous", help="comma-separated, or 'default' for the sweep's own")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    from torchsleuth import SweepConfig, resolve_ops, sweep
    from torchsleuth.judge.plugin import BUILTIN

    chosen = [(name,) for name in BUILTIN.names() if name != "large"] if args.oracles == "each" else [tuple(args.oracles.split(","))]
    chosen_ops = resolve_ops(expand_classes(args.ops) if args.ops else None)
    narrowed = {name: tuple(value.split(",")) for name, value in (("layouts", args.layouts), ("variants", args.variants)) if value != "default"}
    columns = ["round", "oracles", "cases", "of them the oracle's", "wall s", "cases/s", "case s", "the oracle's case s"]
    print("| " + " | ".join(columns) + " |")
    print("| --- | --- |" + " ---: |" * (len(columns) - 2))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(1, args.rounds + 1):
            for oracles in [(), *chosen]:
                config = SweepConfig(ops=chosen_ops, dtypes=tuple(args.dtypes.split(",")), device=args.device, workers=args.workers,
                                     oracles=oracles, shrink=False, **narrowed)
                db = os.path.join(tmp, f"{round_}-{'-'.join(oracles) or 'none'}.db")
                start = time.monotonic()
                result = sweep(config, db=db)
                wall = time.monotonic() - start
                own, seconds, own_seconds = _oracle_cases(db)
                rows.append([round_, ",".join(oracles) or "none", result.cases, own, round(wall, 1), round(result.cases / wall, 1),
                             round(seconds, 1), round(own_seconds, 1)])
                print("| " + " | ".join(str(cell) for cell in rows[-1]) + " |", flush=True)
    _record.write(args.out, "oracle-cost", device=args.device, table=_record.table(columns, rows))
    return 0


def _oracle_cases(db: str) -> tuple[int, float, float]:
    """Cases of the sweep that belong to an oracle (their ids end in ``|@NAME``), and the seconds inside cases."""
    with sqlite3.connect(db) as connection:
        (n, own), = connection.execute("select count(*), coalesce(sum(seconds), 0) from outcomes where case_id like '%|@%'")
        (total,), = connection.execute("select coalesce(sum(seconds), 0) from outcomes")
    return n, total, own


if __name__ == "__main__":
    sys.exit(main())
