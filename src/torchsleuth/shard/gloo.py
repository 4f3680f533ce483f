"""Trusting the simulator only as far as it is checked: the same cases on real gloo process groups.

Design note. LocalTensorMode is code too, and can be wrong (torch 2.13's
gives every rank rank 0's shard of a plain tensor distributed with
``_StridedShard``: bench/shard.md). So a sample of the cases the sweep
judged (``ShardConfig.gloo`` of them, spread over meshes and ops, findings
first) is run again on real process groups: for each mesh size, that many
CPU processes are spawned (``torch.multiprocessing``, start method spawn),
join a gloo group through a file store, and run each case with run.py in a
``world.Real``: the same inputs, the same placements, real collectives.
Each rank writes what it saw; this process runs the same case simulated and
compares rank by rank. A disagreement (values beyond the judge's allowance,
or one side raising where the other did not) is a ``simulator_mismatch``
finding against reference ``gloo``: the simulator is in question, never
the op.

Cross-check outcomes are stored as cases of their own (oracle
``shard-gloo:<mesh>``), so they are counted, resumable and timed: the
benchmark of cases per second, simulated against real, reads them.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

import torch

from ..cases.records import Case
from ..judge import compare as cmp
from ..judge.records import Mismatch, Outcome
from ..judge.tolerance import table
from . import cases as shard_cases, judge, run as running
from .world import Real, Simulated

ORACLE = "shard-gloo:"
TIMEOUT = 300.0


def quiet_dtensor() -> None:
    """DTensor's advice a sweep would print thousands of times, on purpose: quiet.

    It logs every 2-D redistribution made in two steps, and warns on every
    one-element tensor it replicates implicitly (samples have many). Here, the
    lowest of the modules that run cases (this one's ranks, the sweep, torchrun).
    """
    import logging
    import warnings

    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1", category=UserWarning)


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
        group.sort(key=lambda c: (hash(c.op) % 97, c.id))
    while len(chosen) < count and any(by_mesh.values()):
        for group in by_mesh.values():
            if group and len(chosen) < count:
                c = group.pop(len(group) // 2)
                if c not in chosen:
                    chosen.append(c)
    return chosen[:count]


def cross_check_run(config, store, run_id: int, progress=None) -> None:
    done = {r[0] for r in store.outcome_rows(run_id) if f"@{ORACLE}" in r[0]}
    cases = [c for c in sample(store, run_id, config.gloo) if checked(c).id not in done]
    for i, outcome in enumerate(cross_check(cases)):
        store.add(run_id, outcome)
        if progress is not None:
            progress.step("gloo cross-check", i + 1, len(cases))


def cross_check(cases: list[Case]) -> list[Outcome]:
    """Each case on real gloo process groups against the simulator, as cross-check outcomes."""
    by_ranks: dict[int, list[Case]] = {}
    for case in cases:
        by_ranks.setdefault(shard_cases.mesh_of(case).ranks, []).append(case)
    found = []
    for ranks, group in sorted(by_ranks.items()):
        started = time.monotonic()
        try:
            real = run_real(group, ranks)
        except Exception as e:
            reason = f"gloo: {ranks} processes could not run: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
            found.extend(Outcome(case=checked(c), status="error", reason=reason) for c in group)
            continue
        per_case = (time.monotonic() - started) / max(len(group), 1)
        for case in group:
            found.append(compare(case, real.get(case.id, {}), seconds=per_case))
    return found


def compare(case: Case, real: dict, *, seconds: float = 0.0) -> Outcome:
    """The simulated run of ``case`` against what each real rank saw (``real``: rank -> (status, reason, actual))."""
    target = checked(case)
    simulated = running.run(case, Simulated(shard_cases.mesh_of(case), case.device))
    mesh = shard_cases.mesh_of(case)
    if len(real) != mesh.ranks:
        return Outcome(case=target, status="error", reason=f"gloo: {len(real)} of {mesh.ranks} ranks reported", seconds=seconds)
    allowance = None
    for rank in range(mesh.ranks):
        status, reason, actual = real[rank]
        if (status == "ran") != (simulated.status == "ran"):
            wrong = Mismatch(path="status", attribute="status", expected=f"{status}: {reason}"[:200],
                             actual=f"{simulated.status}: {simulated.reason}"[:200])
            return _finding(target, case, "status", rank, wrong, seconds)
        if status != "ran":
            continue
        for path, values in actual.items():
            sim_values = simulated.actual.get(path)
            if sim_values is None:
                missing = Mismatch(path=path, attribute="structure", expected="a result", actual="none")
                return _finding(target, case, path, rank, missing, seconds)
            mine = sim_values[rank] if len(sim_values) > rank else sim_values[0]
            wrong = cmp.compare_leaf(path, mine, values[0], tolerance=table)
            if wrong is not None and wrong.attribute == "values" and isinstance(values[0], torch.Tensor):
                allowance = allowance if allowance is not None else judge._allowance(case, simulated)
                wrong = cmp.compare_leaf(path, mine, values[0], tolerance=table, slack=allowance.get(path))
            if wrong is not None:
                return _finding(target, case, path, rank, wrong, seconds)
    return Outcome(case=target, status="pass", seconds=seconds)


def _finding(target: Case, case: Case, path: str, rank: int, wrong: Mismatch, seconds: float) -> Outcome:
    finding = judge.simulator_finding(case, "gloo", path, rank, wrong)
    finding = dataclasses.replace(finding, case_id=target.id)
    return Outcome(case=target, status="finding", findings=(finding,), seconds=seconds)


def run_real(cases: list[Case], ranks: int, *, backend: str = "gloo") -> dict:
    """Run ``cases`` on ``ranks`` spawned processes; case id -> rank -> (status, reason, actual)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="torchsleuth-gloo-") as folder:
        ids = [c.id for c in cases]
        context = mp.start_processes(_rank_main, args=(ranks, ids, folder, backend), nprocs=ranks, join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                if context.join(timeout=1.0):
                    break
            except mp.ProcessExitedException:
                # a rank that wrote all it saw and then died in gloo's teardown ("terminate called
                # without an active exception") ran every case: what it wrote stands
                if all((Path(folder) / f"rank{rank}.pt").exists() for rank in range(ranks)):
                    break
                raise
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
                raise TimeoutError(f"the {ranks} gloo processes took more than {TIMEOUT:.0f} s")
        found: dict[str, dict] = {}
        for rank in range(ranks):
            for case_id, result in torch.load(Path(folder) / f"rank{rank}.pt", weights_only=False).items():
                found.setdefault(case_id, {})[rank] = result
        return found


def _rank_main(rank: int, ranks: int, ids: list[str], folder: str, backend: str) -> None:
    """One spawned rank: join the group, run every case in order (every rank the same order), write what it saw."""
    import torch.distributed as dist

    quiet_dtensor()  # as in the sweep's own process: DTensor's redistribution advice on every 2-D case
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method=f"file://{folder}/store", rank=rank, world_size=ranks)
    try:
        results = {}
        for case_id in ids:
            case = Case.parse(case_id)
            world = Real(shard_cases.mesh_of(case), case.device)
            ran = running.run(case, world)
            results[case_id] = (ran.status, ran.reason, {p: v for p, v in ran.actual.items()})
        torch.save(results, Path(folder) / f"rank{rank}.pt")
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()
