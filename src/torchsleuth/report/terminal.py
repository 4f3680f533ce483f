"""The terminal: a progress bar while a sweep runs, one summary screen after it.

Renders records only (outcomes while sweeping; ``report.view``'s records, the
same ones the HTML report shows, after it); never tensors. Output goes to
stderr for progress and stdout for the summary, so that ``--json -`` style
piping and a progress bar do not mix. Text from the run (reasons, notes,
diagnoses) is printed as plain ``Text``, never as rich markup, so a reason
holding ``[/]`` prints as it is.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..judge.records import Outcome
from . import view

# How many rows of each table the summary shows before "... and N more".
ROWS = 15
_STATUS_STYLES = {"pass": "green", "finding": "bold red", "raised": "yellow", "skip": "dim", "error": "bold magenta"}


class TerminalProgress:
    """The ``sweep.Progress`` the CLI uses: a rich progress bar over units."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True, executor: str = ""):
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.executor = executor  # where the cases run, in words ("local pool, 2 workers"): said once, at the start
        self.cases = 0
        self.findings = 0
        self._bar = None
        self._task = None

    def start(self, *, units: int, done: int, resumed: bool) -> None:
        if resumed:
            self.console.print(f"[bold]resuming[/] the unfinished run: {done} of {units} op/dtype units already done")
        if self.executor:
            self.console.print(Text(f"running on: {self.executor}", style="dim"))
        if not self.enabled:
            return
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[what]}"),
            TextColumn("{task.fields[cases]} cases"),
            TextColumn("[red]{task.fields[findings]} findings"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("sweeping", total=units, completed=done, cases=0, findings=0, what="units")
        self._steps: dict[str, object] = {}

    def outcome(self, outcome: Outcome) -> None:
        self.cases += 1
        self.findings += len(outcome.findings)
        if self._bar is not None:
            self._bar.update(self._task, cases=self.cases, findings=self.findings, description=outcome.case.op[:28].ljust(28))

    def unit_done(self, unit) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def step(self, name: str, done: int, total: int) -> None:
        """Progress of a stage after the sweep: "shrinking" (findings), "diagnosing" and "attributing crashes" (groups), or another (cases)."""
        if self._bar is None:
            return
        if name not in self._steps:
            self._bar.update(self._task, description="done".ljust(28))
            what = {"shrinking": "findings", "diagnosing": "groups", "attributing crashes": "groups"}.get(name, "cases")
            self._steps[name] = self._bar.add_task(name.ljust(28), total=total, cases=self.cases, findings=self.findings, what=what)
        self._bar.update(self._steps[name], completed=done)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description="done".ljust(28))
            self._bar.stop()


def summary(result, *, console: Console | None = None, groups=None, written: dict[str, str] | None = None) -> None:
    """The one screen after a sweep: counts, findings by group, what was skipped and why, kernel coverage."""
    render(view.build(result, groups), console=console, written=written, coverage=getattr(result, "coverage", None))


def render(report: view.ReportView, *, console: Console | None = None, written: dict[str, str] | None = None, coverage=None) -> None:
    """``report`` on one screen; the HTML report shows the same records in full. ``coverage``: a ``store.coverage.Coverage``."""
    console = console or Console()
    run = report.run
    line = Text()
    line.append(f"run {run.id}", style="bold")
    line.append(f"  {run.command} on {run.device}, torch {run.torch}: {run.cases} cases in {run.seconds:.1f} s  ")
    for status, count in run.statuses:
        line.append(f"{count} {status}  ", style=_STATUS_STYLES.get(status, ""))
    console.print(line)

    if report.groups:
        table = Table(title=f"{report.findings} findings", title_justify="left", show_lines=False)
        for column in ("group", "op", "kind", "variant", "dtype", "where", "n", "example"):
            table.add_column(column, overflow="fold")
        for group in report.groups[:ROWS]:
            cells = (group.id, group.op, group.kind, group.variant, ", ".join(group.dtypes), ", ".join(group.layouts), str(len(group.findings)), group.example)
            table.add_row(*map(Text, cells))
        console.print(table)
        if len(report.groups) > ROWS:
            console.print(f"... and {len(report.groups) - ROWS} more groups")
        for group in report.groups[:ROWS]:
            if group.diagnosis:
                console.print(Text.assemble((f"{group.id} diagnosis: ", "bold"), group.diagnosis))
            elif report.run.command == "watch":  # no diagnosis there: what each finding says, and where it was issued
                for finding in group.findings:
                    console.print(Text.assemble((f"{group.id}: ", "bold"), finding.summary))
                    if finding.detail:
                        console.print(Text(f"    {finding.detail}", style="dim"))
    else:
        console.print("[green]no findings[/]")

    for reasons in report.reasons:
        table = Table(title=reasons.title, title_justify="left")
        table.add_column("cases", justify="right")
        table.add_column("reason", overflow="fold")
        # raised reasons are many and tell little (the op refused loudly): a few are enough
        for count, reason in reasons.rows[: ROWS if reasons.status != "raised" else 5]:
            table.add_row(str(count), Text(reason))
        console.print(table)
    if report.flaky:
        count = len(report.flaky)
        console.print(Text(f"{count} finding{'s' if count != 1 else ''} did not recur when replayed (flaky; not reported as bugs)", style="dim"))
    for f in report.internal:  # a crash no standalone script reproduces (shrink.attribute)
        console.print(Text.assemble(("torchsleuth's own failure, not the op's: ", "bold magenta"), f"{f.id} {f.summary}"))
    for unit, detail in report.failed_units:
        console.print(Text.assemble((f"unit {unit} could not run:", "bold magenta"), f" {detail}"))
    for kind, detail in report.notes:
        console.print(Text(f"note ({kind}): {detail}", style="dim"))
    if coverage is not None and coverage.ops:
        _coverage(coverage, console)
    for what, where in (written or {}).items():
        console.print(f"{what}: {where}")


def _coverage(coverage, console: Console) -> None:
    """Aten overloads reached of those found, internal kernels called directly, the ones never reached and why; variants
    OpInfo does not declare."""
    ops, internal = len(coverage.ops), coverage.internal
    console.print(Text(f"kernel coverage: {coverage.reached} of {coverage.found} aten overloads reached, over {ops} op{'s' if ops != 1 else ''}; "
                       f"{internal} internal kernel{'s' if internal != 1 else ''} called directly"))
    families = coverage.by_family()
    if families:
        console.print(Text("reached by layout family: " + ", ".join(f"{family} {n}" for family, n in families.items())))
    exact, consistency = coverage.float64("exact"), coverage.float64("consistency")
    if consistency:
        shown = ", ".join(consistency[:8]) + (f" and {len(consistency) - 8} more" if len(consistency) > 8 else "")
        console.print(Text(f"float64 judged only for consistency (no reference above it) for {len(consistency)} "
                           f"op{'s' if len(consistency) != 1 else ''}: {shown}"
                           + (f"; against the exact value (mpmath) for {len(exact)}" if exact else ""), style="dim"))
    missed = [(o.op, overload, why) for o in coverage.ops for overload, why in o.unreached]
    if missed:
        table = Table(title="never reached", title_justify="left")
        for column in ("op", "overload", "why"):
            table.add_column(column, overflow="fold")
        for row in missed[:ROWS]:
            table.add_row(*map(Text, row))
        console.print(table)
        if len(missed) > ROWS:
            console.print(f"... and {len(missed) - ROWS} more overloads never reached")
    extra = [f"{o.op} {variant} ({cases} cases)" for o in coverage.ops for variant, cases in o.undeclared]
    if extra:
        console.print(Text(f"variants OpInfo does not declare, swept: {', '.join(extra)}", style="dim"))
