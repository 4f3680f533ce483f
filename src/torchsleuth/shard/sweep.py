"""``shard.sweep``: the shard matrix end to end, into the store; then shrinking, the gloo cross-check and outputs.

Design note. The matrix runs unit by unit (op, dtype), as ``torchsleuth
ops`` and ``optim`` store theirs: each case one ``Outcome`` keyed by its id,
so a killed run resumes where it stopped and nothing is counted twice.
LocalTensorMode simulates every mesh in the process that runs the case, so
with ``workers`` the units are spread over the ops sweep's worker pool
(run.pool: a case that kills or hangs its worker is recorded as such, the
rest of its unit goes on in a fresh one); with none they run here. An op
DTensor has no sharding rule for is learnt from its first case; its other
cases of that variant, in that process, are skips with the same reason,
not run again.

After the matrix: every finding is shrunk (shrink.py) and the result stored
as the ops shrink stage stores it, so the findings file and repro scripts
show the shrunk case; then, unless ``gloo`` is 0, a sample of the cases
judged is replayed on real gloo process groups (gloo.py), and each
disagreement with the simulator becomes a ``simulator_mismatch`` finding of
its own, stored with a note. The result is read back from the store
(``torchsleuth.sweep.result``), so the terminal summary, the findings file
and ``report``/``diff`` show a shard run as they show an ops run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from .. import _version
from ..cases.records import Case
from ..judge.records import Outcome
from ..report import findings_file, groups as grouping
from ..store.sqlite import Store
from ..sweep import SweepResult, load_imports, result as stored_result
from . import cases as shard_cases, judge, repro, run as running, shrink as shrinking
from .cases import ShardConfig
from .world import Simulated


class Progress(Protocol):
    def start(self, *, units: int, done: int, resumed: bool) -> None: ...  # units (op, dtype) in all and done
    def outcome(self, outcome: Outcome) -> None: ...
    def unit_done(self, unit) -> None: ...
    def step(self, name: str, done: int, total: int) -> None: ...
    def finish(self) -> None: ...


class _Silent:
    def start(self, *, units, done, resumed): pass
    def outcome(self, outcome): pass
    def unit_done(self, unit): pass
    def step(self, name, done, total): pass
    def finish(self): pass


def run_case(case: Case, world=None) -> Outcome:
    """One case, simulated (or in ``world``), judged: the sweep's, the shrinker's and the tests' entry point."""
    world = world or Simulated(shard_cases.mesh_of(case), case.device)
    started = time.monotonic()
    try:
        ran = running.run(case, world)
        return judge.outcome(case, ran, blame=lambda: running.run(case, _fresh(world, case), blame=True),
                             seconds=time.monotonic() - started)
    except Exception as e:  # a bug in torchsleuth, not in DTensor: shown apart, the sweep goes on
        return Outcome(case=case, status="error", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                       seconds=time.monotonic() - started)


def _fresh(world, case):
    return world if world.real else Simulated(shard_cases.mesh_of(case), case.device)


# What this process learnt: (op, variant) -> why DTensor has no rule for it.
_UNSUPPORTED: dict[tuple, str] = {}


def unit_events(unit, config: ShardConfig, skip: frozenset[str] = frozenset(), only: str | None = None):
    """A unit's cases run and judged: ``("begin", id)`` before each, ``("outcome", Outcome)`` after (run.pool's protocol)."""
    if not getattr(unit_events, "ready", False):  # once per process
        quiet_dtensor()
        load_imports(config.imports)
        unit_events.ready = True
    for case in shard_cases.plan(unit, config):
        if case.id in skip or (only is not None and case.id != only):
            continue
        yield "begin", case.id
        known = _UNSUPPORTED.get((case.op, case.variant))
        if known:
            outcome = Outcome(case=case, status="skip", reason=known)
        else:
            outcome = run_case(case)
            if outcome.status == "skip" and "has no sharding rule" in outcome.reason:
                _UNSUPPORTED[(case.op, case.variant)] = outcome.reason
        yield "outcome", outcome


def _no_description(unit, config, case_id):
    return None  # a case that killed its worker is named by its id (placements, mesh) alone


def sweep(config: ShardConfig, *, db: str | Path, progress: Progress | None = None) -> SweepResult:
    import torch

    progress = progress or _Silent()
    store = Store(db)
    try:
        run, resumed = store.start(config, torch_version=torch.__version__, version=_version.__version__)
        units = shard_cases.units(config)
        finished = store.finished_units(run.id)
        progress.start(units=len(units), done=sum(u.key in finished for u in units), resumed=resumed)
        started = time.monotonic()
        try:
            _matrix(config, store, run.id, [u for u in units if u.key not in finished], progress)
            quiet_dtensor()
            load_imports(config.imports)
            if config.shrink:
                shrink_run(store, run.id, progress)
            if config.gloo and config.backend == "local":
                from . import gloo

                gloo.cross_check_run(config, store, run.id, progress)
        finally:
            store.add_seconds(run.id, time.monotonic() - started)
            store.commit()
            progress.finish()
        store.finish(run.id)
        return stored_result(store, run.id, resumed=resumed)
    finally:
        store.close()


def _matrix(config: ShardConfig, store: Store, run_id: int, todo: list, progress: Progress) -> None:
    def record(outcome: Outcome) -> None:
        if store.add(run_id, outcome):
            progress.outcome(outcome)

    def unit_done(unit, state: str = "done", detail: str = "") -> None:
        store.unit_state(run_id, unit, state, detail)
        progress.unit_done(unit)

    if not config.workers:
        for unit in todo:
            store.unit_state(run_id, unit, "running")
            for kind, payload in unit_events(unit, config, frozenset(store.cases_done(run_id, unit))):
                if kind == "outcome":
                    record(payload)
            unit_done(unit)
        return
    from ..run.pool import Pool
    from ..sweep import pool_callbacks, worker_log

    pool = Pool(unit_events, _no_description, config, workers=config.workers, timeout=config.timeout, threads=config.threads,
                log=worker_log(store.path))
    pool.run(todo, callbacks=pool_callbacks(store, run_id, record, unit_done))


def quiet_dtensor() -> None:
    """DTensor's advice a sweep would print thousands of times, on purpose: quiet.

    It logs every 2-D redistribution made in two steps, and warns on every
    one-element tensor it replicates implicitly (samples have many).
    """
    import logging
    import warnings

    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1", category=UserWarning)


def shrink_run(store: Store, run_id: int, progress=None) -> None:
    """Shrink every finding of the run not shrunk yet; each result stored at once (a kill resumes here)."""
    done = store.shrunk(run_id)
    todo = [f for f in store.findings(run_id) if f.id not in done and f.kind == "sharding_mismatch"]
    for i, finding in enumerate(todo):
        store.add_shrunk(run_id, shrinking.shrink(finding, run_case))
        if progress is not None:
            progress.step("shrinking", i + 1, len(todo))


def write_outputs(result: SweepResult, config: ShardConfig, *, out: str | Path, json_path: str | None) -> tuple[list, dict[str, str]]:
    """Repro scripts into ``out/repros`` and, when asked, the findings file; returns the groups and what went where."""
    groups = list(result.groups) or grouping.group(result.findings)
    reported = [result.reported(f) for f in result.findings]
    written: dict[str, str] = {}
    paths: dict[str, Path] = {}
    if reported:
        paths = repro.write_scripts(reported, config, out)
        written["repro scripts"] = str(Path(out) / "repros")
    if json_path:
        findings_file.write(
            json_path, command=result.run.command, device=result.run.device, torch_version=result.run.torch,
            cases=result.cases, seconds=result.seconds, findings=reported, groups=groups, repro_paths=paths,
            found_as={f.id: f.case_id for f in result.findings}, flaky=result.flaky,
        )
        written["findings file"] = json_path
    return groups, written
