"""Trusting the simulator only as far as it is checked: the same cases on real gloo process groups.

Design note. LocalTensorMode is code too, and can be wrong (torch 2.13's
gives every rank rank 0's shard of a plain tensor distributed with
``_StridedShard``: bench/shard.md). So a sample of the cases the sweep
judged (``ShardConfig.gloo`` of them, spread over meshes and ops, findings
first) is run again on real process groups: the persistent gloo ranks of
ranks.py (one group per mesh size, started once, kept for every case),
each rank running the case with run.py in a ``world.Real``: the same inputs,
the same placements, real collectives. This process runs the same case
simulated and compares rank by rank. A disagreement (values beyond the
judge's allowance, or one side raising where the other did not) is a
``simulator_mismatch`` finding against reference ``gloo``: the simulator is
in question, never the op.

Cross-check outcomes are stored as cases of their own (oracle
``shard-gloo:<mesh>``, ``checked``), so they are counted, resumable and
timed; the sweep's rerun of the cases the simulator cannot judge
(sweep.recheck_run) stores its outcomes under the same oracle.
"""

from __future__ import annotations

import dataclasses
import time
import zlib

import torch

from ..cases.records import Case
from ..judge import compare as cmp
from ..judge.records import Mismatch, Outcome
from ..judge.tolerance import table
from . import cases as shard_cases, judge, run as running
from .ranks import Groups
from .run import Ran
from .support import quiet_dtensor
from .world import Simulated

__all__ = ["ORACLE", "checked", "compare", "cross_check", "cross_check_run", "quiet_dtensor", "sample"]

ORACLE = "shard-gloo:"


def checked(case: Case) -> Case:
    """The cross-check's own case of a shard case (its oracle says where it ran)."""
    return dataclasses.replace(case, oracle=ORACLE + shard_cases.mesh_of(case).name)


def sample(store, run_id: int, count: int) -> list[Case]:
    """Up to ``count`` judged cases of the run: those with findings first, then spread over meshes and ops."""
    rows = store.outcome_rows(run_id)
    with_findings = {f.case_id for f in store.findings(run_id)}
    judged = [Case.parse(r[0]) for r in rows if r[1] in ("pass", "finding") and "@shard:" in r[0]]
    flagged = [Case.parse(r[0]) for r in rows if r[0] in with_findings and "@shard:" in r[0]]
    chosen = flagged[: max(count // 4, 1)] if flagged else []
    by_mesh: dict[str, list[Case]] = {}
    for c in judged:
        by_mesh.setdefault(c.oracle, []).append(c)
    for group in by_mesh.values():
        group.sort(key=lambda c: (zlib.crc32(c.op.encode()) % 97, c.id))  # the same sample every run
    while len(chosen) < count and any(by_mesh.values()):
        for group in by_mesh.values():
            if group and len(chosen) < count:
                c = group.pop(len(group) // 2)
                if c not in chosen:
                    chosen.append(c)
    return chosen[:count]


def cross_check_run(config, store, run_id: int, progress=None, groups: Groups | None = None, seconds: float | None = None) -> None:
    """The cross-check of a run; with ``seconds`` (a pointed run's budget) it stops when they are spent, and says so."""
    done = {r[0] for r in store.outcome_rows(run_id) if f"@{ORACLE}" in r[0]}
    cases = [c for c in sample(store, run_id, config.gloo) if checked(c).id not in done]
    deadline = time.monotonic() + seconds if seconds is not None else None
    checks = cross_check(cases, groups or Groups(imports=config.imports, case_seconds=config.timeout))
    made = 0
    for outcome in checks:
        store.add(run_id, outcome)
        made += 1
        if progress is not None:
            progress.step("gloo cross-check", made, len(cases))
        if deadline is not None and time.monotonic() > deadline and made < len(cases):
            checks.close()  # its groups closed
            store.note(run_id, "gloo", f"gloo cross-check: {made} of {len(cases)} cases within the pointed run's budget "
                                       f"({seconds:g} s; smallest meshes first)")
            break


def cross_check(cases: list[Case], groups: Groups | None = None):
    """Each case on real gloo ranks against the simulator, as cross-check outcomes (yielded as each is made).

    Cases are run grouped by the ranks their mesh needs, each group closed
    when its cases are done; ``groups`` given, its groups are used, and
    closed too.
    """
    groups = groups or Groups()
    by_ranks: dict[int, list[Case]] = {}
    for case in cases:
        by_ranks.setdefault(shard_cases.mesh_of(case).ranks, []).append(case)
    try:
        for ranks, group in sorted(by_ranks.items()):
            for case in group:
                started = time.monotonic()
                real = groups.run(checked(case))
                yield compare(case, real, seconds=time.monotonic() - started)
            groups.close(ranks)
    finally:
        groups.close()


def compare(case: Case, real: Ran, *, seconds: float = 0.0) -> Outcome:
    """The simulated run of ``case`` against the merged run of its real ranks (ranks.merge)."""
    target = checked(case)
    if real.status in ("error", "hang"):
        return Outcome(case=target, status="error", reason=f"gloo: {real.reason}", seconds=seconds)
    simulated = running.run(case, Simulated(shard_cases.mesh_of(case), case.device))
    if (real.status == "ran") != (simulated.status == "ran"):
        wrong = Mismatch(path="status", attribute="status", expected=f"{real.status}: {real.reason}"[:200],
                         actual=f"{simulated.status}: {simulated.reason}"[:200])
        return _finding(target, case, "status", 0, wrong, seconds)
    if real.status != "ran":
        return Outcome(case=target, status="pass", seconds=seconds)
    allowance = None
    for path, values in real.actual.items():
        sim_values = simulated.actual.get(path)
        for rank, value in enumerate(values):
            if sim_values is None:
                missing = Mismatch(path=path, attribute="structure", expected="a result", actual="none")
                return _finding(target, case, path, rank, missing, seconds)
            mine = sim_values[rank] if len(sim_values) > rank else sim_values[0]
            wrong = cmp.compare_leaf(path, mine, value, tolerance=table)
            if wrong is not None and wrong.attribute == "values" and isinstance(value, torch.Tensor):
                allowance = allowance if allowance is not None else judge._allowance(case, simulated)
                wrong = cmp.compare_leaf(path, mine, value, tolerance=table, slack=allowance.get(path))
            if wrong is not None:
                return _finding(target, case, path, rank, wrong, seconds)
    return Outcome(case=target, status="pass", seconds=seconds)


def _finding(target: Case, case: Case, path: str, rank: int, wrong: Mismatch, seconds: float) -> Outcome:
    finding = judge.simulator_finding(case, "gloo", path, rank, wrong)
    finding = dataclasses.replace(finding, case_id=target.id)
    return Outcome(case=target, status="finding", findings=(finding,), seconds=seconds)
