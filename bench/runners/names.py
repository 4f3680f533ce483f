"""How long a mistyped name, or an output path that cannot be written, takes to be answered: fresh processes, timed.

    python3 bench/run.py names [--rounds 5] --out DIR

Each command runs as a user runs it (``python -m torchsleuth.cli.main ops ...``, a fresh interpreter), its wall
time from start to exit, ``--rounds`` times:

* ``--ops sofmax`` with no names cache (its own empty cache folder each time: the catalog loads, and writes it);
* ``--ops sofmax``, ``--dtypes float23``, ``--layouts transpose``, ``--search valuez`` with the cache written;
* ``--json`` under a regular file (refused before any work);
* for scale: ``python -c pass`` and ``python -c 'import torch'``.

Each must exit 2 with one line on stderr (the baselines 0). The record holds the median and the largest of each,
and the machine's load average before and after: the figures are only as quiet as the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _record

CLI = [sys.executable, "-m", "torchsleuth.cli.main"]
CASES = [
    ("--ops sofmax, no cache", [*CLI, "ops", "--ops", "sofmax"], "cold"),
    ("--ops sofmax, cached", [*CLI, "ops", "--ops", "sofmax"], "warm"),
    ("--dtypes float23", [*CLI, "ops", "--ops", "add", "--dtypes", "float23"], "warm"),
    ("--layouts transpose, cached", [*CLI, "ops", "--ops", "add", "--layouts", "transpose"], "warm"),
    ("--search valuez, cached", [*CLI, "ops", "--ops", "add", "--search", "valuez"], "warm"),
    ("--json under a file", [*CLI, "ops", "--ops", "add", "--json", "file/x.json"], "warm"),
    ("python -c pass", [sys.executable, "-c", "pass"], "baseline"),
    ("python -c 'import torch'", [sys.executable, "-c", "import torch"], "baseline"),
]


def timed(argv: list[str], folder: str, cache: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "TORCHSLEUTH_CACHE": cache, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    began = time.monotonic()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    return time.monotonic() - began, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        open(os.path.join(folder, "file"), "w").close()
        warm = os.path.join(folder, "cache")
        timed(CASES[0][1], folder, warm)  # writes the cache the warm cases read
        for label, argv, kind in CASES:
            seconds = []
            for i in range(args.rounds):
                cache = os.path.join(folder, f"cold-{i}") if kind == "cold" else warm
                took, done = timed(argv, folder, cache)
                expected = 0 if kind == "baseline" else 2
                assert done.returncode == expected and (kind == "baseline" or len(done.stderr.strip().splitlines()) == 1), \
                    (label, done.returncode, done.stderr)
                seconds.append(took)
            rows.append({"command": label, "median": round(statistics.median(seconds), 2), "largest": round(max(seconds), 2),
                         "answer": done.stderr.strip()[:120]})
            print(json.dumps(rows[-1]), flush=True)
    load_after = os.getloadavg()[0]
    print(f"\nload average {load_before:.1f} before, {load_after:.1f} after\n")
    print("| command | median | largest |\n| --- | ---: | ---: |")
    for row in rows:
        print(f"| {row['command']} | {row['median']:.2f} s | {row['largest']:.2f} s |")
    _record.write(args.out, "names", figures={"load_average_before": round(load_before, 1), "load_average_after": round(load_after, 1),
                                              "rounds": args.rounds},
                  table=_record.table(["command", "median s", "largest s"], [[r["command"], r["median"], r["largest"]] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
