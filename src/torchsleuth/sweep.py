"""``sweep``: the ops pipeline end to end, as a function.

Design note. The parent process plans the units (one per op and dtype the op
supports on the device), opens or resumes the run in the store through the
run frame (``frame.run_frame``, which every command shares), and hands the
units not yet finished to the worker pool, costliest first by the store's
earlier runs (store.costs; workers.pool; with ``executor="ray"`` Ray tasks on
a cluster, workers.ray_pool, which means the same). Each worker runs
``engine.run_unit`` (cases -> run -> judge) and streams outcomes back; the
parent stores them and tells the progress display. A worker that dies or
hangs becomes a ``crash`` or ``hang`` finding for the case it was running,
and the pool carries on. Then, on a device where a bad index asserts, a share
of the cases whose values the CPU refuses is sent to the device after all
(shrink.refusals: a kernel that returns there is a finding). Then the shrink
stage (shrink.stage) minimises every finding and diagnoses every group, in the
same pool; between the two, each crash group's standalone script is run
(shrink.attribute): a crash no script of its own reproduces is torchsleuth's,
not the op's. With
``workers=0`` everything runs in this process: no isolation, but kernels
registered in this process (``torch.library``) are seen, which is what tests
and ``torchsleuth.check`` want.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

from . import devices
from .cases import opinfo, select, unreached
from .cases.records import Unit
from .config import SweepConfig
from .devices import works as device_works
from .engine import describe, run_unit
from .frame import Frame, Progress, SweepResult, pool_callbacks, run_frame, worker_log
from .judge.plugin import BUILTIN, Registry
from .report import groups as grouping, repro
from .run import deadline
from .run.imports import load_imports
from .search import edits, registry as search_registry
from .shrink import attribute, refusals, stage
from .store import costs
from .store.sqlite import Store
from .workers.records import Settings, Work
from .workers.pool import DeviceUnavailable, Pool
from .workers.ray_pool import RayPool
from .workers.shares import after_hang_share, first_share, searched_share
from .workers.starts import begin, default_start


def _work(item, config: SweepConfig, skip: frozenset[str], only: str | None, *, oracles: Registry = BUILTIN):
    """A worker's work: a unit of the sweep, or a job of the shrink stage."""
    load_imports(config.imports)  # once per process
    if isinstance(item, Unit):
        return run_unit(item, config, skip, only=only, oracles=oracles)
    if isinstance(item, refusals.Replay):
        return refusals.work(item, config, skip, only, oracles=oracles)
    return stage.work(item, config, skip, only, oracles=oracles)


def warm(config: SweepConfig) -> None:
    """What a worker does before its first unit, so that a spare is ready when it is needed: OpInfo's catalog loaded,
    the user's imports made, the device's context made (by the probe kernel devices.works runs). A worker whose
    device cannot run that kernel judges nothing: ``DeviceUnavailable`` (the pool fails its unit, saying why)."""
    load_imports(config.imports)
    opinfo.catalog()
    if not device_works(config.device):
        raise DeviceUnavailable(f"this worker cannot run a kernel on {config.device}")


def _describe(item, config: SweepConfig, case_id: str):
    return describe(item, config, case_id) if isinstance(item, (Unit, refusals.Replay)) else None


# What the pool's fork server imports before workers.preload: this module, which unpickling the work function imports.
PRELOAD = (__name__,)


def begin_workers(device: str, workers: int, executor: str = "local") -> None:
    """Start the local pool's fork server now (workers.starts.begin), where the sweep will have one: it imports torch and
    loads OpInfo's catalog while the caller goes on (`torchsleuth ops` resolving its ops, the sweep planning its units).
    A bad ``$TORCHSLEUTH_WORKER_START`` is a UsageError here."""
    if workers and executor != "ray":
        begin(default_start(device), PRELOAD)


# A selection of at most this many ops is a pointed run: the user asks about these ops, so it goes deep.
POINTED_OPS = 8
# Searched cases per op and dtype in a catalog run (bench/search-cost.md: what it costs).
CATALOG_BUDGET = 4
# Cases per op and dtype whose values the CPU refuses sent to a device where a bad index asserts (shrink.refusals): in a
# pointed run, and in a catalog run.
POINTED_REFUSALS = 16
CATALOG_REFUSALS = 4
# The seconds a pointed run aims to end within (run.deadline: past its sweep's share, oracle and searched cases are left
# out and counted); a catalog run has its budget instead.
POINTED_SECONDS = 120.0


def depth(config: SweepConfig, *, deep: bool, given: set[str] = frozenset(), oracles: Registry = BUILTIN) -> SweepConfig:
    """``config`` at the depth its question asks for; settings named in ``given`` (the user chose them) are kept.

    Deep (a run pointed at a few ops): every sample, the cheap oracles, every search the config names with no budget,
    the dtypes the ops do not declare probed, ``POINTED_REFUSALS`` refused cases per op and dtype sent to a device where
    a bad index asserts (shrink.refusals), ``POINTED_SECONDS`` to end within (run.deadline), and, with the ``overloads``
    search, the overloads of the ops' packets their samples never reach, swept from their schema (``cases.unreached``).
    Catalog: the config's samples, no oracle but those asked for, the searches and the cases of the sampled oracles
    (``Oracle.sampled``) within ``CATALOG_BUDGET`` cases per op and dtype, ``CATALOG_REFUSALS`` refused cases.
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
        if "refusals" not in given:
            changes["refusals"] = POINTED_REFUSALS
        if "time_target" not in given:
            changes["time_target"] = POINTED_SECONDS
        for name in config.search:  # what a search sweeps beside the ops pointed at (Search.pointed_ops)
            widen = search_registry.get(name).pointed_ops
            if widen is not None:
                changes["ops"] = widen(changes.get("ops", config.ops))
    else:
        if "oracles" not in given:  # the sampled oracles not asked for: a share of the budget
            changes["sampled"] = tuple(o for o in oracles.sampled() if o not in config.oracles)
        if "budget" not in given and (config.search or changes.get("sampled", config.sampled)):
            changes["budget"] = CATALOG_BUDGET
        if "refusals" not in given:
            changes["refusals"] = CATALOG_REFUSALS
    return dataclasses.replace(config, **changes)


def sweep(config: SweepConfig, *, db: str | Path, progress: Progress | None = None, oracles: Registry = BUILTIN,
          out: str | Path | None = None, json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult:
    """Sweep ``config``, storing into ``db``; ``oracles`` is the registry of the oracle plug-ins ``config.oracles`` names.

    ``out`` gets a repro script per finding (``out/repros``), ``json`` the
    findings file, ``junit`` JUnit XML; ``result.written`` says what went where.
    Rerun after a kill, the same call resumes the unfinished run.
    """
    begin_workers(config.device, config.workers, config.executor)  # before anything is stored; loads while units are planned
    config = dataclasses.replace(config, deadline=deadline.deadline(config.time_target))  # the run's time target, from now
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
            started = time.monotonic()
            _execute(config, frame, todo, pool, oracles)
            if pool is not None and pool.outcomes:  # which executor ran how many cases, on which nodes
                frame.note("executor", pool.where())
            # no case left that a device fault could disturb: the values the CPU refuses, sent to the device after all
            refusals.replay_refused(config, frame.store, frame.run.id, elapsed=time.monotonic() - started, pool=pool, oracles=oracles)
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


def shrink_run(config: SweepConfig, store: Store, run_id: int, progress: Progress | None = None, *, pool: Pool | None = None,
               oracles: Registry = BUILTIN) -> None:
    """The shrink stage: minimise every finding, run each crash group's ladder (shrink.attribute), then diagnose every
    group (shrink.stage).

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
        attribute.attribute(config, store, run_id, groups, findings, step=step)  # whose each crash is: the op's, or torchsleuth's
        findings, groups = grouping.of_run(store, run_id)
        stage.diagnose_groups(config, store, run_id, groups, findings, step=step, pool=pool, oracles=oracles)
    finally:
        if own:
            pool.close()


def _shareable(item) -> bool:
    """Whether the pool may split an item's rest among idle workers (workers.dispatch): a unit, not a shrink job."""
    return isinstance(item, Unit)


def _pool(config: SweepConfig, db: str | Path, oracles: Registry) -> Pool | RayPool:
    """One pool for a sweep and its shrink stage, local or Ray (``config.executor``); an oracle's case may take its
    ``slower`` times the timeout."""
    work = Work(run=functools.partial(_work, oracles=oracles), describe=_describe, config=config, slower=oracles.slower, share=_shareable)
    settings = Settings(workers=config.workers, timeout=config.timeout, threads=config.threads, log=worker_log(db), deadline=config.deadline)
    if config.executor == "ray":  # a Ray task is a process Ray keeps; it is not replaced as a local worker is
        return RayPool(work, settings, address=config.ray_address)
    outside, remark, workers = devices.outside_mps(config.device), "", config.workers
    if outside is None and config.workers > 1:  # one worker's device fault would end the others' cases (devices.outside_mps)
        workers = 1
        remark = "one worker: the GPU's NVIDIA MPS server holds it exclusively, and under MPS one worker's device fault ends the others' cases"
    return Pool(dataclasses.replace(work, warm=warm, kin=edits.kin), dataclasses.replace(
        settings, workers=workers, pins=tuple(devices.pinned(i) for i in config.gpus), first=first_share(config.device),
        searched=searched_share(config.device), after_hang=after_hang_share(config.device), start=default_start(config.device),
        preload=PRELOAD, environ=outside, remark=remark))
