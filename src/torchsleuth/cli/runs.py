"""``torchsleuth runs``: the runs in a database, to pick one for diff and report."""

from __future__ import annotations

import time

from ..errors import ExitCode
from ..store.runs import DEFAULT_DB, FORMS
from .arguments import command

EPILOG = f"""\
Each sweep is one run in the database (--db, default {DEFAULT_DB}): its
id, what it swept, where and with which torch, when it started and finished
('unfinished' if it was stopped: rerunning the same command resumes it), how
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
    from rich.console import Console
    from rich.table import Table

    from ..store.lookup import run_counts
    from ..store.runs import open_store

    store = open_store(args.db)
    try:
        runs = store.runs()
        counts = run_counts(store)
    finally:
        store.close()
    console = Console()
    if not runs:
        console.print(f"no runs in {args.db} yet; `torchsleuth ops --db {args.db}` makes one")
        return ExitCode.CLEAN
    table = Table(title=f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {args.db}", title_justify="left")
    for column, justify in (("id", "right"), ("command", "left"), ("device", "left"), ("torch", "left"), ("started", "left"),
                            ("finished", "left"), ("cases", "right"), ("findings", "right"), ("seconds", "right"), ("ops", "left")):
        # folded rather than cut when the terminal is narrow: ids and counts must stay whole
        table.add_column(column, justify=justify, overflow="fold")
    for info in runs:
        cases, findings = counts.get(info.id, (0, 0))
        table.add_row(
            str(info.id), info.command, info.device, info.torch, when(info.started),
            _finished(info),
            str(cases), f"[red]{findings}[/]" if findings else "0", f"{info.seconds:.1f}", swept(info.config),
        )
    console.print(table)
    return ExitCode.CLEAN


def when(timestamp: float) -> str:
    """A stored time as local date and minute: enough to tell runs apart."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def _finished(info) -> str:
    if info.finished is None:
        return "[yellow]unfinished[/]"
    finished = when(info.finished)
    # the same day as it started: the time alone
    return finished[11:] if finished[:10] == when(info.started)[:10] else finished


def swept(config: dict) -> str:
    """What a run swept, in a few words: its ops, or how many."""
    ops = config.get("ops") or []
    return ", ".join(ops) if len(ops) <= 3 else f"{len(ops)} ops"
