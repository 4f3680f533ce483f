"""The refusal differential: values the CPU refuses, sent to the device after all, each where a fault costs nothing else.

Design note. During a sweep on a device where an index out of range stops the
kernel at a device-side assert (``run.references.ASSERTING``: CUDA), a case
whose changed values the CPU refuses, while the CPU takes the sample's own,
is not sent to the device (``References.refused``): a device-side assert ends
the worker's context, and now and then stalls every worker on the GPU. Its
outcome is ``raised``, with a reason beginning with ``PREFIX`` and holding
``run.references.REFUSED``.

Yet a kernel that returns where the CPU raises is one of the commonest silent
bugs on a GPU: an index or a divisor the CPU rejects, which the device's
kernel wraps, truncates or ignores, returning garbage and raising nothing. So
after the sweep's units, with no case left that a fault could disturb, this
stage picks a share of the refused cases (``SweepConfig.refusals`` per op and
dtype, spread over their edits and layouts; at most ``SHARE`` of the sweep's
time so far, ``MIN_SECONDS`` at least, ``TARGET_SHARE`` of a time target at
most. Each job carries the wall-clock second it stops by, ``Replay.until``,
checked before each case: a case whose device-side assert ends its worker
costs a fresh worker's start, and with the limit checked between batches
alone, a catalog run on an H100 took 136 s longer with the stage than
without, against its 30 s: bench/refusals-cost.md) and replays each with its values
sent to the device (``engine.run_case(refuse=False)``), in the pool's
workers:

* the device raises (an error, or a device-side assert: the device is then
  unusable, and the worker is ended and replaced, ``DeviceLost``): loud, as
  the CPU is; the case stays ``raised``, its reason saying so;
* the worker dies: a ``crash`` finding, as anywhere;
* the call returns and the device still works: an ``unchecked_input``
  finding against the ``contract`` reference, "the CPU refuses this call with
  ...; cuda returned without error". What the judges said of the returned
  values is left out: compared with a reference made of the same unchecked
  values, it is a symptom of this one cause.

A replayed case's stored outcome is replaced (``Store.replace``), its reason
beginning with ``REPLAYED``: a resumed sweep does not replay it again. Its
finding is not shrunk (the shrinker's replays honour the refusal; its
``Shrunk`` says so) and its script (``scripts.checks``) runs the call on the
CPU, which must raise, then on the device, and exits 1 while the device
returns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Iterator

from .. import devices
from ..cases.plan import spread
from ..cases.records import Case
from ..config import SweepConfig
from ..devices import works as device_works
from ..engine import describe, run_case
from ..judge.isolation import isolation_outcome
from ..judge.plugin import BUILTIN, Registry
from ..judge.records import Finding, Mismatch, Outcome
from ..run import references
from ..workers.pool import DeviceLost
from ..workers.records import Callbacks
from .records import Shrunk

PREFIX = "the contiguous reference raised: "
REPLAYED = "replayed on the device: "
# The share of the sweep's time so far the replays may take, and the seconds they get however short the sweep was.
SHARE = 0.1
MIN_SECONDS = 30.0
# In a run with a time target (run.deadline), the share of the target the replays may take at most.
TARGET_SHARE = 0.15
# Replays handed to the pool at once: the time limit is checked between batches, and before each case (Replay.until).
BATCH = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class Replay:
    """A job of this stage: refused cases of one unit, with the CPU's words for each."""

    key: str
    cases: tuple[str, ...]
    words: tuple[str, ...]
    until: float = 0.0  # the wall-clock second no more of its cases begins (0: none)


def refused(rows: list[tuple]) -> dict[str, str]:
    """Case id -> the CPU's words, for the stored outcomes (``Store.outcome_rows``) refused and not replayed yet."""
    found = {}
    for case_id, status, reason, _ in rows:
        if status == "raised" and reason.startswith(PREFIX) and references.REFUSED in reason:
            words = reason[reason.index(references.REFUSED) + len(references.REFUSED):].strip()
            found[case_id] = words[1:words.rfind(") and takes")] if words.startswith("(") and ") and takes" in words else words
    return found


def chosen(cases: dict[str, str], per_unit: int) -> list[Replay]:
    """At most ``per_unit`` cases of each unit, spread over its refused cases in id order (edits and layouts vary)."""
    units: dict[str, list[str]] = {}
    for case_id in sorted(cases):
        units.setdefault(Case.parse(case_id).unit.key, []).append(case_id)
    jobs = []
    for key, ids in units.items():
        picked = [ids[i] for i in spread(len(ids), per_unit)]
        jobs.append(Replay(key=key, cases=tuple(picked), words=tuple(cases[i] for i in picked)))
    return jobs


def replay_refused(config: SweepConfig, store, run_id: int, *, elapsed: float, pool=None, oracles: Registry = BUILTIN) -> None:
    """The stage: replay a share of run ``run_id``'s refused cases on the device; each outcome replaces the stored one,
    and a note says what was sent and what came of it."""
    if config.refusals <= 0 or devices.kind(config.device) not in references.ASSERTING:
        return
    cases = refused(store.outcome_rows(run_id))
    jobs = chosen(cases, config.refusals)
    if not jobs:
        return
    limit = max(MIN_SECONDS, SHARE * elapsed)
    if config.time_target:
        limit = min(limit, TARGET_SHARE * config.time_target)
    said: dict[str, int] = {"returned": 0, "refused": 0, "crashed": 0}
    planned = sum(len(j.cases) for j in jobs)

    def record(outcome: Outcome) -> None:
        store.replace(run_id, outcome)
        for finding in outcome.findings:
            if finding.kind == "unchecked_input":
                store.add_shrunk(run_id, Shrunk(finding=finding.id, status="kept", case_id=finding.case_id,
                                                reason="not shrunk: a replay of the shrinker keeps the CPU's refusal"))
        said["returned" if outcome.status == "finding" and outcome.findings[0].kind == "unchecked_input"
             else "crashed" if outcome.status == "finding" else "refused"] += 1

    until = time.time() + limit
    batches = [[dataclasses.replace(job, until=until) for job in jobs[i:i + BATCH]] for i in range(0, len(jobs), BATCH)]
    for batch in batches:
        if time.time() > until:
            break
        _run(batch, config, record, pool, oracles)
    sent = sum(said.values())
    left = f"; {planned - sent} more left for the time limit ({limit:.0f} s)" if sent < planned else ""
    store.note(run_id, "refusals",
               f"{sent} of {len(cases)} cases whose values the CPU refuses sent to {config.device} alone: {said['returned']} returned "
               f"without error (unchecked_input findings), {said['refused']} refused there too, {said['crashed']} crashed{left}")
    store.commit()


def _run(jobs: list[Replay], config: SweepConfig, record, pool, oracles: Registry) -> None:
    if pool is None:
        for job in jobs:
            for kind, payload in work(job, config, frozenset(), None, oracles=oracles, lost_raises=False):
                if kind == "outcome":
                    record(payload)
        return
    pool.run(jobs, close=False, callbacks=Callbacks(
        skip_for=lambda job: set(),
        on_outcome=lambda job, outcome: record(outcome),
        on_failed=lambda job, case_id, kind, how, call: record(isolation_outcome(Case.parse(case_id), kind, how, call)),
        on_collateral=lambda job, case_id, how: None,
        on_unit_done=lambda job, state, detail: None,
    ))


def work(job: Replay, config: SweepConfig, skip: frozenset[str], only: str | None, *, oracles: Registry = BUILTIN,
         lost_raises: bool = True) -> Iterator[tuple[str, object]]:
    """A worker's part: each case of ``job`` replayed on the device; one that leaves the device unusable ends the worker
    (``DeviceLost``: the pool starts a fresh one for the rest)."""
    for case_id, words in zip(job.cases, job.words):
        if case_id in skip or (only is not None and case_id != only) or (only is None and job.until and time.time() > job.until):
            continue
        yield "begin", case_id
        outcome, lost = replayed(case_id, words, config, oracles)
        yield "outcome", outcome
        if lost and lost_raises:
            raise DeviceLost(outcome.reason)


def replayed(case_id: str, words: str, config: SweepConfig, oracles: Registry = BUILTIN) -> tuple[Outcome, bool]:
    """One refused case with its values sent to the device: (its outcome, whether the device is now unusable)."""
    case = Case.parse(case_id)
    outcome = run_case(case, oracles, refuse=False)
    if not device_works(case.device):
        return Outcome(case=case, status="raised", reason=f"{REPLAYED}{case.device} stops it too (a device-side assert): {outcome.reason}"), True
    if outcome.status in ("raised", "error", "skip"):
        return Outcome(case=case, status="raised", reason=f"{REPLAYED}{case.device} refuses it too: {outcome.reason}"), False
    try:
        spec = describe(None, config, case_id)
    except Exception:
        spec = None
    digest = hashlib.sha256(f"{case.id}|unchecked_input".encode()).hexdigest()[:10]
    placed = ", ".join(f"{layout} {path}" for path, layout in case.layouts) or "contiguous tensors"
    edits = f" with {', '.join(case.edits)}" if case.edits else ""
    summary = (f"{case.op} ({case.variant}) [{case.dtype}] on {case.device}, {placed}{edits}: the CPU refuses this call with "
               f"{words}; {case.device} returned without error")
    finding = Finding(id=f"f-{digest}", kind="unchecked_input", op=case.op, opinfo=case.op, variant=case.variant, dtype=case.dtype,
                      device=case.device, reference="contract", case_id=case.id, layouts=case.layouts, summary=summary,
                      mismatch=Mismatch(path="call", attribute="refusal", expected=f"raises ({words})", actual="returned"),
                      call=spec, detail=f"the CPU: {words}")
    return Outcome(case=case, status="finding", reason=f"{REPLAYED}{case.device} returned", findings=(finding,),
                   reached=outcome.reached), False
