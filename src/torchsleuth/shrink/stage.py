"""The shrink stage of a sweep: every finding minimised and replayed, every group diagnosed.

Design note. It runs after the sweep's units, over what the store holds, in
two passes through the same worker pool the sweep uses (so a replay that
crashes takes down a worker, not the sweep, and the user's --import modules
are loaded as they were for the sweep):

1. ``shrink_findings``: every finding not yet shrunk, in jobs of one unit
   (op, dtype, device), so a worker makes the op's samples once:
   ``shrinker.shrink`` replays it and minimises it (the oracle's own moves
   first, and its part of the cost before the shrinker's: a compiled chain
   drops an op, judge.plugin's ``Oracle.moves``); each result (``Shrunk``)
   is stored at once;
2. ``diagnose_groups``: the sweep groups the findings by their shrunk
   triggers (report.groups) and hands over the first finding of each group
   not yet diagnosed; ``diagnose.diagnose`` tests the neighbours of its
   shrunk case.

Both skip what the store already has, so a sweep killed while shrinking
resumes here. In a run with a time target both end by the run's end
(run.deadline.finish): a finding is shrunk only where its case, run twice
(the replay, and the last replay of what the search kept), ends by then
(its own seconds, from the store), and is kept as found otherwise
(``OUT_OF_TIME``); a group is diagnosed only while time is left, and its
neighbours are tried only while the longest so far would end in time
(shrink.diagnose); what they leave is counted in a ``time-after`` note
(report.notes). With or without a target, a finding's shrink has
``shrinker.MAX_SECONDS`` (a slower oracle's up to ``_SLOWER_SHRINK`` times
it), a slower oracle's group's diagnosis ``DIAGNOSE_SECONDS`` as many times,
and a job that runs past the run's end by ``_SLACK_SECONDS`` has its worker
killed. With ``workers=0`` both run in this process, as the
sweep did (tests plant kernels in-process). Otherwise both run in the
sweep's own pool, whose workers are up already and have loaded the user's
``--import`` modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import functools
import itertools
import time

from ..config import SweepConfig
from ..devices import works as device_works
from ..engine import run_case
from ..judge.plugin import BUILTIN, Registry
from ..judge.records import Finding
from ..run import deadline
from ..workers.records import Callbacks
from ..workers.pool import DeviceLost, Pool
from . import shrinker
from .records import Shrunk
from .shrinker import LOST

# A finding whose shrinking or diagnosis runs this much longer than its
# budget is given up on (its worker is killed): shrinking is capped by
# shrinker.MAX_SECONDS, but one replay can take as long as a case may.
_SLACK_SECONDS = 30.0

# A slower oracle's case (a compile: a second or more a replay) has up to this many times the shrinker's seconds,
# and its group up to this many times a diagnosis's.
_SLOWER_SHRINK = 3.0

# The seconds a slower oracle's group (a compile's, a span probe's) has for its diagnosis, times its oracle's slower
# (up to _SLOWER_SHRINK), where the run has no time target to end it: its neighbours are tried while the longest so far
# would end within them (a compiled group's neighbours each compile). Other groups' neighbours are calls, and run all.
DIAGNOSE_SECONDS = 20.0

Step = Callable[[str, int, int], None]  # (pass name, done, total)

# Why a finding is kept as found where the run's time target ended before it could be shrunk (report.notes counts them).
OUT_OF_TIME = "the time target ran out before it could be shrunk"


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    key: str
    findings: tuple[Finding, ...]
    # diagnosis jobs only: each finding's group and its shrunk case's finding
    groups: tuple[str, ...] = ()
    shrunk: tuple[Finding, ...] = ()
    # shrink jobs: the seconds each finding's case took when it was found (what one replay costs)
    seconds: tuple[float, ...] = ()


def shrink_findings(config: SweepConfig, store, run_id: int, *, step: Step | None = None, pool: Pool | None = None,
                    oracles: Registry = BUILTIN) -> None:
    """Shrink every finding of run ``run_id`` that the store has no result for."""
    done = store.shrunk(run_id)
    # a finding a time target kept as found is shrunk again where a resumed run has the time (--time 0)
    todo = [f for f in store.findings(run_id) if f.id not in done or done[f.id].reason == OUT_OF_TIME]
    seconds = store.case_seconds(run_id)
    jobs: dict[str, list[Finding]] = {}
    for finding in todo:
        jobs.setdefault(f"{finding.opinfo}|{finding.dtype}|{finding.device}", []).append(finding)
    _run([Job(key=k, findings=tuple(v), seconds=tuple(seconds.get(f.case_id, 0.0) for f in v)) for k, v in jobs.items()],
         _shrink_work, config, _recorder(store.add_shrunk, run_id, "shrinking", len(todo), step),
         failed=lambda f, how: Shrunk(finding=f.id, status="kept", case_id=f.case_id, reason=f"replaying it {how}"), pool=pool,
         oracles=oracles)
    shrunk = store.shrunk(run_id)
    left = sum(1 for f in todo if f.id in shrunk and shrunk[f.id].reason == OUT_OF_TIME)
    if todo and (left or deadline.finish(config) or any(f.id in done for f in todo)):  # the last says (report.notes)
        store.note(run_id, "time-after", f"shrinking {left}/{len(todo)}")


def diagnose_groups(config: SweepConfig, store, run_id: int, groups, findings: list[Finding], *, step: Step | None = None,
                    pool: Pool | None = None, oracles: Registry = BUILTIN) -> None:
    """Diagnose each of ``groups`` not diagnosed yet, from its first shrunk finding."""
    shrunk = store.shrunk(run_id)
    by_id = {f.id: f for f in findings}
    diagnosed = store.diagnoses(run_id)
    jobs = []
    for g in groups:
        first = next((by_id[i] for i in g.findings if _diagnosable(shrunk.get(i))), None)
        if g.id not in diagnosed and first is not None:
            jobs.append(Job(key=g.id, findings=(first,), groups=(g.id,), shrunk=(shrunk[first.id].replay,)))
    _run(jobs, _diagnose_work, config, _recorder(store.add_diagnosis, run_id, "diagnosing", len(jobs), step), failed=None, pool=pool,
         oracles=oracles)
    end = deadline.finish(config)
    if jobs and end:  # the groups left undiagnosed once the run's time ran out; the last note says (report.notes)
        diagnosed = store.diagnoses(run_id)
        left = sum(1 for job in jobs if job.key not in diagnosed) if time.time() >= end else 0
        store.note(run_id, "time-after", f"diagnosing {left}/{len(jobs)}")


def _recorder(add, run_id: int, name: str, total: int, step: Step | None):
    done = [0]

    def record(result) -> None:
        if result is None:  # nothing could be made of it (see _diagnose_work)
            return
        add(run_id, result)
        done[0] += 1
        if step is not None:
            step(name, done[0], total)

    return record


def _diagnosable(shrunk: Shrunk | None) -> bool:
    return shrunk is not None and shrunk.status == "shrunk" and shrunk.replay is not None


def _run(jobs: list[Job], work, config: SweepConfig, record, *, failed, pool: Pool | None, oracles: Registry) -> None:
    """Every job through ``work`` (in ``pool``, or here when ``config.workers`` is 0).

    ``failed(finding, how)`` is what a finding gets when its job failed. The
    pool's work function hands a ``Job`` to ``stage.work``, which picks
    ``work`` by the job's kind.
    """
    if not jobs:
        return
    by_id = {f.id: f for job in jobs for f in job.findings}
    done: set[str] = set()

    def recorded(finding_id: str, result) -> None:
        done.add(finding_id)
        record(result)

    def job_failed(job: Job, how: str) -> None:
        # a bug in torchsleuth, or a device that cannot be set up: the findings stay as found
        for finding in job.findings:
            if finding.id not in done and failed is not None:
                recorded(finding.id, failed(finding, how))

    if pool is None:
        for job in jobs:
            begun = None
            try:
                for kind, payload in work(job, config, frozenset(), None, oracles=oracles):
                    if kind == "begin":
                        begun = payload
                    elif kind == "outcome":
                        recorded(begun, payload)
            except Exception as e:
                job_failed(job, f"failed: {type(e).__name__}: {e}")
        return
    def on_outcome(job: Job, result) -> None:
        recorded(getattr(result, "finding", ""), result)

    def on_failed(job, finding_id, kind, how, call):
        if failed is not None:
            recorded(finding_id, failed(by_id[finding_id], f"{'crashed' if kind == 'crash' else 'hung'}: {how}"))

    pool.timeout = shrinker.MAX_SECONDS + config.timeout + _SLACK_SECONDS
    end = deadline.finish(config)
    if end:  # none may run long past the run's end: a safety net under the stage's own bounds
        pool.timeout = min(pool.timeout, max(end - time.time(), 0.0) + _SLACK_SECONDS)
    pool.run(jobs, close=False, callbacks=Callbacks(
        skip_for=lambda job: set(),
        on_outcome=on_outcome,
        on_failed=on_failed,
        on_collateral=lambda job, finding_id, how: None,
        on_unit_done=lambda job, state, detail: job_failed(job, f"failed: {detail}") if state == "failed" else None,
    ))


def work(job: Job, config: SweepConfig, skip: frozenset[str], only: str | None, *,
         oracles: Registry = BUILTIN) -> Iterator[tuple[str, object]]:
    """A worker's part of the stage: a diagnosis job (it names groups) or a shrink job."""
    return (_diagnose_work if job.groups else _shrink_work)(job, config, skip, only, oracles=oracles)


def _shrink_work(job: Job, config: SweepConfig, skip: frozenset[str], only: str | None, *,
                 oracles: Registry) -> Iterator[tuple[str, object]]:
    from .shrinker import shrink

    healthy = _health(config)
    end = deadline.finish(config)
    for finding, seconds in zip(job.findings, job.seconds or itertools.repeat(0.0)):
        if finding.id in skip or (only is not None and finding.id != only):
            continue
        yield "begin", finding.id
        if not deadline.fits(end, 2 * seconds):  # its two replays would end past the run's time target: kept as found
            yield "outcome", Shrunk(finding=finding.id, status="kept", case_id=finding.case_id, reason=OUT_OF_TIME)
            continue
        limit = shrinker.MAX_SECONDS * min(oracles.slower(finding.case_id), _SLOWER_SHRINK)
        if end:  # the shrink, its replays included, ends with the run's time
            limit = max(0.0, min(limit, end - time.time()))
        # an oracle's own moves first (a compiled chain with one op dropped), its part of the cost before the shrinker's
        result = shrink(finding, functools.partial(run_case, oracles=oracles), healthy=healthy,
                        moves=lambda case: itertools.chain(oracles.moves(case), shrinker.candidates(case)),
                        simpler=lambda case: (oracles.weight(case), *shrinker.cost(case)), max_seconds=limit)
        yield "outcome", result
        if result.reason.startswith(LOST):
            raise DeviceLost(result.reason)  # the pool starts a fresh worker for the rest of the job


def _diagnose_work(job: Job, config: SweepConfig, skip: frozenset[str], only: str | None, *,
                   oracles: Registry) -> Iterator[tuple[str, object]]:
    from .diagnose import diagnose

    healthy = _health(config)
    end = deadline.finish(config)
    for finding, group, shrunk in zip(job.findings, job.groups, job.shrunk):
        if finding.id in skip or (only is not None and finding.id != only):
            continue
        yield "begin", finding.id
        if not deadline.fits(end, 0.0):
            yield "outcome", None  # no diagnosis: the run's time target ran out (counted by diagnose_groups)
            continue
        slower = oracles.slower(shrunk.case_id)
        until = end if slower <= 1 else deadline.earliest(end, time.time() + DIAGNOSE_SECONDS * min(slower, _SLOWER_SHRINK))
        try:
            yield "outcome", diagnose(group, finding, shrunk, functools.partial(run_case, oracles=oracles), dtypes=config.dtypes,
                                      healthy=healthy, until=until)
        except shrinker.DeviceLost as e:
            yield "outcome", None  # no diagnosis: a neighbour took the device down
            raise DeviceLost(str(e)) from None


def _health(config: SweepConfig):
    return lambda: device_works(config.device)
