"""Shrinking a shard finding: the smallest case that still fails the same way, replayed before it is reported.

Design note. The ops shrinker's rules (shrink.shrinker) with the moves a
shard case has. One definition of simpler, compared as a tuple, smallest
first: the sample's tensor elements, the arguments not replicated, the mesh's
ranks, the placements' non-replicated mesh dims, the values' plainness. The
moves, cheapest to check first: a smaller sample of the op; one dimension
size narrowed in every tensor (``run.edits``' ``size:S>K``); one argument
replicated; one mesh dim of a placement replicated; a mesh with fewer ranks
(a 2-D placement keeps its first mesh dim's part); one tensor's values made
plain. A candidate is kept only if it costs less and still fails with the
same kind, reference and op (``shrinker.matching``). The original case is
replayed first: one that does not recur on a replay judged clean is flaky,
never reported; the result is replayed once more at the end.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

from ..cases.records import Case
from ..judge.records import Finding, Outcome
from ..run import edits
from ..shrink.records import Shrunk
from ..shrink.shrinker import matching
from . import cases as shard_cases, placements as placing

MAX_TRIES = 40
MAX_SECONDS = 20.0
_VALUE_COST = {"zeros": 0, "ones": 1, "small": 2}


def cost(case: Case) -> tuple:
    sample = shard_cases.sample_of(case)
    mesh = shard_cases.mesh_of(case)
    placed = sum(sum(p != "R" for p in pl.split(".")) for _, pl in case.layouts)
    plain = {}
    for edit in case.edits:
        if edit.startswith("values:"):
            path, kind = edit.removeprefix("values:").rsplit("=", 1)
            plain[path] = _VALUE_COST[kind]
    values = sum(plain.get(p, 3) for p in edits.paths(sample))
    return (edits.elements(sample), len(case.layouts), mesh.ranks, placed, values)


def shrink(finding: Finding, run: Callable[[Case], Outcome], *, max_tries: int = MAX_TRIES, max_seconds: float = MAX_SECONDS) -> Shrunk:
    original = Case.parse(finding.case_id)
    tries = 0

    def replay(case: Case) -> Outcome:
        nonlocal tries
        tries += 1
        return run(case)

    first = replay(original)
    if matching(first, finding) is None:
        if first.status != "pass":
            return Shrunk(finding=finding.id, status="kept", case_id=original.id, tries=tries,
                          reason=f"its replay did not run cleanly ({first.status}: {first.reason})")
        return Shrunk(finding=finding.id, status="flaky", case_id=original.id, tries=tries,
                      reason="the finding did not recur when its case was replayed")
    best, best_cost = original, _cost(original)
    deadline = time.monotonic() + max_seconds
    progress = True
    while progress and tries < max_tries and time.monotonic() < deadline:
        progress = False
        for candidate in candidates(best):
            if tries >= max_tries or time.monotonic() >= deadline:
                break
            candidate_cost = _cost(candidate)
            if candidate_cost is None or candidate_cost >= best_cost:
                continue
            if matching(replay(candidate), finding) is not None:
                best, best_cost, progress = candidate, candidate_cost, True
                break
    last = replay(best)
    if matching(last, finding) is None and best != original:
        best, last = original, replay(original)
    replayed = matching(last, finding)
    if replayed is None:
        return Shrunk(finding=finding.id, status="flaky", case_id=original.id, tries=tries,
                      reason="the finding recurred once but not on its second replay")
    return Shrunk(finding=finding.id, status="shrunk", case_id=best.id, replay=replayed, tries=tries)


def candidates(case: Case) -> Iterator[Case]:
    sample = shard_cases.sample_of(case)
    samples = shard_cases.samples_of(case.op, case.dtype)
    size = edits.elements(sample)
    smaller = sorted((edits.elements(s), i) for i, s in enumerate(samples) if i != case.sample and edits.elements(s) < size)
    paths = set(edits.paths(sample))
    for _, index in smaller[:4]:
        other = set(edits.paths(samples[index]))
        if all(p in other for p, _ in case.layouts):
            yield dataclasses.replace(case, sample=index, edits=())
    for dim_size in edits.sizes(sample):
        for new in dict.fromkeys((1, 2, dim_size // 2)):
            if 0 < new < dim_size:
                yield dataclasses.replace(case, edits=case.edits + (edits.size(dim_size, new),))
    for i in range(len(case.layouts)):
        yield dataclasses.replace(case, layouts=case.layouts[:i] + case.layouts[i + 1:])
    for i, (path, placement) in enumerate(case.layouts):
        parts = placement.split(".")
        for d, part in enumerate(parts):
            if part != "R" and len(parts) > 1:
                simpler = ".".join("R" if j == d else p for j, p in enumerate(parts))
                layouts = case.layouts[:i] + ((() if placing.is_replicate(simpler) else ((path, simpler),))) + case.layouts[i + 1:]
                yield dataclasses.replace(case, layouts=tuple(layouts))
    mesh = shard_cases.mesh_of(case)
    for smaller_mesh in _smaller_meshes(mesh):
        layouts = tuple((p, pl.split(".")[0]) for p, pl in case.layouts) if len(mesh.shape) > len(smaller_mesh.shape) else case.layouts
        layouts = tuple((p, pl) for p, pl in layouts if not placing.is_replicate(pl))
        yield dataclasses.replace(case, oracle=shard_cases.ORACLE + smaller_mesh.name, layouts=layouts)
    plain = {e.removeprefix("values:").rsplit("=", 1)[0] for e in case.edits if e.startswith("values:")}
    for path in sorted(paths - plain):
        yield dataclasses.replace(case, edits=case.edits + (edits.values(path, "small"),))


def _smaller_meshes(mesh: placing.Mesh) -> list[placing.Mesh]:
    if len(mesh.shape) == 2:
        return [placing.mesh(str(mesh.shape[0]))] + ([placing.mesh(f"{mesh.shape[0]}x2")] if mesh.shape[1] > 2 else [])
    return [placing.mesh(str(n)) for n in range(2, mesh.shape[0])]


def _cost(case: Case):
    try:
        return cost(case)
    except Exception:  # an edit the sample cannot take
        return None
