"""The terminal: a progress bar while a sweep runs, one summary screen after it.

Renders records only (outcomes while sweeping; ``report.view``'s records, the
same ones the HTML report shows, after it); never tensors. Output goes to
stderr for progress and stdout for the summary, so that ``--json -`` style
piping and a progress bar do not mix. Text from the run (reasons, notes,
diagnoses) is printed as plain ``Text``, never as rich markup, so a reason
holding ``[/]`` prints as it is.

What a terminal 80 columns wide, or a pipe, gets (``console``, ``fits``):
no id or other word is broken across lines (a table rich would print with a
word of a cell broken is printed as lines instead: one group, run, reason or
overload never reached to a line, the id first, wrapped between words), and
no line ends in the spaces rich pads tables and wrapped text with. Counts are said in words, once: "16 findings in 1 group; 40
passed; 8 raised (loud)". The summary ends with what to do next: the
commands that print the first group's repro, write the HTML report and the
upstream bug report.
"""

from __future__ import annotations

import io
import re
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..judge.records import Outcome
from ..store.runs import DEFAULT_DB
from . import view

# How many rows of each table the summary shows before "... and N more".
ROWS = 15
_STATUS_STYLES = {"pass": "green", "finding": "bold red", "raised": "yellow", "skip": "dim", "error": "bold magenta"}
# How each status's count reads: "40 passed".
_STATUS_WORDS = {"pass": "passed", "raised": "raised (loud)", "skip": "not judged", "error": "torchsleuth errors"}
# What a line may end in that a reader cannot see: spaces, and the escape codes that close a style after them.
_PADDING = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)+$")
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class _Trimmed(io.TextIOBase):
    """A text stream that writes each line without the padding at its end (rich pads table titles and wrapped lines)."""

    def __init__(self, stream):
        self.stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self.stream.write(trimmed(line) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.stream.write(self._pending)
            self._pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


def trimmed(line: str) -> str:
    """``line`` without trailing spaces, keeping the escape codes among them (a style closed after the text)."""
    tail = _PADDING.search(line)
    return line if tail is None else line[: tail.start()] + "".join(_ESCAPE.findall(tail.group()))


def stdout() -> Console:
    """The console a command's summary is printed on: stdout, lines trimmed."""
    return Console(file=_Trimmed(sys.stdout))


def fits(table: Table, console: Console) -> bool:
    """Whether ``table`` prints on the console with no word of a cell broken: each column can hold its longest word
    (measured), and rich's layout at this width keeps each one whole (tried: rich narrows the widest columns first,
    below their longest word when it must)."""
    # measured as if unbounded: rich clamps a column's minimum to the width it would squeeze the table into
    if Measurement.get(console, console.options.update_width(1 << 16), table).minimum > console.width:
        return False
    probe = Console(width=console.width, file=io.StringIO(), color_system=None, legacy_windows=False)
    probe.print(table)
    shown = probe.file.getvalue()
    return all(word in shown for column in table.columns for cell in column.cells for word in str(cell).split())


def table_or_lines(console: Console, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], line) -> None:
    """``rows`` as a table under ``title`` where it ``fits``; else the title, then ``line(row)`` (a ``Text``) for each
    row, which the console wraps between words."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column == "cases" else "left")
    for row in rows:
        table.add_row(*map(Text, row))
    if fits(table, console):
        console.print(table)
        return
    console.print(Text(title, style="italic"))
    for row in rows:
        console.print(line(row))


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 group``, ``2 groups``."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


class TerminalProgress:
    """The ``sweep.Progress`` the CLI uses: a rich progress bar over units, on a terminal only (a pipe or a log file
    would get its last frame, its columns squeezed to ellipses)."""

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
        if not self.enabled or not self.console.is_terminal:
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


def summary(result, *, console: Console | None = None, groups=None, written: dict[str, str] | None = None, db: str | None = None) -> None:
    """The one screen after a sweep: counts, findings by group, what was skipped and why, kernel coverage, what next."""
    render(view.build(result, groups), console=console, written=written, coverage=getattr(result, "coverage", None), db=db)


def render(report: view.ReportView, *, console: Console | None = None, written: dict[str, str] | None = None, coverage=None,
           db: str | None = None) -> None:
    """``report`` on one screen; the HTML report shows the same records in full. ``coverage``: a ``store.coverage.Coverage``;
    ``db``: the database the run is in, for the commands of the last lines."""
    console = console or stdout()
    run = report.run
    # a watch's cases are its findings; what it judged, its op calls and steps, is its note's count
    counted = "" if run.command == "watch" else f": {plural(run.cases, 'case')}"
    console.print(Text.assemble((f"run {run.id}", "bold"), f"  {run.command} on {run.device}, torch {run.torch}{counted} in {run.seconds:.1f} s"))
    console.print(counts(report))

    if report.groups:
        _groups(report, console)
        for group in report.groups[:ROWS]:
            if report.run.command == "watch":  # what each finding says, and where it was issued: the step, the stack
                for finding in group.findings:
                    console.print(Text.assemble((f"{group.id}: ", "bold"), finding.summary))
                    if finding.detail:
                        console.print(Text(f"    {finding.detail}", style="dim"))
            elif group.diagnosis:
                console.print(Text.assemble((f"{group.id} diagnosis: ", "bold"), group.diagnosis))

    for reasons in report.reasons:
        # raised reasons are many and tell little (the op refused loudly): a few are enough
        rows = [(str(count), reason) for count, reason in reasons.rows[: ROWS if reasons.status != "raised" else 5]]
        table_or_lines(console, reasons.title, ("cases", "reason"), rows,
                       lambda row: Text.assemble((f"{plural(int(row[0]), 'case')}: ", "bold"), row[1]))
    if report.flaky:
        count = len(report.flaky)
        console.print(Text(f"{plural(count, 'finding')} did not recur when replayed (flaky; not reported as bugs)", style="dim"))
    for f in report.internal:  # a crash no standalone script reproduces (shrink.attribute)
        console.print(Text.assemble(("torchsleuth's own failure, not the op's: ", "bold magenta"), f"{f.id} {f.summary}"))
    for unit, detail in report.failed_units:
        console.print(Text.assemble((f"unit {unit} could not run:", "bold magenta"), f" {detail}"))
    for kind, detail in report.notes:
        console.print(Text(f"note ({kind}): {detail}", style="dim"))
    if coverage is not None and coverage.ops:
        _coverage(coverage, console)
    for what, where in (written or {}).items():
        console.print(Text(f"{what}: {where}"))
    for line in next_steps(report, db=db):
        console.print(Text(line))


def counts(report: view.ReportView) -> Text:
    """The run's counts in words: "16 findings in 1 group; 40 passed; 8 raised (loud)"."""
    statuses = dict(report.run.statuses)
    parts = []
    if report.findings:
        found = f"{plural(report.findings, 'finding')} in {plural(len(report.groups), 'group')}"
        failing = statuses.get("finding", report.findings)
        if failing != report.findings and report.run.command != "watch":
            found += f" (from {plural(failing, 'case')})"
        parts.append((found, _STATUS_STYLES["finding"]))
    else:
        parts.append(("no findings", "green"))
    for status, count in statuses.items():
        if status != "finding":
            parts.append((f"{count} {_STATUS_WORDS.get(status, status)}", _STATUS_STYLES.get(status, "")))
    text = Text()
    for i, (words, style) in enumerate(parts):
        text.append("; " if i else "")
        text.append(words, style=style)
    return text


def next_steps(report: view.ReportView, *, db: str | None = None) -> list[str]:
    """What to do next, as the commands to type: the first group's repro, the HTML report, the upstream bug report."""
    where = f" --db {db}" if db and db != DEFAULT_DB else ""
    if not report.groups:
        return ["next: the run as one HTML page:", f"  torchsleuth report latest{where}"]
    first = report.groups[0].id
    return ["next: the first group's repro script (it needs only torch), the run as one HTML page, a bug report to file upstream:",
            f"  torchsleuth repro {first}{where}", f"  torchsleuth report latest{where}", f"  torchsleuth report --issue {first}{where}"]


def _groups(report: view.ReportView, console: Console) -> None:
    """The groups as a table where it fits; else one group to a line, its id first, so that no id is ever broken."""
    shown = report.groups[:ROWS]
    table = Table(show_lines=False)
    for column in ("group", "op", "kind", "dtype", "where", "n", "example"):
        table.add_column(column, no_wrap=column in ("group", "example", "n"))
    for group in shown:
        table.add_row(*map(Text, (group.id, _op(group), group.kind, ", ".join(group.dtypes), ", ".join(group.layouts),
                                  str(len(group.findings)), group.example)))
    if fits(table, console):
        console.print(table)
    else:
        for group in shown:
            console.print(Text.assemble((group.id, "bold"), f"  {_op(group)}, {group.kind}, {', '.join(group.dtypes)}: "
                                        f"{plural(len(group.findings), 'finding')}, e.g. {group.example}; "
                                        f"where: {', '.join(group.layouts)}"))
    if len(report.groups) > ROWS:
        console.print(f"... and {len(report.groups) - ROWS} more groups")


def _op(group: view.GroupView) -> str:
    """The group's aten overload, and its variant where the overload does not say it (``add_``, ``.out`` do); "compiled"
    where every finding is of a call torch.compile made (the compile oracle's cases)."""
    said = group.variant in ("functional", "inplace", "out") or group.op.rpartition(".")[2] == group.variant  # Adam.step, step
    named = group.op if said else f"{group.op} ({group.variant})"
    compiled = all("|@compile" in f.found_as for f in group.findings) and "compiled" not in named
    return f"{named}, compiled" if compiled else named


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
        table_or_lines(console, "never reached", ("op", "overload", "why"), missed[:ROWS],
                       lambda row: Text.assemble((row[1], "bold"), f" ({row[0]}): {row[2]}"))
        if len(missed) > ROWS:
            console.print(f"... and {len(missed) - ROWS} more overloads never reached")
    extra = [f"{o.op} {variant} ({cases} cases)" for o in coverage.ops for variant, cases in o.undeclared]
    if extra:
        console.print(Text(f"variants OpInfo does not declare, swept: {', '.join(extra)}", style="dim"))
