"""``sweep``: the ops pipeline end to end, as a function (the CLI is a thin layer over it).

Design note. The parent process plans the units (one per op and dtype the op
supports on the device), opens or resumes the run in the store, and hands the
units not yet finished to the worker pool. Each worker runs
``engine.run_unit`` (cases -> run -> judge) and streams outcomes back; the
parent stores them and tells the progress display. A worker that dies or
hangs becomes a ``crash`` or ``hang`` finding for the case it was running,
and the pool carries on. Then the shrink stage (shrink.stage) minimises
every finding and diagnoses every group, in the same pool. With ``workers=0`` everything runs in this process:
no isolation, but kernels registered in this process (``torch.library``)
are seen, which is what tests and ``torchsleuth.check`` want.
"""

from __future__ import annotations

import importlib
import runpy
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Protocol

from . import _version, deep
from .cases import select
from .cases.records import Case, Unit
from .config import SweepConfig
from .engine import describe, run_unit
from .judge.isolation import isolation_outcome
from .judge.records import Finding, Outcome
from .report import groups as grouping
from .report.groups import Group
from .run.pool import Callbacks, Pool
from .shrink import stage
from .shrink.records import Shrunk
from .store.sqlite import RunInfo, Store


class Progress(Protocol):
    def start(self, *, units: int, done: int, resumed: bool) -> None: ...
    def outcome(self, outcome: Outcome) -> None: ...
    def unit_done(self, unit: Unit) -> None: ...
    def finish(self) -> None: ...


class _Silent:
    def start(self, *, units, done, resumed): pass
    def outcome(self, outcome): pass
    def unit_done(self, unit): pass
    def finish(self): pass


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepResult:
    run: RunInfo
    resumed: bool
    statuses: dict[str, int]
    reasons: dict[str, dict[str, int]]  # status -> reason -> count, for skip, raised, error
    failed_units: tuple[tuple[str, str], ...]
    notes: tuple[tuple[str, str], ...]  # (kind, detail): worker deaths not reproduced alone
    findings: tuple[Finding, ...]  # as found (flaky ones left out); reported() gives the shrunk version
    seconds: float  # wall time of this run, over every resumption
    groups: tuple[Group, ...] = ()
    shrunk: dict[str, Shrunk] = field(default_factory=dict)  # finding id -> its shrinking
    flaky: tuple[Finding, ...] = ()  # findings that did not recur on replay: not reported as bugs

    def reported(self, finding: Finding) -> Finding:
        """The finding as reported: shrunk when it was (its repro is written from this)."""
        shrunk = self.shrunk.get(finding.id)
        return finding if shrunk is None else shrunk.reported(finding)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())


# What each --import loaded, kept for the life of the process (a .py file's
# globals: a torch.library.Library held only by a file's top level unregisters
# its kernels when it is collected); each is loaded once per process.
_IMPORTED: dict[str, object] = {}


def load_imports(imports: tuple[str, ...]) -> None:
    """Import the user's modules (custom kernels, backends) before any case runs, each once."""
    for name in imports:
        if name not in _IMPORTED:
            _IMPORTED[name] = runpy.run_path(name, run_name="__torchsleuth_import__") if name.endswith(".py") else importlib.import_module(name)


def _work(item, config: SweepConfig, skip: frozenset[str], only: str | None):
    """A worker's work: a unit of the sweep, or a job of the shrink stage."""
    if not getattr(_work, "loaded", False):
        load_imports(config.imports)
        _work.loaded = True
    if isinstance(item, Unit):
        return run_unit(item, config, skip, only=only)
    return stage.work(item, config, skip, only)


def _describe(item, config: SweepConfig, case_id: str):
    return describe(item, config, case_id) if isinstance(item, Unit) else None


def sweep(config: SweepConfig, *, db: str, progress: Progress | None = None) -> SweepResult:
    import torch

    progress = progress or _Silent()
    store = Store(db)
    try:
        run, resumed = store.start(config, torch_version=torch.__version__, version=_version.__version__)
        units = select.units(config.ops, config.dtypes, config.device)
        finished = store.finished_units(run.id)
        todo = [u for u in units if u.key not in finished]
        progress.start(units=len(units), done=len(units) - len(todo), resumed=resumed)
        started = time.monotonic()
        pool = None
        if config.workers:  # one pool for the sweep and its shrink stage
            pool = Pool(_work, _describe, config, workers=config.workers, timeout=config.timeout, threads=config.threads, log=worker_log(store.path),
                        slower=deep.slower)
        try:
            _execute(config, store, run, todo, progress, pool)
            if config.shrink:
                shrink_run(config, store, run.id, progress, pool=pool)
        finally:
            if pool is not None:
                pool.close()
            store.add_seconds(run.id, time.monotonic() - started)
            store.commit()
            progress.finish()
        store.finish(run.id)
        return result(store, run.id, resumed=resumed)
    finally:
        store.close()


def _execute(config: SweepConfig, store: Store, run: RunInfo, todo: list[Unit], progress: Progress, pool: Pool | None) -> None:
    def record(outcome: Outcome) -> None:
        if store.add(run.id, outcome):
            progress.outcome(outcome)

    def unit_done(unit: Unit, state: str = "done", detail: str = "") -> None:
        store.unit_state(run.id, unit, state, detail)
        progress.unit_done(unit)

    if config.workers == 0:
        load_imports(config.imports)
        for unit in todo:
            store.unit_state(run.id, unit, "running")
            try:
                for kind, payload in run_unit(unit, config, frozenset(store.cases_done(run.id, unit))):
                    if kind == "outcome":
                        record(payload)
            except Exception as e:
                unit_done(unit, "failed", f"{type(e).__name__}: {e}")
                continue
            unit_done(unit)
        return

    pool.timeout = config.timeout
    pool.run(todo, close=False, callbacks=pool_callbacks(store, run.id, record, unit_done))


def pool_callbacks(store: Store, run_id: int, record: Callable[[Outcome], None], unit_done: Callable[..., None]) -> Callbacks:
    """What a pool reports, into the store: outcomes, crashes and hangs as findings, units begun and done."""

    def skip_for(unit) -> set[str]:
        store.unit_state(run_id, unit, "running")
        return store.cases_done(run_id, unit)

    return Callbacks(
        skip_for=skip_for,
        on_outcome=lambda unit, outcome: record(outcome),
        on_failed=lambda unit, case_id, kind, how, call: record(isolation_outcome(Case.parse(case_id), kind, how, call)),
        on_collateral=lambda unit, case_id, how: store.note(run_id, "collateral", f"{case_id}: a worker died during it, but {how}"),
        on_unit_done=lambda unit, state, detail: unit_done(unit, state, detail),
    )


def shrink_run(config: SweepConfig, store: Store, run_id: int, progress: Progress | None = None, *, pool: Pool | None = None) -> None:
    """The shrink stage: minimise every finding, then diagnose every group (shrink.stage).

    In ``pool`` when given (the sweep's, whose workers are up already); else in
    a pool of its own, closed at the end (none with ``workers=0``).
    """
    step = getattr(progress, "step", None)
    own = pool is None and config.workers > 0
    if own:
        pool = Pool(_work, _describe, config, workers=config.workers, timeout=config.timeout, threads=config.threads, log=worker_log(store.path),
                        slower=deep.slower)
    try:
        stage.shrink_findings(config, store, run_id, step=step, pool=pool)
        findings, groups = grouping.of_run(store, run_id)
        stage.diagnose_groups(config, store, run_id, groups, findings, step=step, pool=pool)
    finally:
        if own:
            pool.close()


def worker_log(db: str | Path) -> str:
    """Where workers' own output goes: beside the database, ``runs.db`` -> ``runs.workers.log``."""
    db = Path(db)
    return str(db.with_name(db.stem + ".workers.log"))


def result(store: Store, run_id: int, *, resumed: bool = False) -> SweepResult:
    run = store.run(run_id)
    statuses = dict(store.status_counts(run_id))
    reasons = {status: dict(store.reasons(run_id, status)) for status in ("skip", "raised", "error") if statuses.get(status)}
    shrunk = store.shrunk(run_id)
    findings, flaky = grouping.split(store.findings(run_id), shrunk)
    groups = grouping.group(findings, shrunk, store.diagnoses(run_id))
    return SweepResult(
        run=run, resumed=resumed, statuses=statuses, reasons=reasons,
        failed_units=tuple(store.failed_units(run_id)), notes=tuple(store.notes(run_id)), findings=tuple(findings), seconds=run.seconds,
        groups=tuple(groups), shrunk=shrunk,
        flaky=tuple(flaky),
    )
