"""The run frame every command's run goes through: the store opened, the run started or resumed, outputs written.

Design note. ops, optim, shard, watch and check each make cases their own way
and share everything after: the run frame (``run_frame``) checks the output
paths, opens the store, starts the run or resumes the unfinished one with the
same key (``config.RunConfig``), and hands the command a ``Frame`` to record
outcomes, finished units and notes through, each told to the one
``Progress``. On the way out it adds the seconds and commits; when the
command's body finished, it marks the run finished, reads it back
(``result``) and writes the outputs asked for (report.outputs), so a caller
from Python gets the files the command line writes. A body that raises (a
kill, ^C) leaves the run unfinished with what it stored: the same call
resumes it, and nothing is counted twice. A command whose units run in a
worker pool (workers.pool) reports through ``pool_callbacks``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import _version
from .cases.records import Case, Unit
from .config import RunConfig
from .judge.isolation import isolation_outcome
from .judge.records import Finding, Outcome
from .report import groups as grouping, outputs
from .report.groups import Group
from .shrink.records import Shrunk
from .store.coverage import Coverage, of_run as coverage_of
from .store.sqlite import RunInfo, Store
from .workers.records import Callbacks


class Progress(Protocol):
    """What every command's run tells its display (the CLI's is a rich bar; ``Silent`` shows nothing)."""

    def start(self, *, units: int, done: int, resumed: bool) -> None: ...  # pieces of work in all, and those done before
    def outcome(self, outcome: Outcome) -> None: ...  # a case stored
    def unit_done(self, unit: Unit) -> None: ...  # a piece of work finished
    def step(self, name: str, done: int, total: int) -> None: ...  # a stage after the cases: shrinking, diagnosing, a cross-check
    def finish(self) -> None: ...


class Silent:
    """A ``Progress`` that shows nothing; subclass it to hear of some events only."""

    def start(self, *, units: int, done: int, resumed: bool) -> None: pass
    def outcome(self, outcome: Outcome) -> None: pass
    def unit_done(self, unit: Unit) -> None: pass
    def step(self, name: str, done: int, total: int) -> None: pass
    def finish(self) -> None: pass


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepResult:
    run: RunInfo
    resumed: bool
    statuses: dict[str, int]
    reasons: dict[str, dict[str, int]]  # status -> reason -> count, for skip, raised, error
    failed_units: tuple[tuple[str, str], ...]
    notes: tuple[tuple[str, str], ...]  # (kind, detail): worker deaths not reproduced alone
    findings: tuple[Finding, ...]  # as found (flaky and internal ones left out); reported() gives the shrunk version
    seconds: float  # wall time of this run, over every resumption
    groups: tuple[Group, ...] = ()
    shrunk: dict[str, Shrunk] = field(default_factory=dict)  # finding id -> its shrinking
    flaky: tuple[Finding, ...] = ()  # findings that did not recur on replay: not reported as bugs
    internal: tuple[Finding, ...] = ()  # crashes no standalone script reproduces: torchsleuth's own failures, not the op's
    written: dict[str, str] = field(default_factory=dict)  # what was written where ("findings file" -> path), as the summary lists it
    coverage: Coverage = Coverage()  # kernel coverage: aten overloads found and reached per op (store.coverage)

    def reported(self, finding: Finding) -> Finding:
        """The finding as reported: shrunk when it was (its repro is written from this)."""
        shrunk = self.shrunk.get(finding.id)
        return finding if shrunk is None else shrunk.reported(finding)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())


class Frame:
    """One run, open in the store: what a command's body records through. ``result`` once the frame has closed."""

    def __init__(self, *, store: Store, run: RunInfo, resumed: bool, progress: Progress):
        self.store, self.run, self.resumed, self.progress = store, run, resumed, progress
        self.result: SweepResult | None = None

    def start(self, *, units: int, done: int) -> None:
        """The work is planned: ``units`` pieces in all, ``done`` of them before (a resumed run)."""
        self.progress.start(units=units, done=done, resumed=self.resumed)

    def record(self, outcome: Outcome) -> bool:
        """Store an outcome and tell the progress; False (and untold) when the case was stored already."""
        if not self.store.add(self.run.id, outcome):
            return False
        self.progress.outcome(outcome)
        return True

    def unit_begun(self, unit: Unit) -> set[str]:
        """Mark ``unit`` running; the ids of its cases stored already (a unit cut off by a kill resumes after them)."""
        self.store.unit_state(self.run.id, unit, "running")
        return self.store.cases_done(self.run.id, unit)

    def unit_done(self, unit: Unit, state: str = "done", detail: str = "") -> None:
        self.store.unit_state(self.run.id, unit, state, detail)
        self.progress.unit_done(unit)

    def note(self, kind: str, detail: str) -> None:
        self.store.note(self.run.id, kind, detail)


@contextlib.contextmanager
def run_frame(config: RunConfig, *, db: str | Path, progress: Progress | None = None, out: str | Path | None = None,
              json: str | Path | None = None, junit: str | Path | None = None, scripts: outputs.Scripts | None = None,
              started: float | None = None) -> Iterator[Frame]:
    """A run of ``config`` in the store at ``db``, started or resumed; ``frame.result`` after, its outputs written.

    ``out``, ``json``, ``junit``: where the repro scripts (``scripts`` writes
    them; default the op scripts), the findings file and JUnit XML go, each
    only when given. ``started``: when the run's work began
    (``time.monotonic()``), if before the frame opened.
    """
    import torch

    outputs.check(out=out, json=json, junit=junit)
    progress = progress or Silent()
    store = Store(db)
    try:
        run, resumed = store.start(config, torch_version=torch.__version__, version=_version.__version__)
        frame = Frame(store=store, run=run, resumed=resumed, progress=progress)
        started = time.monotonic() if started is None else started
        try:
            yield frame
        finally:
            store.add_seconds(run.id, time.monotonic() - started)
            store.commit()
            progress.finish()
        store.finish(run.id)
        stored = result(store, run.id, resumed=resumed)
        rows = store.outcome_rows(run.id) if junit else ()  # JUnit lists every case, which only the store holds
        written = outputs.write_outputs(stored, out=out, json=json, junit=junit, rows=rows, scripts=scripts)
        written["database"] = f"{db} (run {run.id})"
        frame.result = dataclasses.replace(stored, written=written)
    finally:
        store.close()


def pool_callbacks(frame: Frame) -> Callbacks:
    """What a pool reports, into the frame's run: outcomes, crashes and hangs as findings, units begun and done."""
    return Callbacks(
        skip_for=frame.unit_begun,
        on_outcome=lambda unit, outcome: frame.record(outcome),
        on_failed=lambda unit, case_id, kind, how, call: frame.record(isolation_outcome(Case.parse(case_id), kind, how, call)),
        on_collateral=lambda unit, case_id, how: frame.note("collateral", f"{case_id}: a worker died during it, but {how}"),
        on_unit_done=frame.unit_done,
        on_note=lambda unit, note: frame.note(note.partition(" ")[0], f"{unit.key} {note.partition(' ')[2]}"),
    )


def worker_log(db: str | Path) -> str:
    """Where workers' own output goes: beside the database, ``runs.db`` -> ``runs.workers.log``."""
    db = Path(db)
    return str(db.with_name(db.stem + ".workers.log"))


def result(store: Store, run_id: int, *, resumed: bool = False) -> SweepResult:
    """A run as stored (every command's), its findings grouped; nothing written."""
    run = store.run(run_id)
    statuses = dict(store.status_counts(run_id))
    reasons = {status: dict(store.reasons(run_id, status)) for status in ("skip", "raised", "error") if statuses.get(status)}
    shrunk = store.shrunk(run_id)
    findings, aside = grouping.split(store.findings(run_id), shrunk)
    groups = grouping.group(findings, shrunk, store.diagnoses(run_id), merge=run.command == "check")
    flaky = [f for f in aside if shrunk[f.id].status == "flaky"]
    internal = [shrunk[f.id].reported(f) for f in aside if shrunk[f.id].status == "internal"]
    return SweepResult(
        run=run, resumed=resumed, statuses=statuses, reasons=reasons,
        failed_units=tuple(store.failed_units(run_id)), notes=tuple(store.notes(run_id)), findings=tuple(findings), seconds=run.seconds,
        groups=tuple(groups), shrunk=shrunk,
        flaky=tuple(flaky), internal=tuple(internal), coverage=coverage_of(store, run),
    )
