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
its own, stored with a note. The run goes through the run frame
(``torchsleuth.sweep.run_frame``), as every command's does: the result is
read back from the store and the outputs asked for are written (with this
package's repro scripts), so the terminal summary, the findings file and
``report``/``diff`` show a shard run as they show an ops run.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from ..cases.records import Case
from ..judge.records import Outcome
from ..report import outputs
from ..run.imports import load_imports
from ..run.pool import Pool
from ..store.sqlite import Store
from ..sweep import Frame, Progress, SweepResult, pool_callbacks, run_frame, worker_log
from . import cases as shard_cases, gloo, judge, repro, run as running, shrink as shrinking
from .cases import ShardConfig
from .gloo import quiet_dtensor
from .world import Simulated


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


def sweep(config: ShardConfig, *, db: str | Path, progress: Progress | None = None, out: str | Path | None = None,
          json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult:
    """Run the shard matrix ``config`` selects into the store at ``db``; the run as stored, its outputs written.

    ``out`` gets a repro script per finding (``out/repros``), ``json`` the
    findings file, ``junit`` JUnit XML. Rerun after a kill, the same call resumes.
    """
    with run_frame(config, db=db, progress=progress, out=out, json=json, junit=junit, scripts=scripts(config)) as frame:
        units = shard_cases.units(config)
        finished = frame.store.finished_units(frame.run.id)
        frame.start(units=len(units), done=sum(u.key in finished for u in units))
        _matrix(config, frame, [u for u in units if u.key not in finished])
        quiet_dtensor()
        load_imports(config.imports)
        if config.shrink:
            shrink_run(frame.store, frame.run.id, frame.progress)
        if config.gloo and config.backend == "local":
            gloo.cross_check_run(config, frame.store, frame.run.id, frame.progress)
    return frame.result


def _matrix(config: ShardConfig, frame: Frame, todo: list) -> None:
    if not config.workers:
        for unit in todo:
            for kind, payload in unit_events(unit, config, frozenset(frame.unit_begun(unit))):
                if kind == "outcome":
                    frame.record(payload)
            frame.unit_done(unit)
        return
    pool = Pool(unit_events, _no_description, config, workers=config.workers, timeout=config.timeout, threads=config.threads,
                log=worker_log(frame.store.path))
    pool.run(todo, callbacks=pool_callbacks(frame))


def shrink_run(store: Store, run_id: int, progress=None) -> None:
    """Shrink every finding of the run not shrunk yet; each result stored at once (a kill resumes here)."""
    done = store.shrunk(run_id)
    todo = [f for f in store.findings(run_id) if f.id not in done and f.kind == "sharding_mismatch"]
    for i, finding in enumerate(todo):
        store.add_shrunk(run_id, shrinking.shrink(finding, run_case))
        if progress is not None:
            progress.step("shrinking", i + 1, len(todo))


def scripts(config: ShardConfig) -> outputs.Scripts:
    """The repro script writer of a shard run (report.outputs hands it the findings, as reported, and the folder)."""
    return functools.partial(_write_scripts, config=config)


def _write_scripts(findings, out: Path, *, config: ShardConfig) -> dict[str, Path]:
    return repro.write_scripts(findings, config, out)
