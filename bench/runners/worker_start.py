"""What a worker's start costs, spawned or forked from the pool's fork server, side by side in one process.

    python3 bench/run.py worker-start --device cuda [--workers 16] [--replacements 6] [--rounds 2] --out DIR

For each start method in turn (spawn, forkserver, spawn, forkserver, ... ``--rounds`` times), a local pool
(``torchsleuth.workers.pool.Pool``, the sweep's ``warm`` and preload, no warm spares) with ``--workers`` workers:

* **first**: seconds from the pool's first start until every worker has made its device's context and answered
  an empty unit (the sweep's first units wait for this); the fork server's first round includes its own start
  (importing torch and torchsleuth, loading OpInfo's catalog);
* **replacement**: seconds for one worker replaced (as after a crash or a hang) to answer an empty unit, while the
  others wait idle, ``--replacements`` times in a row: the median and the largest.

Prints one JSON line per round and a table at the end; the record (DIR/worker-start.json) is the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import _record


def empty_unit(unit, config, skip, only):
    return iter(())


def one_round(method: str, args) -> dict:
    from _sample import catalog_config

    from torchsleuth.workers.records import Callbacks, Settings, Work
    from torchsleuth.workers.pool import Pool
    from torchsleuth.sweep import warm

    config = catalog_config(args.device, ("abs",), workers=args.workers, depth="catalog")
    done = []
    callbacks = Callbacks(skip_for=lambda unit: set(), on_outcome=lambda unit, outcome: None,
                          on_failed=lambda *a: None, on_collateral=lambda *a: None,
                          on_unit_done=lambda unit, state, detail: done.append((unit, state)))
    pool = Pool(Work(run=empty_unit, config=config, warm=warm),
                Settings(workers=args.workers, timeout=120, spares=0, start=method, preload=("torchsleuth.sweep",)))
    began = time.monotonic()
    pool.run([f"u{i}" for i in range(args.workers)], callbacks, close=False)
    first = time.monotonic() - began
    replacements = []
    for i in range(args.replacements):
        began = time.monotonic()
        pool._replace(pool.slots[0])
        pool.run([f"r{i}"], callbacks, close=False)
        replacements.append(time.monotonic() - began)
    method = pool.context.get_start_method()
    pool.close()
    assert all(state == "done" for _, state in done), done
    return {"method": method, "workers": args.workers, "first": round(first, 2),
            "replacement_median": round(statistics.median(replacements), 2), "replacement_max": round(max(replacements), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--replacements", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    rows = []
    for _ in range(args.rounds):
        for method in ("spawn", "forkserver"):
            rows.append(one_round(method, args))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n| start | workers | all {args.workers} ready | one replacement, median | largest |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['method']} | {row['workers']} | {row['first']:.1f} s | {row['replacement_median']:.2f} s | {row['replacement_max']:.2f} s |")
    columns = ["start", "workers", "all ready s", "one replacement, median s", "largest s"]
    _record.write(args.out, "worker-start", device=args.device, table=_record.table(
        columns, [[r["method"], r["workers"], r["first"], r["replacement_median"], r["replacement_max"]] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
