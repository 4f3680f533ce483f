"""The terminal: a progress bar while a sweep runs, one summary screen after it.

Renders records only (outcomes, findings, the sweep result); never tensors.
Output goes to stderr for progress and stdout for the summary, so that
``--json -`` style piping and a progress bar do not mix.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..judge.records import Outcome

# How many rows of each table the summary shows before "... and N more".
ROWS = 15


class TerminalProgress:
    """The ``sweep.Progress`` the CLI uses: a rich progress bar over units."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.cases = 0
        self.findings = 0
        self._bar = None
        self._task = None

    def start(self, *, units: int, done: int, resumed: bool) -> None:
        if resumed:
            self.console.print(f"[bold]resuming[/] the unfinished run: {done} of {units} op/dtype units already done")
        if not self.enabled:
            return
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("units"),
            TextColumn("{task.fields[cases]} cases"),
            TextColumn("[red]{task.fields[findings]} findings"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("sweeping", total=units, completed=done, cases=0, findings=0)

    def outcome(self, outcome: Outcome) -> None:
        self.cases += 1
        self.findings += len(outcome.findings)
        if self._bar is not None:
            self._bar.update(self._task, cases=self.cases, findings=self.findings, description=outcome.case.op[:28].ljust(28))

    def unit_done(self, unit) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description="done".ljust(28))
            self._bar.stop()


def summary(result, *, console: Console | None = None, groups=None, written: dict[str, str] | None = None) -> None:
    """The one screen after a sweep: counts, findings by group, what was skipped and why."""
    console = console or Console()
    run = result.run
    statuses = Counter(result.statuses)
    line = Text()
    line.append(f"run {run.id}", style="bold")
    line.append(f"  {run.command} on {run.device}, torch {run.torch}: {result.cases} cases in {result.seconds:.1f} s  ")
    for status, style in (("pass", "green"), ("finding", "bold red"), ("raised", "yellow"), ("skip", "dim"), ("error", "bold magenta")):
        if statuses.get(status):
            line.append(f"{statuses[status]} {status}  ", style=style)
    console.print(line)

    if result.findings:
        table = Table(title=f"{len(result.findings)} findings", title_justify="left", show_lines=False)
        for column in ("group", "op", "kind", "variant", "dtype", "where", "n", "example"):
            table.add_column(column, overflow="fold")
        rows = groups if groups is not None else _ad_hoc_groups(result.findings)
        by_id = {f.id: f for f in result.findings}
        for group in rows[:ROWS]:
            first = by_id[group.findings[0]]
            where = ", ".join(sorted({layout for f in (by_id[i] for i in group.findings) for _, layout in f.layouts})) or "contiguous"
            table.add_row(group.id, first.op, first.kind, first.variant, first.dtype, where, str(len(group.findings)), first.id)
        console.print(table)
        if len(rows) > ROWS:
            console.print(f"... and {len(rows) - ROWS} more groups")
    else:
        console.print("[green]no findings[/]")

    for status, title in (("error", "torchsleuth errors (bugs in torchsleuth; please report)"), ("skip", "not judged"), ("raised", "the op raised (loud, so not a silent bug)")):
        reasons = result.reasons.get(status)
        if not reasons:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("cases", justify="right")
        table.add_column("reason", overflow="fold")
        ordered = sorted(reasons.items(), key=lambda item: -item[1])
        for reason, count in ordered[: ROWS if status != "raised" else 5]:
            table.add_row(str(count), reason)
        console.print(table)
    for unit, detail in result.failed_units:
        console.print(f"[bold magenta]unit {unit} could not run:[/] {detail}")
    for kind, detail in result.notes:
        console.print(f"[dim]note ({kind}): {detail}[/]")
    for what, where in (written or {}).items():
        console.print(f"{what}: {where}")


class _Group:
    def __init__(self, key, findings):
        self.id = key
        self.findings = findings


def _ad_hoc_groups(findings):
    buckets: dict[tuple, list[str]] = {}
    for f in findings:
        buckets.setdefault((f.op, f.kind, f.variant), []).append(f.id)
    return [_Group(f"{i + 1}", ids) for i, ids in enumerate(buckets.values())]
