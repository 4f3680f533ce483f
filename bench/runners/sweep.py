"""A torchsleuth command (ops, shard, optim, drill, watch) as a user runs it: its wall time, cases, statuses, findings.

    python3 bench/run.py sweep --out DIR ops --device cuda --ops exp,sinh --depth deep
    python3 bench/run.py sweep --out DIR --repros 60 ops                     # the catalog, then each group's repro
    python3 bench/run.py sweep --out DIR --torchrun 2 shard --backend nccl --device cuda --mesh 2
    python3 bench/run.py sweep --out DIR --rounds 2 --before OLD/src ops --depth deep --ops norm,isin
    python3 bench/run.py sweep --out DIR ops --ops class:UnaryUfuncInfo,class:BinaryUfuncInfo,sum --oracles sizes

Everything after the runner's own options is the command's own line (``torchsleuth COMMAND ...``); the runner adds
``--out``, ``--json`` and ``--no-progress`` where the command takes them and they are not given. In ``--ops``, a
word ``class:NAME`` stands for every catalog entry whose OpInfo class is NAME or derives from it (``UnaryUfuncInfo``,
``BinaryUfuncInfo``, ``ReductionOpInfo``): the ufuncs and reductions several pages sweep.

With ``--rounds N`` the command runs N times; with ``--before SRC`` each round runs it with SRC's torchsleuth first
(another tree's src/), then with this one: a before-and-after, interleaved so that drift hits both alike. Each run
writes its store, findings file and repro scripts under DIR (DIR/before1, DIR/after1, ... when there are several);
the record (DIR/sweep.json) has one row per run: wall seconds (the process, start to exit), cases, the statuses from
the store, findings and groups from the findings file, the coverage where the command reports one.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
import subprocess
import sys
import time

import _record
from _sample import expand_classes

TAKES = {"ops": ("--out", "--json", "--no-progress"), "shard": ("--out", "--json", "--no-progress"),
         "optim": ("--out", "--json", "--no-progress"), "drill": ("--json", "--no-progress"), "watch": ("--out", "--json")}


def _expanded(argv: list[str]) -> list[str]:
    """The command line with its ``--ops`` value's ``class:NAME`` words expanded."""
    argv = list(argv)
    for i, word in enumerate(argv[:-1]):
        if word == "--ops":
            argv[i + 1] = expand_classes(argv[i + 1])
    return argv


def completed(command: str, argv: list[str], folder: str) -> list[str]:
    given = set(argv)
    added = []
    for flag in TAKES.get(command, ()):
        if flag not in given:
            added += {"--out": ["--out", folder], "--json": ["--json", os.path.join(folder, "findings.json")],
                      "--no-progress": ["--no-progress"]}[flag]
    return [*argv, *added]


def one_run(line: list[str], folder: str, src: str | None, torchrun: int, repros: float | None) -> dict:
    """The command once, into ``folder``; what it did."""
    os.makedirs(folder, exist_ok=True)
    command, argv = line[0], completed(line[0], line[1:], folder)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(torchrun)] if torchrun else [sys.executable]
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(src), env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    with open(os.path.join(folder, "stdout.txt"), "w") as log:
        code = subprocess.run([*launcher, "-m", "torchsleuth.cli.main", command, *argv], stdout=log, stderr=subprocess.STDOUT,
                              env=env).returncode
    row = {"exit": code, "wall_s": round(time.monotonic() - started, 1)}
    db = _flag(argv, "--db") or os.path.join(_flag(argv, "--out") or "torchsleuth-out", "runs.db")
    if os.path.exists(db):
        with sqlite3.connect(db) as store:
            statuses = dict(store.execute("SELECT status, COUNT(*) FROM outcomes WHERE run = (SELECT MAX(id) FROM runs) "
                                          "GROUP BY status ORDER BY 2 DESC"))
        row.update(cases=sum(statuses.values()), statuses=statuses)
    found = _flag(argv, "--json")
    if found and os.path.exists(found):
        with open(found) as f:
            document = json.load(f)
        row.update(cases=document.get("cases", row.get("cases")), seconds=round(document.get("seconds") or 0.0, 1),
                   findings=len(document.get("findings", [])), groups=len(document.get("groups", [])),
                   flaky=len(document.get("flaky", [])))
        if document.get("coverage"):
            row["coverage"] = f"{document['coverage']['reached']} of {document['coverage']['found']}"
        if repros is not None:
            row["repro_exits"] = _repros(found, folder, repros)
    with open(os.path.join(folder, "stdout.txt")) as f:
        print(f"{' '.join(line)}: exit {code}, {row['wall_s']} s wall\n  " + "\n  ".join(f.read().strip().splitlines()[-4:]), flush=True)
    return row


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def _repros(findings: str, folder: str, timeout: float) -> dict:
    """The repros runner over the run's findings file: each group's script, its exit statuses counted."""
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "repros.py"), findings, "--timeout", str(timeout), "--out", folder], check=False)
    with open(os.path.join(folder, "repros.json")) as f:
        return json.load(f)["figures"]["exit_statuses"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--rounds", type=int, default=1, help="run the command this many times (default 1)")
    parser.add_argument("--before", metavar="SRC", help="each round, first with this tree's torchsleuth (its src/)")
    parser.add_argument("--torchrun", type=int, default=0, metavar="N", help="under torch.distributed.run, N processes")
    parser.add_argument("--repros", type=float, metavar="TIMEOUT",
                        help="then run each group's repro script (the repros runner), each for at most TIMEOUT seconds")
    parser.add_argument("line", nargs=argparse.REMAINDER, metavar="COMMAND ...", help="the torchsleuth command line")
    args = parser.parse_args()
    if not args.line or args.line[0] not in TAKES:
        parser.error(f"name the command: one of {', '.join(TAKES)}")
    line = _expanded(args.line)
    trees = [("before", args.before), ("after", None)] if args.before else [("", None)]
    runs = [(f"{tree}{n}" if (args.before or args.rounds > 1) else "", tree or "this", src, n)
            for n in range(1, args.rounds + 1) for tree, src in trees]
    rows = []
    for sub, tree, src, n in runs:
        row = one_run(line, os.path.join(args.out, sub) if sub else args.out, src, args.torchrun, args.repros)
        rows.append({"run": sub or "1", **row})
    columns = ["run", "exit", "wall_s", "cases", "findings", "groups"]
    extra = {"statuses": {r["run"]: r.get("statuses") for r in rows}}
    if any("coverage" in r for r in rows):
        columns.append("coverage")
    if args.repros is not None:
        extra["repro_exits"] = {r["run"]: r.get("repro_exits") for r in rows}
    device = _flag(line, "--device") or "cpu"
    if len(rows) == 1:
        figures = {k: v for k, v in rows[0].items() if k != "run"}
        _record.write(args.out, "sweep", device=device, figures=figures)
    else:
        _record.write(args.out, "sweep", device=device, table=_record.table(columns, [[r.get(c) for c in columns] for r in rows]),
                      figures=extra)
    codes = collections.Counter(r["exit"] for r in rows)
    return 0 if set(codes) <= {0, 1} else 1  # findings (1) are what a sweep is for; anything else failed


if __name__ == "__main__":
    sys.exit(main())
