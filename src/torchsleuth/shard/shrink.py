"""Shrinking a shard finding: the smallest case that still fails the same way, replayed before it is reported.

Design note. The ops shrinker's rules (shrink.shrinker) with the moves a
shard case has. One definition of simpler, compared as a tuple, smallest
first: the sample's tensor elements, the arguments not replicated, the mesh's
ranks, the placements' non-replicated mesh dims, the values' plainness. The
moves, cheapest to check first: a smaller sample of the op; one dimension
size narrowed in every tensor (``search.edits``' ``size:S>K``); one argument
replicated; one mesh dim of a placement replicated; a mesh with fewer ranks
(a 2-D placement keeps its first mesh dim's part); one tensor's values made
plain. A candidate is kept only if it costs less and still fails with the
same kind, reference and op (``shrinker.matching``). The original case is
replayed first: one that does not recur on a replay judged clean is flaky,
never reported; the result is replayed once more at the end.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from ..cases.records import Case
from ..judge.records import Finding, Outcome
from ..search import edits
from ..shrink.records import Shrunk
from ..shrink import shrinker
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
    """The ops shrinker's search (shrink.shrinker.shrink) with a shard case's moves and cost."""
    return shrinker.shrink(finding, run, moves=candidates, simpler=cost, max_tries=max_tries, max_seconds=max_seconds)


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
