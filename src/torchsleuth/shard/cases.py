"""The shard matrix: which ops, samples, meshes and placements a run covers, as pipeline ``Case`` records.

Design note. A shard case is a ``cases.records.Case`` like any other, so the
store, the findings file, ``report``, ``diff`` and ``repro`` read it as they
read an ops case:

    op       the catalog name: an OpInfo op (``softmax``) or a composite
             chain (``composite.flatten_sum``, see composites.py)
    variant  ``functional`` (the forward) or ``backward`` (its gradients)
    sample   the index of the sample among the op's samples in that dtype
    layouts  ``(argument, placement)`` for every argument not replicated,
             in placements.py's text (``(("input", "S1.R"),)``)
    oracle   ``shard:<mesh>`` (``shard:2x2``): the sharding oracle on that mesh
    edits    the shrinker's edits of the sample (search.edits), as for ops

A deep config (a run pointed at a few ops) plans targeted.py's cases: every
placement that matters of the op's shardable samples (an op that changes
its argument in place also with every argument replicated: DTensor's fast
path); its units are split
in ``DEEP_PARTS`` parts (``Part``), so that one op spreads over the workers.
Otherwise cases are planned per unit (op, dtype): per variant and sample
(up to ``samples`` of them, those with most dims first), up to ``combinations``
placements of its tensor arguments (placements.combinations), taken from
each mesh in turn, so that a small budget still reaches every mesh. The
composite chains, the seed story's own paths, get that budget on each mesh. Samples too
large to place cheaply (over ``MAX_ELEMENTS`` tensor elements) are left out,
as are ops that take no tensor. The sample lists are the ops engine's
(OpInfo's, seeded by op and dtype, made on the CPU), so a case is rebuilt
from its id in any process.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import zlib
from dataclasses import asdict, dataclass

import torch

from ..cases import opinfo
from ..cases.records import Case, Unit
from ..run import tree
from ..search import edits as sample_edits
from . import composites, placements as placing, surface, targeted

VARIANTS = ("functional", "backward")
DEFAULT_DTYPES = ("float32",)
DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "bool")
DEFAULT_SAMPLES = 1
DEFAULT_COMBINATIONS = 6
DEFAULT_GLOO = 16
MAX_ELEMENTS = 4096
DEEP_PARTS = 8  # a deep run's units per op and dtype (fixed, so that a run resumes whatever its --workers)
# A pointed run's matrix: about this many seconds of wall time on its workers, whatever the ops cost (sweep.py samples)
DEEP_SECONDS = 60.0
ORACLE = "shard:"


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardConfig:
    """What ``torchsleuth shard`` was asked to do (the store's run key is built from it)."""

    command: str = "shard"
    device: str = "cpu"
    backend: str = "local"  # "local" (LocalTensorMode), or the backend of a torchrun launch: "gloo", "nccl"
    ops: tuple[str, ...] = ()  # catalog names, resolved; empty: every one
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    variants: tuple[str, ...] = VARIANTS
    meshes: tuple[str, ...] = placing.MESHES
    kinds: tuple[str, ...] = placing.KINDS
    samples: int = DEFAULT_SAMPLES
    combinations: int = DEFAULT_COMBINATIONS
    gloo: int = DEFAULT_GLOO  # cases cross-checked on real gloo process groups (0: none)
    seed: int = 0
    imports: tuple[str, ...] = ()
    shrink: bool = True
    workers: int = 0  # processes the matrix is spread over (0: this one)
    timeout: float = 300.0  # seconds a case may take in a worker before it is a hang
    threads: int = 1
    deep: bool = False  # a run pointed at a few ops: targeted.py's plan of every placement that matters
    seconds: float = DEEP_SECONDS  # a deep run's matrix budget in wall seconds (0: none; sweep.py samples within it)

    def key(self) -> str:
        fields = asdict(self)
        for how in ("shrink", "workers", "timeout", "threads", "seconds"):
            fields.pop(how)
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def shard_case(*, op: str, variant: str, dtype: str, device: str, sample: int, mesh: str, placed: dict[str, str],
               edits: tuple[str, ...] = ()) -> Case:
    layouts = tuple(sorted((p, pl) for p, pl in placed.items() if not placing.is_replicate(pl)))
    return Case(op=op, variant=variant, dtype=dtype, device=device, sample=sample, layouts=layouts, edits=edits,
                oracle=ORACLE + mesh)


def mesh_of(case: Case) -> placing.Mesh:
    """The mesh a case names (``shard:2x2``; ``shard-gloo:2x2`` for its cross-check on gloo)."""
    return placing.mesh(case.oracle.split(":", 1)[1])


def is_shard_case(case: Case) -> bool:
    return case.oracle.startswith(ORACLE)


def all_ops() -> tuple[str, ...]:
    """Every op the shard catalog has: the OpInfo catalog, the composite chains and the surface chains."""
    return tuple(sorted(opinfo.catalog())) + composites.names() + surface.names()


def function(op: str):
    """The callable a case of ``op`` calls (its functional variant)."""
    if composites.is_composite(op):
        return composites.function(op)
    if surface.is_surface(op):
        return surface.function(op)
    return opinfo.get(op).op


@functools.lru_cache(maxsize=8)
def _samples(op: str, dtype: str) -> tuple:
    if composites.is_composite(op):
        return tuple(composites.samples(op, dtype))
    if surface.is_surface(op):
        return tuple(surface.samples(op, dtype))
    from ..run.samples import samples_of

    return tuple(samples_of(op, dtype))


def samples_of(op: str, dtype: str) -> tuple:
    return _samples(op, dtype)


def sample_of(case: Case):
    """The case's sample, with its edits made (CPU tensors)."""
    return sample_edits.apply(samples_of(case.op, case.dtype)[case.sample], case.edits)


def supported_dtypes(op: str, *, backward: bool) -> set[str]:
    if composites.is_composite(op):
        return set(composites.DTYPES)
    if surface.is_surface(op):
        return set(surface.DTYPES)
    entry = opinfo.get(op)
    return {str(d).removeprefix("torch.") for d in opinfo.dtypes(entry, "cpu", backward=backward)}


def variants_of(op: str) -> tuple[str, ...]:
    if op == composites.SELF_CHECK:
        return ("functional",)
    if composites.is_composite(op):
        return VARIANTS
    if surface.is_surface(op):
        return surface.variants(op)
    found = opinfo.functions(opinfo.get(op))
    return tuple(v for v in VARIANTS if v in found)


@dataclass(frozen=True, kw_only=True, slots=True)
class Part:
    """A share of one op and dtype's cases (every ``parts``-th from ``part``): a deep run's unit of work, so that a run
    pointed at one op still spreads over the workers. A catalog run's parts are whole (``parts == 1``)."""

    op: str
    dtype: str
    device: str
    part: int = 0
    parts: int = 1

    @property
    def key(self) -> str:
        whole = f"{self.op}|{self.dtype}|{self.device}"
        return whole if self.parts == 1 else f"{whole}|{self.part + 1}/{self.parts}"


def units(config: ShardConfig) -> list[Part]:
    parts = DEEP_PARTS if config.deep else 1
    found = []
    for op in config.ops or all_ops():
        dtypes = supported_dtypes(op, backward=False) | supported_dtypes(op, backward=True)
        found.extend(Part(op=op, dtype=d, device=config.device, part=i, parts=parts)
                     for d in config.dtypes if d in dtypes for i in range(parts))
    return found


def plan(unit: Part | Unit, config: ShardConfig) -> list[Case]:
    """Every case of one unit (see the design note; a deep config: targeted.py's plan), or of its part."""
    found = _plan(unit, config)
    parts = getattr(unit, "parts", 1)
    if parts == 1:
        return found
    # a deep part in a spread order, so that the cases a time budget leaves room for are an even sample of them all
    return sorted(found[unit.part::parts], key=lambda c: zlib.crc32(c.id.encode()))


def _plan(unit: Part | Unit, config: ShardConfig) -> list[Case]:
    op, dtype = unit.op, unit.dtype
    samples = samples_of(op, dtype)
    sizes = [sample_edits.elements(s) if _has_tensor(s) else -1 for s in samples]
    affordable = [i for i, n in enumerate(sizes) if 0 < n <= MAX_ELEMENTS]
    found = []
    for variant in variants_of(op):
        if variant not in config.variants or dtype not in supported_dtypes(op, backward=variant == "backward"):
            continue
        if config.deep:
            found.extend(_deep(op, dtype, variant, affordable, samples, config))
            continue
        for index in _sampled(affordable, samples, config.samples):
            tensors = tree.call_leaves((samples[index].input, *samples[index].args), samples[index].kwargs)
            per_mesh = []
            for mesh_name in config.meshes:
                mesh = placing.mesh(mesh_name)
                options = {path: placing.options(tuple(t.shape), _dtype_name(t.dtype), mesh, config.kinds)
                           for path, t in tensors.items()}
                seed = f"{config.seed}|{op}|{dtype}|{variant}|{mesh.name}|{index}"
                per_mesh.append([shard_case(op=op, variant=variant, dtype=dtype, device=config.device, sample=index,
                                            mesh=mesh.name, placed=placed)
                                 for placed in placing.combinations(options, config.combinations, seed=seed)])
            # the budget is per sample, spread over the meshes in turn
            spread_over = [c for batch in itertools.zip_longest(*per_mesh) for c in batch if c is not None]
            budget = config.combinations * (len(config.meshes) if composites.is_composite(op) else 1)
            found.extend(spread_over[:budget] if budget else spread_over)
    return list(dict.fromkeys(found))


def depth_words(config: ShardConfig) -> str:
    """What the plan covered and left out, in one line for the run's notes."""
    if config.deep:
        return ("deep: every placement that matters (each dim Shard, uneven and even, _StridedShard at each split factor, "
                "Partial of each reduction, the 2-D placements training makes) of each op's shardable samples, as given "
                "and grown, over every dim it reduces")
    samples = f"{config.samples} sample{'s' if config.samples != 1 else ''}" if config.samples else "every sample"
    placements = f"{config.combinations} placements" if config.combinations else "every placement"
    return (f"catalog: {samples} per op and dtype (most dims first), {placements} per sample and variant; "
            "point --ops at a few ops for every placement that matters")


def _sampled(affordable: list[int], samples, count: int) -> list[int]:
    """The catalog's ``count`` samples (0: all): those with the most dims to shard first, in the op's order."""
    if not count:
        return affordable
    best = sorted(affordable, key=lambda i: targeted.shardable(samples[i]), reverse=True)[:count]
    return sorted(best)


def _deep(op: str, dtype: str, variant: str, affordable: list[int], samples, config: ShardConfig) -> list[Case]:
    """The targeted plan's cases of one variant: each argument alone on every placement, then arguments together."""
    found = []
    for index, edits in targeted.samples(affordable, samples, function(op)):
        sample = sample_edits.apply(samples[index], edits)
        if edits and not _calls(op, sample):
            continue  # grown, or its dim moved, the sample no longer fits the op (a view's shape): no case to plan
        shapes = {p: (tuple(t.shape), _dtype_name(t.dtype)) for p, t in tree.call_leaves((sample.input, *sample.args), sample.kwargs).items()}
        for mesh_name in config.meshes:
            mesh = placing.mesh(mesh_name)
            placed = [{path: p} for path, (shape, dt) in shapes.items() for p in targeted.one(shape, dt, mesh, config.kinds)]
            placed += targeted.together({p: shape for p, (shape, _) in shapes.items()}, mesh, config.kinds)
            if mutates(op) and "replicate" in config.kinds:
                placed.append({})  # every argument replicated: DTensor's fast path, where an in-place op keeps its spec
            found += [shard_case(op=op, variant=variant, dtype=dtype, device=config.device, sample=index, mesh=mesh.name,
                                 placed=where, edits=edits) for where in placed]
    return found


def mutates(op: str) -> bool:
    """Whether ``op`` changes its argument in place (the surface's in-place chains and in-place views)."""
    return surface.is_surface(op) and surface.kind(op) in (surface.INPLACE, surface.VIEW)


def _calls(op: str, sample) -> bool:
    """Whether the plain op runs on ``sample`` (an edited sample the op refuses makes only skips)."""
    sample = tree.map_sample_tensors(sample, lambda path, t: t.clone())  # an in-place op must not write the cached sample
    try:
        with torch.no_grad():
            function(op)(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        return False
    return True


def _has_tensor(sample) -> bool:
    return bool(tree.call_leaves((sample.input, *sample.args), sample.kwargs))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
