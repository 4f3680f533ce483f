"""What the search and the depth cost: pointed runs with defaults, and the catalog with and without the search.

    python3 bench/run.py search-cost pointed --out DIR     # 15 ops spread over the catalog, each `torchsleuth ops --ops NAME`
    python3 bench/run.py search-cost pointed --device cuda --names sum,softmax --cap 240 --out DIR
                                                           # these ops on a GPU, each stopped after 240 s (said so)
    python3 bench/run.py search-cost catalog --out DIR     # the whole catalog with defaults, then with --search none
    python3 bench/run.py search-cost catalog --without '--oracles none' --without '--search none' --out DIR
                                                           # ... then without each named part, one after the other
    python3 bench/run.py search-cost catalog --every 8 --without '--oracles none' --without '--search none' --out DIR
                                                           # the same over every 8th op of the catalog
    python3 bench/run.py search-cost catalog --with=--compile --without= --out DIR
                                                           # the catalog with --compile, then with defaults alone
    python3 bench/run.py search-cost catalog --device cuda --every 16 --cap 240 --with=--compile --without= --out DIR
                                                           # ... every 16th op on a GPU, each run stopped after 240 s
                                                           # with what its store holds by then

``pointed`` runs the CLI exactly as a user pointing it at one op would (no
flag but --ops; the depth makes it deep), each op into a fresh database,
and prints each op's cases, wall time, findings, and the median and the
slowest. The ops are every k-th of the sorted catalog, so cheap and costly
ops alike.

``catalog`` runs ``torchsleuth ops`` (the catalog sweep: the search within
its budget, the combined layouts) and the same with ``--search none``, one
after the other on the same machine, and prints both and their ratio, with
the summary's search line. Prints Markdown; the record (DIR/search-cost.json) is the
table, the median and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import _record


def cli(args: list[str], tmp: str, cap: float | None = None) -> tuple[float, dict, str]:
    """One ``torchsleuth ops`` run into ``tmp``: (wall seconds, findings file, the summary's last lines). A run
    stopped at ``cap`` seconds gives an empty findings file with ``"stopped": True``."""
    out = os.path.join(tmp, "out")
    command = [sys.executable, "-m", "torchsleuth.cli.main", "ops", *args, "--out", out, "--json", os.path.join(tmp, "f.json"), "--no-progress"]
    start = time.perf_counter()
    # a session of its own: a run stopped at its cap takes its workers with it (they would hold the GPU for the next)
    ran = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = ran.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        where = stopped_where(ran.pid, os.path.join(out, "runs.db"))  # before the kill: what it was doing
        os.killpg(ran.pid, signal.SIGKILL)
        ran.communicate()
        return time.perf_counter() - start, {"cases": "-", "findings": [], "stopped": True, "where": where}, ""
    seconds = time.perf_counter() - start
    if ran.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({ran.returncode}): {stderr[-2000:]}")
    with open(os.path.join(tmp, "f.json")) as f:
        return seconds, json.load(f), stdout


def stopped_where(pid: int, db: str) -> str:
    """What a run stopped at its cap was doing: its store's counts (cases, findings, findings shrunk, groups diagnosed:
    which stage it was in) and, where py-spy is installed (run.py --wheels carries it), the innermost torchsleuth frames
    of its main thread."""
    import sqlite3

    counts = ""
    if os.path.exists(db):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            count = lambda table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: E731
            counts = (f"its store then: {count('outcomes')} cases, {count('findings')} findings, {count('shrunk')} shrunk, "
                      f"{count('diagnoses')} diagnosed")
    spy = shutil.which("py-spy")
    if spy is None:
        return counts
    try:
        dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return counts
    main = dump.split("\nThread ")[1] if "\nThread " in dump else dump  # the first thread py-spy lists: the main one
    frames = [line.split()[0] + " (" + line.rsplit("/", 1)[-1].rstrip(")") + ")" for line in main.splitlines()
              if "torchsleuth/" in line and "(" in line][:6]
    return "; ".join(filter(None, [counts, "its main thread in " + " < ".join(frames) if frames else ""]))


def pointed(count: int, names: list[str] | None = None, device: str | None = None, cap: float | None = None,
            keep=lambda made: None, findings: str | None = None, with_: str = "") -> dict:
    """Pointed runs with defaults (and ``--device``): ``names``, or every k-th op of the catalog. A run stopped at
    ``cap`` seconds is listed as stopped and counted at ``cap`` in the median (a lower bound). ``keep(made)`` is handed
    what ran so far after each op (a record a ``--limit`` cannot take away); ``findings``: a directory each run's
    findings file is copied to (``pointed-OP.json``), for triage; ``with_``: flags after ``--ops`` ("--time 0")."""
    from torchsleuth import resolve_ops

    if names:
        ops = names
    else:
        everything = resolve_ops(None)
        step = len(everything) / count
        ops = [everything[int(i * step)] for i in range(count)]
    print("| op | cases | wall s | sweep s | findings | left out by the time target | case seconds by kind (summed over workers) |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    times, rows, stopped = {}, [], []
    for op in ops:
        with tempfile.TemporaryDirectory() as tmp:
            seconds, document, stdout = cli(["--ops", op, *(["--device", device] if device else []), *with_.split()], tmp, cap)
            spent = breakdown(os.path.join(tmp, "out", "runs.db"))
            if findings and not document.get("stopped"):
                os.makedirs(findings, exist_ok=True)
                shutil.copy(os.path.join(tmp, "f.json"), os.path.join(findings, f"pointed-{op}.json"))
        times[op] = seconds
        wall = f"stopped at {cap:.0f}" if document.get("stopped") else round(seconds, 1)
        swept, left = _summary(stdout)
        rows.append([op, document["cases"], wall, swept, len(document["findings"]), left, spent])
        print(f"| {op} | {document['cases']} | {wall} | {swept} | {len(document['findings'])} | {left} | {spent} |", flush=True)
        if document.get("where"):
            print(f"    stopped: {document['where']}", flush=True)
            stopped.append(f"{op}: {document['where']}")
        keep(_pointed_made(times, rows, stopped))
    made = _pointed_made(times, rows, stopped)
    print(f"\nmedian {made['figures']['median_s']:.1f} s over {len(ops)} ops; slowest {made['figures']['slowest']} {made['figures']['slowest_s']:.1f} s")
    return made


def _notes(stdout: str) -> list[tuple[str, str]]:
    """The summary's notes, each whole (the terminal wraps them): (kind, text)."""
    import re

    text = " ".join(stdout.split())
    return re.findall(r"note \(([a-z ]+)\): (.*?)(?= note \(| kernel coverage| reached by| float64 judged| repro scripts:| database:|$)", text)


def _summary(stdout: str) -> tuple[str, str]:
    """From a run's summary: its sweep's seconds ("N cases in S s"), and what the time target left out ("L of P"),
    "-" where it says nothing of either."""
    import re

    text = " ".join(stdout.split())
    swept = re.search(r"cases in ([0-9.]+) s", text)
    left = re.search(r"the time target \(([0-9.e+-]+) s\) left out ([0-9,]+) of the ([0-9,]+) oracle and searched cases", text)
    return (swept.group(1) if swept else "-"), (f"{left.group(2)} of {left.group(3)}" if left else "-")


def _pointed_made(times: dict, rows: list, stopped: list[str]) -> dict:
    slowest = max(times, key=times.get)
    columns = ["op", "cases", "wall s", "sweep s", "findings", "left out by the time target", "case seconds by kind"]
    return {"stopped_where": stopped, "table": _record.table(columns, rows),
            "figures": {"median_s": round(statistics.median(times.values()), 1), "slowest": slowest, "slowest_s": round(times[slowest], 1),
                        "stopped": sum(1 for r in rows if isinstance(r[2], str)), "ops": len(rows)}}


def breakdown(db: str) -> str:
    """Where a run's case seconds went: summed per kind of case (the plain cases, the searched ones, each oracle's), the
    largest first, with the slowest case; what a run stopped at its cap had stored by then."""
    import sqlite3
    from collections import Counter

    if not os.path.exists(db):
        return ""
    spent, count, slowest = Counter(), Counter(), ("", 0.0)
    for case_id, seconds in sqlite3.connect(db).execute("select case_id, seconds from outcomes"):
        parts = case_id.split("|")
        oracle = parts[-1][1:].split("=")[0] if parts[-1].startswith("@") else ""
        oracle = "compile:chain" if oracle.startswith("compile:chain:") else oracle  # every chain together
        kind = oracle or ("searched" if len(parts) > 6 else "plain")
        spent[kind] += seconds
        count[kind] += 1
        slowest = max(slowest, (case_id, seconds), key=lambda pair: pair[1])
    kinds = "; ".join(f"{k} {v:.0f} s / {count[k]}" for k, v in spent.most_common(4))
    return f"{kinds}; slowest {slowest[0]} {slowest[1]:.0f} s"


def catalog(keep: str | None, without: list[str], every: int = 1, with_: str = "", device: str | None = None,
            cap: float | None = None, record=lambda made: None) -> dict:
    """The catalog (every ``every``-th op of it, when above 1: a catalog run, --depth catalog) with defaults (and
    ``with_``'s flags), then without each part (each of ``without`` after the defaults' flags, ``with_`` not). A run
    stopped at ``cap`` seconds is listed as stopped with what its store holds by then (its cases, and where their
    seconds went); ``record(made)`` is handed what ran so far after each run (a record a ``--limit`` cannot take)."""
    from torchsleuth import resolve_ops

    chosen = [] if every <= 1 else ["--ops", ",".join(resolve_ops(None)[::every]), "--depth", "catalog"]
    chosen += ["--device", device] if device else []
    first = f"defaults {with_}".strip() if with_ else "defaults (search and sampled oracles within the budget)"
    columns = ["run", "cases", "wall s", "findings", "compiled cases (pass/finding/raised/other)", "case seconds by kind"]
    print("| " + " | ".join(columns) + " |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    seconds, rows, stopped = {}, [], []
    for name, args in ((first, with_.split()), *((w or "defaults", w.split()) for w in without)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(keep, "-".join(a.strip("-") for a in args) if args else "defaults") if keep else tmp
            os.makedirs(folder, exist_ok=True)
            seconds[name], document, stdout = cli([*chosen, *args], folder, cap)
            db = os.path.join(folder, "out", "runs.db")
            compiled, spent = _compiled(db), breakdown(db)
            cases = f"{_stored(db)} stored" if document.get("stopped") else document["cases"]
        wall = f"stopped at {cap:.0f}" if document.get("stopped") else round(seconds[name], 1)
        rows.append([name, cases, wall, len(document["findings"]), compiled, spent])
        print(f"| {name} | {cases} | {wall} | {len(document['findings'])} | {compiled} | {spent} |", flush=True)
        for kind, text in _notes(stdout):
            if kind in ("search", "compile", "refusals", "time"):
                print(f"    note ({kind}): {text}")
        if document.get("where"):
            print(f"    stopped: {document['where']}", flush=True)
            stopped.append(f"{name}: {document['where']}")
        record(_catalog_made(columns, rows, seconds, stopped))
    made = _catalog_made(columns, rows, seconds, stopped)
    for label, ratio in made["figures"].items():
        print(f"\n{label}: {ratio:.2f}")
    return made


def _catalog_made(columns: list[str], rows: list, seconds: dict, stopped: list[str]) -> dict:
    """The record so far: the table, what each stopped run was doing, and the first run's time over each other's (where
    neither was stopped)."""
    ended = {row[0] for row in rows if not isinstance(row[2], str)}
    first, *others = seconds
    return {"stopped_where": stopped, "table": _record.table(columns, rows),
            "figures": {f"ratio of {first} to {other}": round(seconds[first] / seconds[other], 2)
                        for other in others if first in ended and other in ended}}


def _stored(db: str) -> int:
    """The cases a run's store holds (a run stopped at its cap: those that ran by then)."""
    import sqlite3

    if not os.path.exists(db):
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM outcomes").fetchone()[0]


def _compiled(db: str) -> str:
    """The run's compiled cases (the compile oracle's, chains included) by status: pass/finding/raised/other."""
    import sqlite3

    if not os.path.exists(db):
        return "-"
    with sqlite3.connect(db) as conn:
        counts = dict(conn.execute("SELECT status, COUNT(*) FROM outcomes WHERE case_id LIKE '%|@compile%' GROUP BY status").fetchall())
    other = sum(n for status, n in counts.items() if status not in ("pass", "finding", "raised"))
    return f"{counts.get('pass', 0)}/{counts.get('finding', 0)}/{counts.get('raised', 0)}/{other}" if counts else "0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("pointed", "catalog"))
    parser.add_argument("--ops", type=int, default=15, help="pointed: how many ops (default 15)")
    parser.add_argument("--names", help="pointed: these ops (comma-separated) in place of every k-th of the catalog")
    parser.add_argument("--device", help="the device the runs sweep (default the CLI's)")
    parser.add_argument("--cap", type=float, metavar="S", help="stop each run after S seconds and say so (catalog: with the cases "
                                                               "its store holds by then, and where their seconds went)")
    parser.add_argument("--keep", action="store_true", help="catalog: keep each run's database, findings file and repros under --out; "
                                                            "pointed: each run's findings file (--out/pointed-OP.json)")
    parser.add_argument("--every", type=int, default=1, metavar="K", help="catalog: every K-th op of the catalog only (default 1: all)")
    parser.add_argument("--without", action="append", metavar="FLAGS",
                        help="catalog: a run with these flags after the defaults' (repeatable; default '--search none'; "
                             "'' the defaults alone; '-' no such run: the first alone, where a device call has time for one)")
    parser.add_argument("--with", dest="with_", default="", metavar="FLAGS",
                        help="catalog: the first run's flags after the defaults' ('--compile'); the --without runs leave them out; "
                             "pointed: every run's flags ('--time 0')")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {len(os.sched_getaffinity(0))} CPUs, python {sys.version.split()[0]}\n")
    if args.what == "pointed":
        made = pointed(args.ops, args.names.split(",") if args.names else None, args.device, args.cap,
                       keep=lambda so_far: _record.write(args.out, "search-cost", **so_far, complete=False),
                       findings=args.out if args.keep else None, with_=args.with_)
    else:
        without = ["--search none"] if args.without is None else [w for w in args.without if w != "-"]
        made = catalog(args.out if args.keep else None, without, args.every,
                       args.with_, args.device, args.cap, record=lambda so_far: _record.write(args.out, "search-cost", **so_far, complete=False))
    _record.write(args.out, "search-cost", **made, complete=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
