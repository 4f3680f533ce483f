"""``drill``: plant each bug class in a sweep worker, sweep it, say whether it was caught.

Design note. Each class gets a sweep of its own, ``workers=1``, with its plant
in ``SweepConfig.imports``: the plant is imported only by that sweep's
worker (and by the fresh ones that replace it after a crash or hang), never
by this process, which only plans the sweep and stores what it finds. A
``workers=0`` sweep would load the plant here, so it is refused.

Most of a class's time is its worker's start-up (importing torch and the
OpInfo database, about 3 s); the sweeps share nothing (each has its own
store in a temporary folder), so ``workers`` of them run at once, each from a
thread of this process that waits on its worker process. The slowest ones
(a crash or hang starts three workers: the case, its replay alone, the
description of it) start first.

The control is one more sweep, without plants, over what the classes sweep
together (their ops, dtypes, variants and layouts, and the most samples any
takes). A sweep crosses all of these, so it also runs cases no class runs: a
finding there is this torch's own (``torchsleuth ops`` reports it too) and is
shown apart. A finding on a case a class runs is a false alarm: that class's
catch might be the torch's doing, not the plant's, so the drill is not
trustworthy.
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Protocol, Sequence

from ..cases import opinfo
from ..config import SweepConfig
from ..errors import UsageError
from ..frame import SweepResult
from ..sweep import sweep
from .classes import CLASSES, BugClass, placed
from .records import ClassResult, ControlResult, DrillResult

CONTROL = "control"


class DrillProgress(Protocol):
    def start(self, *, classes: Sequence[BugClass]) -> None: ...
    def class_done(self, result: ClassResult) -> None: ...
    def control_done(self, result: ControlResult) -> None: ...


class _Silent:
    def start(self, *, classes): pass
    def class_done(self, result): pass
    def control_done(self, result): pass


def drill(
    classes: Sequence[BugClass] = CLASSES, *, workers: int = 2, shrink: bool = True, progress: DrillProgress | None = None,
) -> DrillResult:
    """Plant and sweep each of ``classes``, ``workers`` sweeps at a time, then the unplanted control.

    ``shrink`` runs each sweep's shrink stage, as ``torchsleuth ops`` does: a
    finding its replay calls flaky leaves the report, so a drill without it
    checks the oracles but not that the report keeps what they find.
    """
    import torch

    if workers < 1:
        raise UsageError(f"the drill needs worker processes (--workers 1 or more, got {workers}): a plant must never load in this process")
    if not classes:
        raise UsageError("no classes to drill")
    if len({c.name for c in classes}) < len(classes):
        raise UsageError(f"each class is drilled once: {', '.join(c.name for c in classes)} repeats a name")
    opinfo.catalog()  # the OpInfo database imported here, once, not by threads racing to import it
    progress = progress or _Silent()
    progress.start(classes=classes)
    started = time.monotonic()
    results: dict[str, ClassResult] = {}
    control: ControlResult | None = None
    with tempfile.TemporaryDirectory(prefix="torchsleuth-drill-") as folder, ThreadPoolExecutor(max_workers=workers) as pool:
        first = sorted(classes, key=lambda c: c.reference != "isolation")  # stable: the rest keep their order
        futures: dict[Future, BugClass | None] = {pool.submit(_timed, planted(c, shrink=shrink), os.path.join(folder, f"{c.name}.db")): c for c in first}
        futures[pool.submit(_timed, control_config(classes, shrink=shrink), os.path.join(folder, f"{CONTROL}.db"))] = None
        for future in as_completed(futures):
            bug = futures[future]
            outcome, seconds = future.result()
            if bug is None:
                control = judge_control(classes, outcome, seconds)
                progress.control_done(control)
            else:
                results[bug.name] = judge_class(bug, outcome, seconds)
                progress.class_done(results[bug.name])
    return DrillResult(
        torch=torch.__version__, device="cpu", classes=tuple(results[c.name] for c in classes),
        control=control, seconds=time.monotonic() - started,
    )


def planted(bug: BugClass, *, shrink: bool = True) -> SweepConfig:
    """The class's sweep: its op, dtypes, variants and layouts, with its plant in the worker."""
    return SweepConfig(
        command="drill", ops=(bug.op,), dtypes=bug.dtypes, variants=bug.variants, layouts=bug.layouts,
        samples=bug.samples, timeout=bug.timeout, workers=1, imports=(bug.plant,), shrink=shrink, search=bug.search,
    )


def control_config(classes: Sequence[BugClass], *, shrink: bool = True) -> SweepConfig:
    """Every class's sweep at once, without plants."""

    def union(field: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(value for c in classes for value in getattr(c, field)))

    samples = 0 if any(c.samples == 0 for c in classes) else max(c.samples for c in classes)
    return SweepConfig(
        command="drill", ops=tuple(dict.fromkeys(c.op for c in classes)), dtypes=union("dtypes"),
        variants=union("variants"), layouts=union("layouts"), samples=samples, workers=1, shrink=shrink, search=union("search"),
    )


def _timed(config: SweepConfig, db: str) -> tuple[SweepResult | Exception, float]:
    """The sweep's result (or what stopped it, which the drill reports rather than raises) and its wall time."""
    started = time.monotonic()
    try:
        result: SweepResult | Exception = sweep(config, db=db)
    except Exception as e:  # a class the torch cannot run is missed, with the reason; the others go on
        result = e
    return result, time.monotonic() - started


def judge_class(bug: BugClass, outcome: SweepResult | Exception, seconds: float) -> ClassResult:
    if isinstance(outcome, Exception):
        return ClassResult(bug=bug, caught=False, evidence=None, findings=(), cases=0, seconds=seconds,
                           why_missed=f"the sweep failed: {type(outcome).__name__}: {outcome}")
    caught = [f for f in outcome.findings if bug.catches(f)]
    return ClassResult(
        bug=bug, caught=bool(caught), evidence=caught[0] if caught else None, findings=outcome.findings,
        cases=outcome.cases, seconds=seconds, why_missed="" if caught else _why_missed(bug, outcome),
    )


def _why_missed(bug: BugClass, outcome: SweepResult) -> str:
    if outcome.failed_units:
        unit, detail = outcome.failed_units[0]
        return f"the sweep could not run {unit}: {detail}"
    if not outcome.cases:
        return f"no case ran: {bug.op} has no {'/'.join(bug.variants)} cases in {'/'.join(bug.dtypes)} here"
    if not outcome.findings:
        return f"no finding in {outcome.cases} cases"
    seen = dict.fromkeys(f"{f.kind} ({f.reference}) on {placed(f.layouts)}" for f in outcome.findings)
    more = f" and {len(seen) - 3} more" if len(seen) > 3 else ""
    return f"{len(outcome.findings)} findings, none the expected one: {'; '.join(list(seen)[:3])}{more}"


def judge_control(classes: Sequence[BugClass], outcome: SweepResult | Exception, seconds: float) -> ControlResult:
    if isinstance(outcome, Exception):
        return ControlResult(false_alarms=(), outside=(), cases=0, seconds=seconds,
                             problem=f"the control sweep failed: {type(outcome).__name__}: {outcome}")
    drilled, outside = [], []
    for f in outcome.findings:
        (drilled if any(c.covers(f) for c in classes) else outside).append(f)
    problem = ""
    if outcome.failed_units:
        unit, detail = outcome.failed_units[0]
        problem = f"the control could not run {unit}: {detail}"
    elif outcome.statuses.get("error"):
        problem = f"torchsleuth failed on {outcome.statuses['error']} control cases"
    return ControlResult(
        false_alarms=tuple(drilled), outside=tuple(outside),
        cases=outcome.cases, seconds=seconds, problem=problem,
    )
