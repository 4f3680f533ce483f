"""``torchsleuth diff``: what changed between two stored runs, group by group."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .._version import __version__
from ..errors import ExitCode
from ..store.runs import DEFAULT_DB, FORMS
from .arguments import command

EPILOG = f"""\
RUN_A and RUN_B are each {FORMS}:
  7            run 7 in the --db database
  latest       the newest run in the --db database
  PATH         the newest run in the database file PATH
  PATH:7       run 7 in the database file PATH
so the two runs may come from different files (two torch versions, two
machines). `torchsleuth runs --db PATH` lists a database's runs.

Findings are compared by group (one bug: the same op, variant, kind and
reference, triggered by the same arguments' layouts; a group's id is the same
in every run and on every device):
  new          in RUN_B, not in RUN_A; a 'regression' when RUN_A ran and
               passed some of its cases, else the note says what RUN_A did
  fixed        in RUN_A, not in RUN_B, and RUN_B ran and passed some of
               the very cases that failed in RUN_A (same op, variant, dtype,
               sample and layouts; the device may differ)
  still        in both
  not rerun    in RUN_A, not in RUN_B, but RUN_B passed none of its cases
               (it swept other ops, dtypes, samples or layouts, or the cases
               now raise or fail otherwise; the note says which): neither
               fixed nor failing, and never counted as fixed

exit status: 1 when RUN_B has new groups, 0 otherwise (fixed, still failing
and not rerun groups do not count, so `diff OLD NEW` fails a CI job on new
bugs only), 2 on a usage error.

examples:
  torchsleuth diff 3 4                             # two runs in {DEFAULT_DB}
  torchsleuth diff torch-2.12.db torch-2.13.db     # the newest run of each file
  torchsleuth diff cpu.db:1 cuda.db:1 --json changes.json
  torchsleuth repro g-490fe9f2 --db torch-2.13.db  # then reproduce a new group (its first finding)
"""


def add_parser(commands) -> None:
    p = command(commands, "diff", "new, fixed and still failing finding groups between two stored runs", __doc__, EPILOG)
    p.add_argument("run_a", metavar="RUN_A", help="the older or reference run (forms below)")
    p.add_argument("run_b", metavar="RUN_B", help="the newer run, judged against RUN_A")
    p.add_argument("--db", metavar="PATH", help=f"the database that run ids and 'latest' refer to (default {DEFAULT_DB})")
    p.add_argument("--json", metavar="PATH", help="also write the comparison as JSON to PATH")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..report.diff import between
    from ..paths import writable_file
    from ..store.runs import open_run

    if args.json:
        writable_file(args.json, "--json")  # refused before any work, like `ops --json`
    store_a, run_a = open_run(args.run_a, args.db)
    try:
        store_b, run_b = open_run(args.run_b, args.db)
        try:
            result = between(store_a, run_a, store_b, run_b)
            paths = (str(store_a.path), str(store_b.path))
        finally:
            store_b.close()
    finally:
        store_a.close()
    show(result, paths=paths)
    if args.json:
        write_json(args.json, result, paths=paths)
        print(f"comparison written to {args.json}")
    return ExitCode.FINDINGS if result.new else ExitCode.CLEAN


# --- the terminal ------------------------------------------------------------------------

# Rows shown per category whose groups are not news (still failing, not
# rerun) before "... and N more"; new and fixed groups are always all shown.
ROWS = 15

_STYLE = {"new": "bold red", "fixed": "green", "still": "yellow", "not rerun": "dim"}


def show(result, *, paths: tuple[str, str], console=None) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..report.terminal import fits, stdout
    from .runs import when

    console = console or stdout()
    groups_a = len(result.still) + len(result.fixed) + len(result.not_rerun)
    groups_b = len(result.still) + len(result.new)
    for name, info, path, count in (("A", result.run_a, paths[0], groups_a), ("B", result.run_b, paths[1], groups_b)):
        state = "finished " + when(info.finished) if info.finished is not None else "[yellow]unfinished[/] (partial)"
        console.print(
            f"[bold]{name}[/]  run {info.id} in {path}: {info.command} on {info.device}, torch {info.torch}, "
            f"started {when(info.started)}, {state}; {count} finding group{'s' if count != 1 else ''}"
        )
    rows = [(label, changes) for label, changes in
            (("new", result.new), ("fixed", result.fixed), ("still", result.still), ("not rerun", result.not_rerun)) if changes]
    if rows:
        lines = []  # (label, group, summary, A→B, example, note)
        for label, changes in rows:
            shown = changes if label in ("new", "fixed") else changes[:ROWS]
            lines += [(label, change.id, change.summary, f"{len(change.findings_a)} → {len(change.findings_b)}", change.example,
                       _note(label, change, result)) for change in shown]
            if len(changes) > len(shown):
                lines.append((label, f"... and {len(changes) - len(shown)} more (all in --json)", "", "", "", ""))
        table = Table(show_lines=False)
        for column in ("change", "group", "summary", "A→B", "example", "note"):
            # ids are copied into other commands: never fold them
            table.add_column(column, overflow="fold", no_wrap=column in ("group", "A→B", "example"))
        for label, *cells in lines:
            table.add_row(Text(label, style=_STYLE[label]), *map(Text, cells))
        if fits(table, console):
            console.print(table)
        else:  # narrow: a change to a line, its id first, wrapped between words
            for label, group, summary, counts, example, note in lines:
                tail = "; ".join(x for x in (f"{counts} findings" if counts else "", f"e.g. {example}" if example else "", note) if x)
                console.print(Text.assemble((label, _STYLE[label]), "  ", (group, "bold"), f"  {summary}" + (f" ({tail})" if tail else "")))
    else:
        console.print("neither run has findings")
    console.print(
        f"[bold red]{len(result.new)} new[/] ({len(result.regressions)} regressions), [green]{len(result.fixed)} fixed[/], "
        f"[yellow]{len(result.still)} still failing[/], [dim]{len(result.not_rerun)} not rerun[/]"
    )
    if result.new:
        first = result.new[0].id
        console.print("next: the first new group's repro script, run B as one HTML page, a bug report to file upstream:")
        for line in (f"torchsleuth repro {first} --db {paths[1]}", f"torchsleuth report {result.run_b.id} --db {paths[1]}",
                     f"torchsleuth report --issue {first} --db {paths[1]}"):
            console.print(Text(f"  {line}"))


def _note(label: str, change, result) -> str:
    # a group's findings are one per failing case (a finding id is its case and kind)
    if label == "new":
        if change.passed_by_other:
            return f"regression: run {result.run_a.id} passed {change.passed_by_other} of its {len(change.findings_b)} cases"
        return change.why + "; not known to be a regression"
    if label == "fixed":
        return f"run {result.run_b.id} passed {change.passed_by_other} of its {len(change.findings_a)} failing cases"
    if label == "not rerun":
        return change.why
    return ""


# --- the JSON file -------------------------------------------------------------------------


def document(result, *, paths: tuple[str, str]) -> dict:
    """The comparison as a JSON-ready dict; field names are only ever added to."""
    return {
        "tool": "torchsleuth",
        "version": __version__,
        "command": "diff",
        "a": _run(result.run_a, paths[0]),
        "b": _run(result.run_b, paths[1]),
        "counts": {"new": len(result.new), "regressions": len(result.regressions), "fixed": len(result.fixed),
                   "still": len(result.still), "not_rerun": len(result.not_rerun)},
        **{name: [_change(c) for c in getattr(result, name)] for name in ("new", "fixed", "still", "not_rerun")},
    }


def write_json(path: str, result, *, paths: tuple[str, str]) -> None:
    # written under a temporary name and renamed, so a reader never sees half of it
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document(result, paths=paths), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, target)


def _run(info, path: str) -> dict:
    return {
        "database": path, "run": info.id, "command": info.command, "device": info.device, "torch": info.torch,
        "started": _iso(info.started), "finished": _iso(info.finished) if info.finished is not None else None,
    }


def _change(change) -> dict:
    return {
        "group": change.id, "summary": change.summary, "op": change.op, "opinfo": change.opinfo,
        "variant": change.variant, "kind": change.kind, "reference": change.reference, "layouts": list(change.layouts),
        "findings_a": list(change.findings_a), "findings_b": list(change.findings_b),
        "passed_by_other": change.passed_by_other, "why": change.why or None,
    }


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))
