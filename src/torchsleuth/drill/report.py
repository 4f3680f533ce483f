"""The drill on the terminal (a line per class as it finishes, then one table) and as JSON.

Design note. Renders the drill's records only. The JSON is a findings file
(DESIGN.md's contract, ``command: "drill"``) whose ``findings`` are the
control's false alarms: what the unplanted torch reported on drilled cases,
the only findings a drill makes about the user's torch. The drill's own
fields are added beside them (``trustworthy``, ``classes``, ``control``), as
the contract allows; a class's ``evidence`` is the finding that caught it, in
the same shape as every other finding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..report import findings_file
from ..report.terminal import stdout
from .classes import BugClass, placed
from .records import ClassResult, ControlResult, DrillResult

# How many of the control's findings the terminal lists before "... and N more".
ROWS = 10


class LineProgress:
    """The ``DrillProgress`` the CLI uses: one line on stderr per sweep as it finishes."""

    def __init__(self, console: Console | None = None, *, workers: int, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.workers, self.enabled = workers, enabled

    def start(self, *, classes: Sequence[BugClass]) -> None:
        if self.enabled:
            self.console.print(
                f"drilling {len(classes)} bug {'class' if len(classes) == 1 else 'classes'}, each planted in the worker of a sweep "
                f"of its own, then the control without plants; {self.workers} at a time", style="dim",
            )

    def class_done(self, result: ClassResult) -> None:
        if self.enabled:
            line = _verdict(result.caught)
            line.append(f"  {result.bug.name:<18} {result.bug.op:<8} {result.seconds:5.1f} s")
            self.console.print(line)

    def control_done(self, result: ControlResult) -> None:
        if self.enabled:
            line = Text("clean  " if result.clean else "alarm  ", style="green" if result.clean else "bold red")
            line.append(f"  {'control':<18} {'':<8} {result.seconds:5.1f} s  {result.cases} cases without plants")
            self.console.print(line)


def _verdict(caught: bool) -> Text:
    return Text("caught " if caught else "missed ", style="green" if caught else "bold red")


def summary(result: DrillResult, *, console: Console | None = None) -> None:
    """The one screen after a drill: a row per class, the control, and the verdict."""
    console = console or stdout()
    table = Table(title=f"drill on {result.device}, torch {result.torch}: {result.cases} cases in {result.seconds:.1f} s", title_justify="left")
    for column in ("class", "op", "condition planted", "expected finding", "result", "s"):
        # names stay whole (they are what --classes takes); the prose wraps
        table.add_column(column, overflow="fold", justify="right" if column == "s" else "left", no_wrap=column in ("class", "op", "s"))
    for c in result.classes:
        outcome = Text("caught", style="green") if c.caught else Text(f"missed: {c.why_missed}", style="bold red")
        table.add_row(c.bug.name, c.bug.op, c.bug.condition, c.bug.expected, outcome, f"{c.seconds:.1f}")
    console.print(table)
    _control(result.control, console)
    _conclusion(result, console)


def _control(control: ControlResult, console: Console) -> None:
    if control.problem:
        console.print(f"[bold red]control failed[/]: {control.problem}")
    elif control.false_alarms:
        console.print(f"[bold red]control: {len(control.false_alarms)} false alarms[/] on the drilled cases without plants "
                      f"({control.cases} cases, {control.seconds:.1f} s):")
        for f in control.false_alarms[:ROWS]:
            console.print(f"  {f.kind} ({f.reference}) {f.op} {f.variant} {f.dtype} {placed(f.layouts)}: {f.summary}", markup=False)
        if len(control.false_alarms) > ROWS:
            console.print(f"  ... and {len(control.false_alarms) - ROWS} more")
    else:
        console.print(f"[green]control clean[/]: the drilled cases without plants found nothing ({control.cases} cases, {control.seconds:.1f} s)")
    if control.outside:
        ops = ",".join(dict.fromkeys(f.opinfo for f in control.outside))
        console.print(f"[dim]the control also ran cases no class runs and found {len(control.outside)} there: this torch's own, "
                      f"not false alarms of the drill (`torchsleuth ops --ops {ops}` reports them)[/]")


def _conclusion(result: DrillResult, console: Console) -> None:
    missed = [c.bug.name for c in result.classes if not c.caught]
    if result.trustworthy:
        console.print("[bold green]trustworthy[/]: every planted bug was caught where it was planted, and nothing was found without it")
        return
    reasons = []
    if missed:
        reasons.append(f"missed {', '.join(missed)}: a clean report says nothing about {'that class' if len(missed) == 1 else 'those classes'} on this machine")
    if not result.control.clean:
        reasons.append("the control was not clean: a catch on those cases may be this torch's doing, not the plant's")
    console.print("[bold red]not trustworthy[/]: " + "; ".join(reasons))


def document(result: DrillResult) -> dict[str, Any]:
    """The drill as a findings file (the control's false alarms) with the drill's own fields beside them."""
    data = findings_file.document(
        command="drill", device=result.device, torch_version=result.torch, cases=result.cases, seconds=result.seconds,
        findings=result.control.false_alarms, groups=(), repro_paths={},
    )
    data["trustworthy"] = result.trustworthy
    evidence = {e["id"]: e for e in _findings([c.evidence for c in result.classes if c.evidence is not None])}
    data["classes"] = [_class(c, evidence.get(c.evidence.id) if c.evidence else None) for c in result.classes]
    control = result.control
    data["control"] = {
        "clean": control.clean, "cases": control.cases, "seconds": round(control.seconds, 3), "problem": control.problem or None,
        "false_alarms": [f.id for f in control.false_alarms], "outside": len(control.outside),
    }
    return data


def _findings(findings: list) -> list[dict[str, Any]]:
    """Findings in the findings file's own shape."""
    return findings_file.document(
        command="drill", device="", torch_version="", cases=0, seconds=0.0, findings=findings, groups=(), repro_paths={},
    )["findings"]


def _class(c: ClassResult, evidence: dict[str, Any] | None) -> dict[str, Any]:
    bug = c.bug
    return {
        "class": bug.name, "op": bug.op, "condition": bug.condition,
        "expected": {"kind": bug.kind, "reference": bug.reference, "layouts": [{"name": path, "layout": layout} for path, layout in bug.trigger]},
        "caught": c.caught, "why_missed": c.why_missed or None, "cases": c.cases, "findings": len(c.findings),
        "seconds": round(c.seconds, 3), "evidence": evidence,
    }


def write(path: str | Path, result: DrillResult) -> Path:
    """Write ``document(result)`` to ``path`` through a temporary name, so a reader never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(document(result), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path
