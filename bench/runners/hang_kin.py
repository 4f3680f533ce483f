"""A pointed run whose cases hang, with the hangs' kin set aside and without: what setting them aside saves.

    python3 bench/run.py hang-kin --out DIR                          # kin off against on, twice
    python3 bench/run.py hang-kin --ops special.laguerre_polynomial_l --dtypes float32,float64 --kin on --rounds 1 --out DIR

Each run is ``torchsleuth ops --ops OP --dtypes DTYPES --timeout 10 --no-shrink`` in a process of its own, into a
fresh folder. "off" runs it with ``search.edits.kin`` replaced by None before the sweep makes its pool (so the pool
sets aside no case for its kin); "on" runs it as it is. Off and on alternate, ``--rounds`` times. Per run: the wall
time, the cases and their seconds as the summary says, the hang findings, the collateral notes, and a checksum of the
sorted case ids and statuses (equal checksums: the same outcomes). To set kin per unit against kin per op (an older
tree against this one), run it twice with ``--kin on``, the first with run.py's ``--src``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import time

import _record

OFF = ("import sys\nimport torchsleuth.search.edits as edits\nedits.kin = None\n"
       "from torchsleuth.cli.main import main\nsys.exit(main(sys.argv[1:]))")
ON = "import sys\nfrom torchsleuth.cli.main import main\nsys.exit(main(sys.argv[1:]))"


def one_run(kin: str, folder: str, args) -> list:
    os.makedirs(folder, exist_ok=True)
    argv = ["ops", "--ops", args.ops, "--dtypes", args.dtypes, "--device", args.device, "--timeout", str(args.timeout),
            "--no-shrink", "--no-progress", "--out", folder]
    started = time.monotonic()
    with open(os.path.join(folder, "stdout.txt"), "w") as log:
        subprocess.run([sys.executable, "-c", OFF if kin == "off" else ON, *argv], stdout=log, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    with open(os.path.join(folder, "stdout.txt")) as f:
        said = re.search(r"([\d,]+) cases in ([\d.]+) s", f.read())
    with sqlite3.connect(os.path.join(folder, "runs.db")) as db:
        (hangs,), = db.execute("select count(*) from findings where kind = 'hang'")
        (collateral,), = db.execute("select count(*) from notes where kind = 'collateral'")
        outcomes = "".join(f"{case}{status}\n" for case, status in db.execute("select case_id, status from outcomes order by 1, 2"))
    cases, seconds = (int(said[1].replace(",", "")), float(said[2])) if said else (None, None)
    return [kin, round(wall, 1), cases, seconds, hangs, collateral, hashlib.md5(outcomes.encode()).hexdigest()[:8]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="special.laguerre_polynomial_l")
    parser.add_argument("--dtypes", default="float64")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a case is a hang (10)")
    parser.add_argument("--kin", default="off,on", help="which settings, in turn each round (off,on)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    columns = ["kin", "wall s", "cases", "case s", "hangs", "collateral", "outcomes"]
    rows = []
    for n in range(1, args.rounds + 1):
        for kin in args.kin.split(","):
            rows.append(one_run(kin, os.path.join(args.out, f"{kin}{n}"), args))
            print(f"kin {kin}, run {n}: {rows[-1][1]} s wall; {rows[-1][2]} cases in {rows[-1][3]} s; hangs {rows[-1][4]}; "
                  f"collateral {rows[-1][5]}; outcomes {rows[-1][6]}", flush=True)
    _record.write(args.out, "hang-kin", device=args.device, table=_record.table(columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
