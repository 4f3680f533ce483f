"""``torchsleuth runs``: the runs in a database, to pick one for diff and report."""

from __future__ import annotations

import time

from ..errors import ExitCode
from ..store.runs import DEFAULT_DB, FORMS
from .arguments import command

EPILOG = f"""\
Each sweep is one run in the database (--db, default {DEFAULT_DB}): its
id, what it swept, where and with which torch, when it started and finished
('unfinished' if it was stopped: rerunning the same command resumes it;
'failed' if the script `torchsleuth watch` ran raised), how
many cases it judged and how many findings it made, and its seconds of work.

Other commands name a run as RUN: {FORMS}.

examples:
  torchsleuth runs                                 # the runs in {DEFAULT_DB}
  torchsleuth runs --db ci/torch-2.13.db
  torchsleuth diff 3 4                             # then compare two of them
"""


def add_parser(commands) -> None:
    p = command(commands, "runs", "list the runs stored in a database", __doc__, EPILOG)
    p.add_argument("--db", metavar="PATH", default=DEFAULT_DB, help=f"the SQLite file a sweep wrote (default {DEFAULT_DB})")
    p.set_defaults(run=run)


def run(args) -> int:
    from rich.table import Table
    from rich.text import Text

    from ..report.terminal import fits, plural, stdout
    from ..store.lookup import failures, run_counts
    from ..store.runs import open_store

    store = open_store(args.db)
    try:
        runs = store.runs()
        counts = run_counts(store)
        failed = failures(store)
    finally:
        store.close()
    console = stdout()
    if not runs:
        console.print(f"no runs in {args.db} yet; `torchsleuth ops --db {args.db}` makes one")
        return ExitCode.CLEAN
    title = f"{plural(len(runs), 'run')} in {args.db}"
    columns = ("id", "command", "device", "torch", "started", "finished", "cases", "findings", "seconds", "ops")
    rows = []
    for info in runs:
        cases, findings = counts.get(info.id, (0, 0))
        finished = "failed" if info.id in failed else _finished(info)
        rows.append((str(info.id), info.command, info.device, info.torch, when(info.started), finished, str(cases), str(findings),
                     f"{info.seconds:.1f}", swept(info.config)))
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in ("id", "cases", "findings", "seconds") else "left",
                         no_wrap=column in ("id", "started", "finished", "torch"))
    for row in rows:
        table.add_row(*(Text(cell, style=_STYLES.get(cell, "red" if i == 7 and cell != "0" else "")) for i, cell in enumerate(row)))
    if fits(table, console):
        console.print(table)
        return ExitCode.CLEAN
    console.print(Text(title))  # too narrow for the table: a run to a line, its id first
    for id_, command_, device, torch, started, finished, cases, findings, seconds, ops in rows:
        state = finished if finished in _STYLES else f"finished {finished}"
        console.print(Text(f"{id_}  {command_} on {device}, torch {torch}; started {started}, {state}; {plural(int(cases), 'case')}, "
                           f"{plural(int(findings), 'finding')}, {seconds} s" + (f"; {ops}" if ops else "")))
    return ExitCode.CLEAN


_STYLES = {"unfinished": "yellow", "failed": "bold magenta"}


def when(timestamp: float) -> str:
    """A stored time as local date and minute: enough to tell runs apart."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def _finished(info) -> str:
    if info.finished is None:
        return "unfinished"
    finished = when(info.finished)
    # the same day as it started: the time alone
    return finished[11:] if finished[:10] == when(info.started)[:10] else finished


def swept(config: dict) -> str:
    """What a run swept, in a few words: its ops, or how many."""
    ops = config.get("ops") or []
    return ", ".join(ops) if len(ops) <= 3 else f"{len(ops)} ops"
