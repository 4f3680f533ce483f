"""``sweep``: the ops pipeline end to end, as a function; and the run frame every command's run goes through.

Design note. The parent process plans the units (one per op and dtype the op
supports on the device), opens or resumes the run in the store, and hands the
units not yet finished to the worker pool, costliest first by the store's
earlier runs (store.costs; run.pool; with ``executor="ray"``
Ray tasks on a cluster, run.ray_pool, which means the same). Each worker runs
``engine.run_unit`` (cases -> run -> judge) and streams outcomes back; the
parent stores them and tells the progress display. A worker that dies or
hangs becomes a ``crash`` or ``hang`` finding for the case it was running,
and the pool carries on. Then the shrink stage (shrink.stage) minimises
every finding and diagnoses every group, in the same pool. With ``workers=0`` everything runs in this process:
no isolation, but kernels registered in this process (``torch.library``)
are seen, which is what tests and ``torchsleuth.check`` want.

The run frame (``run_frame``) is what ops, optim, shard and watch share.
It checks the output paths, opens the store, starts the run or resumes the
unfinished one with the same key (``config.RunConfig``), and hands the
command a ``Frame`` to record outcomes, finished units and notes through,
each told to the one ``Progress``. On the way out it adds the seconds and
commits; when the command's body finished, it marks the run finished, reads
it back (``result``) and writes the outputs asked for (report.outputs), so a
caller from Python gets the files the command line writes. A body that
raises (a kill, ^C) leaves the run unfinished with what it stored: the same
call resumes it, and nothing is counted twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import _version, devices
from .cases import opinfo, select, unreached
from .cases.records import Case, Unit
from .config import RunConfig, SweepConfig
from .engine import describe, device_works, run_unit
from .judge.isolation import isolation_outcome
from .judge.plugin import BUILTIN, Registry
from .judge.records import Finding, Outcome
from .report import groups as grouping, outputs, repro
from .report.groups import Group
from .run.imports import load_imports
from .run import edits
from .run.dispatch import Callbacks
from .run.shares import after_hang_share, first_share, searched_share
from .run.pool import DeviceUnavailable, Pool
from .run.ray_pool import RayPool
from .run.starts import begin, default_start
from .shrink import stage
from .shrink.records import Shrunk
from .store import costs
from .store.coverage import Coverage, of_run as coverage_of
from .store.sqlite import RunInfo, Store


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
    findings: tuple[Finding, ...]  # as found (flaky ones left out); reported() gives the shrunk version
    seconds: float  # wall time of this run, over every resumption
    groups: tuple[Group, ...] = ()
    shrunk: dict[str, Shrunk] = field(default_factory=dict)  # finding id -> its shrinking
    flaky: tuple[Finding, ...] = ()  # findings that did not recur on replay: not reported as bugs
    written: dict[str, str] = field(default_factory=dict)  # what was written where ("findings file" -> path), as the summary lists it
    coverage: Coverage = Coverage()  # kernel coverage: aten overloads found and reached per op (store.coverage)

    def reported(self, finding: Finding) -> Finding:
        """The finding as reported: shrunk when it was (its repro is written from this)."""
        shrunk = self.shrunk.get(finding.id)
        return finding if shrunk is None else shrunk.reported(finding)

    @property
    def cases(self) -> int:
        return sum(self.statuses.values())


# --- the run frame -------------------------------------------------------------------------


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


# --- the ops sweep ---------------------------------------------------------------------------


def _work(item, config: SweepConfig, skip: frozenset[str], only: str | None, *, oracles: Registry = BUILTIN):
    """A worker's work: a unit of the sweep, or a job of the shrink stage."""
    load_imports(config.imports)  # once per process
    if isinstance(item, Unit):
        return run_unit(item, config, skip, only=only, oracles=oracles)
    return stage.work(item, config, skip, only, oracles=oracles)


def warm(config: SweepConfig) -> None:
    """What a worker does before its first unit, so that a spare is ready when it is needed: OpInfo's catalog loaded,
    the user's imports made, the device's context made (by the probe kernel engine.device_works runs). A worker whose
    device cannot run that kernel judges nothing: ``DeviceUnavailable`` (the pool fails its unit, saying why)."""
    load_imports(config.imports)
    opinfo.catalog()
    if not device_works(config.device):
        raise DeviceUnavailable(f"this worker cannot run a kernel on {config.device}")


def _describe(item, config: SweepConfig, case_id: str):
    return describe(item, config, case_id) if isinstance(item, Unit) else None


# What the pool's fork server imports before run.preload: this module, which unpickling the work function imports.
PRELOAD = (__name__,)


def begin_workers(device: str, workers: int, executor: str = "local") -> None:
    """Start the local pool's fork server now (run.starts.begin), where the sweep will have one: it imports torch and
    loads OpInfo's catalog while the caller goes on (`torchsleuth ops` resolving its ops, the sweep planning its units).
    A bad ``$TORCHSLEUTH_WORKER_START`` is a UsageError here."""
    if workers and executor != "ray":
        begin(default_start(device), PRELOAD)


# A selection of at most this many ops is a pointed run: the user asks about these ops, so it goes deep.
POINTED_OPS = 8
# Searched cases per op and dtype in a catalog run (bench/search-cost.md: what it costs).
CATALOG_BUDGET = 4


def depth(config: SweepConfig, *, deep: bool, given: set[str] = frozenset(), oracles: Registry = BUILTIN) -> SweepConfig:
    """``config`` at the depth its question asks for; settings named in ``given`` (the user chose them) are kept.

    Deep (a run pointed at a few ops): every sample, the cheap oracles, every search the config names with no budget,
    the dtypes the ops do not declare probed, and, with the ``overloads`` search, the overloads of the ops' packets
    their samples never reach, swept from their schema (``cases.unreached``).
    Catalog: the config's samples, no oracle but those asked for, the searches and the cases of the sampled oracles
    (``Oracle.sampled``) within ``CATALOG_BUDGET`` cases per op and dtype.
    """
    changes: dict = {}
    if deep:
        if "samples" not in given:
            changes["samples"] = 0
        if "oracles" not in given:
            changes["oracles"] = (*oracles.of_cost("cheap"), *(o for o in config.oracles if o not in oracles.of_cost("cheap")))
        if "budget" not in given:
            changes["budget"], changes["budget_seconds"] = 0, 0.0
        if "probe_dtypes" not in given:
            changes["probe_dtypes"] = True
        if "overloads" in config.search:
            changes["ops"] = unreached.with_unreached(config.ops)
    else:
        if "oracles" not in given:  # the sampled oracles not asked for: a share of the budget
            changes["sampled"] = tuple(o for o in oracles.sampled() if o not in config.oracles)
        if "budget" not in given and (config.search or changes.get("sampled", config.sampled)):
            changes["budget"] = CATALOG_BUDGET
    return dataclasses.replace(config, **changes)


def sweep(config: SweepConfig, *, db: str | Path, progress: Progress | None = None, oracles: Registry = BUILTIN,
          out: str | Path | None = None, json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult:
    """Sweep ``config``, storing into ``db``; ``oracles`` is the registry of the oracle plug-ins ``config.oracles`` names.

    ``out`` gets a repro script per finding (``out/repros``), ``json`` the
    findings file, ``junit`` JUnit XML; ``result.written`` says what went where.
    Rerun after a kill, the same call resumes the unfinished run.
    """
    begin_workers(config.device, config.workers, config.executor)  # before anything is stored; loads while units are planned
    scripts = functools.partial(repro.write_scripts, oracles=oracles, imports=config.imports)
    with run_frame(config, db=db, progress=progress, out=out, json=json, junit=junit, scripts=scripts) as frame:
        units = select.units(config.ops, config.dtypes, config.device, probe=config.probe_dtypes)
        if not frame.resumed:
            _note_unswept(frame, config.ops, units)
            by_overloads: dict[tuple[str, ...], list[str]] = {}  # norm, norm.fro, norm.inf: one packet, one note
            for op, overloads in unreached.added(config.ops).items():
                by_overloads.setdefault(overloads, []).append(op)
            for overloads, named in by_overloads.items():
                frame.note("overloads", f"{', '.join(named)}: no sample reaches {', '.join(overloads)}; swept from their schema")
        finished = frame.store.finished_units(frame.run.id)
        todo = [u for u in units if u.key not in finished]
        frame.start(units=len(units), done=len(units) - len(todo))
        pool = _pool(config, db, oracles) if config.workers else None  # one pool for the sweep and its shrink stage
        if pool is not None:  # the costliest units first, so that none is left running alone at the end (store.costs)
            todo = costs.order(todo, frame.store.db, config.device)
        try:
            _execute(config, frame, todo, pool, oracles)
            if pool is not None and pool.outcomes:  # which executor ran how many cases, on which nodes
                frame.note("executor", pool.where())
            if config.shrink:
                shrink_run(config, frame.store, frame.run.id, frame.progress, pool=pool, oracles=oracles)
        finally:
            if pool is not None:
                pool.close()
    done = frame.result
    log = Path(worker_log(db))
    if log.is_file() and log.stat().st_size:
        shown = f"{log} (what kernels printed: device asserts, crash traces)"
        done = dataclasses.replace(done, written={**done.written, "worker output": shown})
    return done


def _note_unswept(frame: Frame, ops: tuple[str, ...], units: list[Unit]) -> None:
    """A note for each op that makes no unit for a reason its entry gives (an overload no generated call works for)."""
    for op in sorted(set(ops) - {u.op for u in units}):
        why = getattr(opinfo.get(op), "reason", "")
        if why:
            frame.note("not swept", f"{op}: {why}")


def _execute(config: SweepConfig, frame: Frame, todo: list[Unit], pool: Pool | None, oracles: Registry) -> None:
    if pool is None:
        load_imports(config.imports)
        for unit in todo:
            stored = frozenset(frame.unit_begun(unit))
            try:
                for kind, payload in run_unit(unit, config, stored, oracles=oracles):
                    if kind == "outcome":
                        frame.record(payload)
                    elif kind == "note":
                        frame.note(payload.partition(" ")[0], f"{unit.key} {payload.partition(' ')[2]}")
            except Exception as e:
                frame.unit_done(unit, "failed", f"{type(e).__name__}: {e}")
                continue
            frame.unit_done(unit)
        return
    pool.timeout = config.timeout
    pool.run(todo, close=False, callbacks=pool_callbacks(frame))


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


def shrink_run(config: SweepConfig, store: Store, run_id: int, progress: Progress | None = None, *, pool: Pool | None = None,
               oracles: Registry = BUILTIN) -> None:
    """The shrink stage: minimise every finding, then diagnose every group (shrink.stage).

    In ``pool`` when given (the sweep's, whose workers are up already); else in
    a pool of its own, closed at the end (none with ``workers=0``).
    """
    step = progress.step if progress is not None else None
    own = pool is None and config.workers > 0
    if own:
        pool = _pool(config, store.path, oracles)
    try:
        stage.shrink_findings(config, store, run_id, step=step, pool=pool, oracles=oracles)
        findings, groups = grouping.of_run(store, run_id)
        stage.diagnose_groups(config, store, run_id, groups, findings, step=step, pool=pool, oracles=oracles)
    finally:
        if own:
            pool.close()


def _shareable(item) -> bool:
    """Whether the pool may split an item's rest among idle workers (run.dispatch): a unit, not a shrink job."""
    return isinstance(item, Unit)


def _pool(config: SweepConfig, db: str | Path, oracles: Registry) -> Pool | RayPool:
    """One pool for a sweep and its shrink stage, local or Ray (``config.executor``); an oracle's case may take its
    ``slower`` times the timeout."""
    work, options = functools.partial(_work, oracles=oracles), dict(workers=config.workers, timeout=config.timeout, threads=config.threads,
                                                                    log=worker_log(db), slower=oracles.slower, share=_shareable)
    if config.executor == "ray":  # a Ray task is a process Ray keeps; it is not replaced as a local worker is
        return RayPool(work, _describe, config, address=config.ray_address, **options)
    outside, remark = devices.outside_mps(config.device), ""
    if outside is None and config.workers > 1:  # one worker's device fault would end the others' cases (devices.outside_mps)
        options["workers"] = 1
        remark = "one worker: the GPU's NVIDIA MPS server holds it exclusively, and under MPS one worker's device fault ends the others' cases"
    return Pool(work, _describe, config, warm=warm, pins=[devices.pinned(i) for i in config.gpus], first=first_share(config.device),
                searched=searched_share(config.device), after_hang=after_hang_share(config.device), start=default_start(config.device),
                preload=PRELOAD, kin=edits.kin, environ=outside, remark=remark, **options)


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
    findings, flaky = grouping.split(store.findings(run_id), shrunk)
    groups = grouping.group(findings, shrunk, store.diagnoses(run_id))
    return SweepResult(
        run=run, resumed=resumed, statuses=statuses, reasons=reasons,
        failed_units=tuple(store.failed_units(run_id)), notes=tuple(store.notes(run_id)), findings=tuple(findings), seconds=run.seconds,
        groups=tuple(groups), shrunk=shrunk,
        flaky=tuple(flaky), coverage=coverage_of(store, run),
    )
