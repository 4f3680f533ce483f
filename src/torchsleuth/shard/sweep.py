"""``shard.sweep``: the shard matrix end to end, into the store; then the reruns on gloo, shrinking and outputs.

Design note. The matrix runs unit by unit (op, dtype), as ``torchsleuth
ops`` and ``optim`` store theirs: each case one ``Outcome`` keyed by its id,
so a killed run resumes where it stopped and nothing is counted twice. It
runs in one of two places:

* simulated (LocalTensorMode, the default where this torch has it): every
  mesh in the process that runs the case, so with ``workers`` the units are
  spread over the ops sweep's worker pool (workers.pool: a case that kills or
  hangs its worker is recorded as such, the rest of its unit goes on in a
  fresh one); with none they run here.
* on real gloo ranks (``on_ranks``: ``--backend gloo`` outside torchrun, or
  a torch without LocalTensorMode): the persistent groups of ranks.py, one
  mesh size at a time (one group alive), every case of every unit of that
  size, each judged here as a simulated case is; a unit is marked done
  after the last size it has cases of.

An op DTensor has no sharding rule for is learnt from its first case; its
other cases of that variant, in that process, are skips with the same
reason, not run again.

After a simulated matrix, every case LocalTensorMode could not judge (an
argument that did not round-trip, a result it could not gather: judge.py's
``RECHECK`` skips) is rerun on real gloo ranks and judged there, stored as
a case of its own (oracle ``shard-gloo:<mesh>``); a round trip's finding is
made then, saying whose bug it is (judge.roundtrip_finding). Then every
finding is shrunk (shrink.py; on the ranks the finding was found on, the
groups kept) and the result stored as the ops shrink stage stores it, so
the findings file and repro scripts show the shrunk case; then, unless
``gloo`` is 0, a sample of the cases judged is replayed on real gloo
process groups (gloo.py), and each disagreement with the simulator becomes
a ``simulator_mismatch`` finding of its own. The run goes through the run frame
(``torchsleuth.frame.run_frame``), as every command's does: the result is
read back from the store and the outputs asked for are written (with this
package's repro scripts), so the terminal summary, the findings file and
``report``/``diff`` show a shard run as they show an ops run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from pathlib import Path

from ..cases.records import Case
from ..judge.records import Outcome
from ..report import groups as groups_of, outputs
from ..shrink.records import Shrunk
from ..run.imports import load_imports
from ..workers.records import Settings, Work
from ..workers.pool import Pool
from ..workers.starts import default_start
from ..store.sqlite import Store
from ..frame import Frame, Progress, SweepResult, pool_callbacks, run_frame, worker_log
from . import cases as shard_cases, gloo, judge, repro, run as running, shrink as shrinking, support
from .cases import ShardConfig
from .ranks import Groups
from .support import quiet_dtensor
from .world import Simulated


def on_ranks(config: ShardConfig) -> bool:
    """Whether the matrix runs on spawned gloo ranks: asked for outside torchrun, or no simulator on this torch."""
    return (config.backend == "gloo" and "WORLD_SIZE" not in os.environ) or bool(support.simulator())


def run_case(case: Case, world=None, *, recheck: bool = False) -> Outcome:
    """One case, simulated (or in ``world``), judged: the sweep's, the shrinker's and the tests' entry point.

    ``recheck``: what the simulator cannot judge is left to the rerun on gloo ranks (judge.outcome).
    """
    world = world or Simulated(shard_cases.mesh_of(case), case.device)
    started = time.monotonic()
    try:
        ran = running.run(case, world)
        return judge.outcome(case, ran, blame=lambda: running.run(case, _fresh(world, case), blame=True),
                             seconds=time.monotonic() - started, recheck=recheck)
    except Exception as e:  # a bug in torchsleuth, not in DTensor: shown apart, the sweep goes on
        return _error(case, e, started)


def real_case(case: Case, groups: Groups) -> Outcome:
    """One case on the real gloo ranks of its mesh, judged here; a finding's blame reruns it there."""
    started = time.monotonic()
    try:
        ran = groups.run(case)
        return judge.outcome(case, ran, blame=lambda: groups.run(case, blame=True), seconds=time.monotonic() - started,
                             backend="gloo")
    except Exception as e:  # a bug in torchsleuth: shown apart, the sweep goes on
        return _error(case, e, started)


def _error(case: Case, e: Exception, started: float) -> Outcome:
    return Outcome(case=case, status="error", reason=running.line(e), seconds=time.monotonic() - started)


def _fresh(world, case):
    return world if world.real else Simulated(shard_cases.mesh_of(case), case.device)


# What this process learnt: (op, variant) -> why DTensor has no rule for it.
_UNSUPPORTED: dict[tuple, str] = {}


def unit_events(unit, config: ShardConfig, skip: frozenset[str] = frozenset(), only: str | None = None):
    """A unit's cases run and judged: ``("begin", id)`` before each, ``("outcome", Outcome)`` after (workers.pool's protocol).

    A deep part runs its cases (in plan's spread order) until its share of the run's budget (``part_seconds``) is
    spent, its first case whatever the time (planning it may take longer than a small share); the rest are skips that
    say so (``SAMPLED``), and the run's note counts them.
    """
    if not getattr(unit_events, "ready", False):  # once per process
        quiet_dtensor()
        load_imports(config.imports)
        unit_events.ready = True
    seconds = part_seconds(config) if only is None and getattr(unit, "parts", 1) > 1 else 0.0
    deadline, ran = time.monotonic() + seconds if seconds else None, False
    for case in shard_cases.plan(unit, config):
        if case.id in skip or (only is not None and case.id != only):
            continue
        yield "begin", case.id
        if deadline is not None and ran and time.monotonic() > deadline:
            yield "outcome", Outcome(case=case, status="skip", reason=SAMPLED)
            continue
        ran = True
        yield "outcome", _learnt(case) or _learn(run_case(case, recheck=True))


# The reason of a deep case left out when its part's share of the run's time budget was spent.
SAMPLED = "not run: the pointed run's time budget was spent (sampled; --seconds 0 runs every case)"
# Seconds a pointed run's shrink stage may take (the findings past it are reported as found), and its gloo
# cross-check (mostly process starts: the cases past it are not cross-checked, and the run says so)
SHRINK_SECONDS = 20.0
GLOO_SECONDS = 20.0


def part_seconds(config: ShardConfig) -> float:
    """A deep part's share of the run's budget: ``config.seconds`` of wall time on the workers, over every part."""
    if not config.deep or not config.seconds:
        return 0.0
    parts = len(config.ops or shard_cases.all_ops()) * len(config.dtypes) * shard_cases.DEEP_PARTS
    return config.seconds * max(config.workers, 1) / max(parts, 1)


def _learnt(case: Case) -> Outcome | None:
    known = _UNSUPPORTED.get((case.op, case.variant))
    return Outcome(case=case, status="skip", reason=known) if known else None


def _learn(outcome: Outcome) -> Outcome:
    if outcome.status == "skip" and "has no sharding rule" in outcome.reason:
        _UNSUPPORTED[(outcome.case.op, outcome.case.variant)] = outcome.reason
    return outcome


def _no_description(unit, config, case_id):
    return None  # a case that killed its worker is named by its id (placements, mesh) alone


def sweep(config: ShardConfig, *, db: str | Path, progress: Progress | None = None, out: str | Path | None = None,
          json: str | Path | None = None, junit: str | Path | None = None) -> SweepResult:
    """Run the shard matrix ``config`` selects into the store at ``db``; the run as stored, its outputs written.

    ``out`` gets a repro script per finding (``out/repros``), ``json`` the
    findings file, ``junit`` JUnit XML. Rerun after a kill, the same call resumes.
    """
    real = on_ranks(config)
    if config.workers:
        default_start(config.device)  # a bad $TORCHSLEUTH_WORKER_START is said before anything is stored
    with run_frame(config, db=db, progress=progress, out=out, json=json, junit=junit, scripts=scripts(config)) as frame:
        units = shard_cases.units(config)
        finished = frame.store.finished_units(frame.run.id)
        frame.start(units=len(units), done=sum(u.key in finished for u in units))
        note_lacking(frame, config)
        quiet_dtensor()
        load_imports(config.imports)
        todo = [u for u in units if u.key not in finished]
        with Groups(imports=config.imports, threads=config.threads, case_seconds=config.timeout) as groups:
            if real:
                _matrix_on_ranks(config, frame, todo, groups)
            else:
                _matrix(config, frame, todo)
                note_sampled(frame)
                recheck_run(frame, groups)
            if config.shrink:
                shrink_run(frame.store, frame.run.id, frame.progress, groups=groups, real=real,
                           seconds=SHRINK_SECONDS if config.deep and config.seconds else None)
            if config.gloo and not real:
                gloo.cross_check_run(config, frame.store, frame.run.id, frame.progress, groups,
                                     seconds=GLOO_SECONDS if config.deep and config.seconds else None)
    return frame.result


def _matrix(config: ShardConfig, frame: Frame, todo: list) -> None:
    if not config.workers:
        for unit in todo:
            for kind, payload in unit_events(unit, config, frozenset(frame.unit_begun(unit))):
                if kind == "outcome":
                    frame.record(payload)
            frame.unit_done(unit)
        return
    pool = Pool(Work(run=unit_events, describe=_no_description, config=config),
                Settings(workers=config.workers, timeout=config.timeout, threads=config.threads, log=worker_log(frame.store.path),
                         start=default_start(config.device)))
    pool.run(todo, callbacks=pool_callbacks(frame))


def note_lacking(frame: Frame, config: ShardConfig) -> None:
    """What the plan covered (deep or sampled) and what this torch leaves out of the matrix (support.lacking), said
    once in the run, resumed or not."""
    said = {detail for _, detail in frame.store.notes(frame.run.id)}
    lines = [("depth", shard_cases.depth_words(config))] + [("torch", line) for line in support.lacking(config.kinds)]
    for kind, line in lines:
        if line not in said:
            frame.note(kind, line)


def note_sampled(frame: Frame) -> None:
    """How many of each op's planned cases the time budget left room for, said once per op (``SAMPLED``)."""
    planned: dict[str, list[int]] = {}
    for case_id, status, reason, *_ in frame.store.outcome_rows(frame.run.id):
        if "@shard:" in case_id:
            counts = planned.setdefault(case_id.split("|", 1)[0], [0, 0])
            counts[0] += 1
            counts[1] += reason == SAMPLED
    said = {detail for _, detail in frame.store.notes(frame.run.id)}
    for op, (total, left) in sorted(planned.items()):
        line = (f"{op}: {total - left:,} of {total:,} planned cases run, an even sample within the pointed run's time "
                f"budget; the other {left:,} not run (--seconds 0 runs every case)")
        if left and line not in said:
            frame.note("sampled", line)


def _matrix_on_ranks(config: ShardConfig, frame: Frame, todo: list, groups: Groups) -> None:
    planned = {}
    for unit in todo:
        stored = frame.unit_begun(unit)
        planned[unit.key] = [c for c in shard_cases.plan(unit, config) if c.id not in stored]
    last = {key: max((shard_cases.mesh_of(c).ranks for c in cases), default=0) for key, cases in planned.items()}
    for unit in todo:
        if not last[unit.key]:
            frame.unit_done(unit)
    for size in sorted(set(last.values()) - {0}):
        for unit in todo:
            for case in planned[unit.key]:
                if shard_cases.mesh_of(case).ranks == size:
                    groups.ranks(size).start()  # (again, after a case that broke it): its seconds are no case's
                    frame.record(_learnt(case) or _learn(real_case(case, groups)))
            if last[unit.key] == size:
                frame.unit_done(unit)
        groups.close(size)


def recheck_run(frame: Frame, groups: Groups) -> None:
    """Every simulated case LocalTensorMode could not judge, rerun on real gloo ranks and judged there (see the design note)."""
    rows = frame.store.outcome_rows(frame.run.id)
    done = {r[0] for r in rows if f"@{gloo.ORACLE}" in r[0]}
    todo = [Case.parse(r[0]) for r in rows if r[1] == "skip" and judge.RECHECK in (r[2] or "") and "@shard:" in r[0]]
    todo = sorted((c for c in todo if gloo.checked(c).id not in done), key=lambda c: (shard_cases.mesh_of(c).ranks, c.id))
    for i, case in enumerate(todo):
        groups.ranks(shard_cases.mesh_of(case).ranks).start()
        frame.store.add(frame.run.id, _rechecked(case, groups))
        frame.progress.step("gloo recheck", i + 1, len(todo))
        if i + 1 == len(todo) or shard_cases.mesh_of(todo[i + 1]).ranks != shard_cases.mesh_of(case).ranks:
            groups.close(shard_cases.mesh_of(case).ranks)


def _rechecked(case: Case, groups: Groups) -> Outcome:
    """``case`` judged on gloo ranks as its own case; a round trip the simulator failed, with its verdict."""
    outcome = real_case(gloo.checked(case), groups)
    try:
        simulated = running.run(case, Simulated(shard_cases.mesh_of(case), case.device))
    except Exception:  # the simulator's side is a courtesy: the real outcome stands
        return outcome
    if simulated.status != "roundtrip" or any(f.kind == "roundtrip_mismatch" for f in outcome.findings):
        return outcome  # the real round trip failed too: its own finding says DTensor's
    came_back = outcome.status != "error" and not any(f.kind == "hang" for f in outcome.findings)
    finding = judge.roundtrip_finding(case, simulated, confirmed=came_back)
    return dataclasses.replace(outcome, findings=(finding, *outcome.findings))


def shrink_run(store: Store, run_id: int, progress=None, *, groups: Groups | None = None, real: bool = False,
               seconds: float | None = None) -> None:
    """Shrink every finding of the run not shrunk yet; each result stored at once (a kill resumes here).

    A finding made on gloo ranks (``real``, or a recheck's) is shrunk there, on ``groups``. With ``seconds`` (a
    pointed run's budget), one finding of each group goes first, and those left when it is spent are kept as found.
    """
    done = store.shrunk(run_id)
    todo = [f for f in store.findings(run_id) if f.id not in done and f.kind == "sharding_mismatch"]
    if seconds is not None:
        seen: set = set()
        firsts = [f for f in todo if not (groups_of.key(f) in seen or seen.add(groups_of.key(f)))]
        todo = firsts + [f for f in todo if f not in firsts]
    deadline = time.monotonic() + seconds if seconds is not None else None
    with Groups() if groups is None else contextlib.nullcontext(groups) as ranks:
        for i, finding in enumerate(todo):
            left = deadline - time.monotonic() if deadline is not None else shrinking.MAX_SECONDS
            if left <= 0:
                store.add_shrunk(run_id, Shrunk(finding=finding.id, status="kept", case_id=finding.case_id,
                                                reason=f"not shrunk: the pointed run's shrink budget ({seconds:g} s) was spent"))
                continue
            on_gloo = real or f"@{gloo.ORACLE}" in finding.case_id
            store.add_shrunk(run_id, shrinking.shrink(finding, functools.partial(real_case, groups=ranks) if on_gloo else run_case,
                                                      max_seconds=min(left, shrinking.MAX_SECONDS)))
            if progress is not None:
                progress.step("shrinking", i + 1, len(todo))


def scripts(config: ShardConfig) -> outputs.Scripts:
    """The repro script writer of a shard run (report.outputs hands it the findings, as reported, and the folder)."""
    return functools.partial(_write_scripts, config=config)


def _write_scripts(findings, out: Path, *, config: ShardConfig) -> dict[str, Path]:
    return repro.write_scripts(findings, config, out)
