"""Placements chosen by what the op does: the deep plan of a run pointed at a few ops.

Design note. A random handful of placements of OpInfo's first sample finds
little: a reduction's first samples are 0-d or too small to shard, so every
case was Partial, and the pairs the seed story's bugs need (a
``_StridedShard`` on one dim while the op reduces over another; FSDP2 with
tensor parallelism, ``[_StridedShard(d, sf), Shard(d)]`` on a 2-D mesh) were
never drawn. A pointed run plans instead, for each op:

* **samples** (``samples``): the op's samples with the most dims (and then
  the most elements; ``DEEP_SAMPLES`` of them, distinct by shape), each as it
  is (its sizes mostly uneven on every mesh) and grown (``search.edits``'s
  ``grow:S>K``: every size from 2 up to ``GROWN``, which divides by every mesh
  size and split factor the plan uses, so even shards and ``_StridedShard``
  fit). An op that takes a ``dim`` (a reduction, a normalisation, a scan)
  gets its first grown sample once per dim of its input, and with
  ``keepdim`` both ways where it takes one: with the placements below, every
  (sharded dim, reduced dim) pair.
* **placements of one argument** (``one``), the others replicated, so that
  a finding names the argument. On a 1-D mesh of ``n``: ``Shard(d)`` for every
  dim (even or uneven, as the sample's size falls), ``_StridedShard(d, sf)``
  for each split factor ``sf`` with ``size % (sf * n) == 0``, and ``Partial``
  of each reduce op the dtype allows. On a 2-D mesh, the combinations
  training makes: ``[_StridedShard(d, sf=m1), Shard(d)]`` (FSDP2 over tensor
  parallelism), ``[Shard(d), Shard(e)]`` for every pair, ``[Replicate,
  Shard(d)]``, ``[Shard(d), Partial(sum)]`` and ``[Replicate, Partial]`` of
  each reduce op (a ``Shard`` or ``Partial`` alone on mesh dim 0 is the 1-D
  mesh's case).
* **placements of the arguments together** (``together``): for the first two
  tensor arguments, every pair of their ``Shard`` placements on a 1-D mesh
  (a matmul's ``(S1, S0)``, an elementwise op's ``(S0, S0)``), and the same
  FSDP2+TP placement on every argument of one shape on a 2-D mesh.

A catalog run keeps the sampled plan (cases.py: ``samples`` and
``combinations`` within the budget), choosing samples with the most dims
first, and says what it left out.
"""

from __future__ import annotations

import itertools
import math

from ..run import tree
from ..search import edits as sample_edits
from ..search import argument_names, arguments
from . import placements as placing, support

DEEP_SAMPLES = 2
GROWN = 12  # divides by 2, 3, 4 and 6: every default mesh and split factor
MAX_GROWN = 8192  # elements of a grown sample; past it the sizes grow to SMALLER_GROWN
SMALLER_GROWN = 4
DIM_NAMES = ("dim", "axis")


def shardable(sample) -> tuple:
    """How much a sample offers to shard: its largest tensor's dims, then its elements (larger is better)."""
    tensors = tree.sample_tensors(sample)
    dims = max((t.dim() for t in tensors.values()), default=0)
    return min(dims, 4), sample_edits.elements(sample)


def samples(candidates: list[int], all_samples, function) -> list[tuple[int, tuple[str, ...]]]:
    """The (sample index, edits) pairs a pointed run plans for an op: its ``candidates`` among ``all_samples``, ``function``
    its callable (see the design note)."""
    ranked = sorted(candidates, key=lambda i: shardable(all_samples[i]), reverse=True)
    chosen, shapes = [], set()
    for index in ranked:
        shape = tuple(tuple(t.shape) for t in tree.sample_tensors(all_samples[index]).values())
        if shape not in shapes and shardable(all_samples[index])[0] > 0:
            chosen.append(index)
            shapes.add(shape)
        if len(chosen) == DEEP_SAMPLES:
            break
    found = []
    for rank, index in enumerate(chosen):
        sample = all_samples[index]
        found.append((index, ()))
        grown = grow(sample)
        dims = _dim_edits(sample, all_samples, function) if rank == 0 else []
        found += [(index, grown + d) for d in (dims or [()])]
    return list(dict.fromkeys(found))


def grow(sample) -> tuple[str, ...]:
    """The edits that grow every size of 2 and above of the sample to ``GROWN`` (or ``SMALLER_GROWN`` past ``MAX_GROWN``)."""
    sizes = sorted({d for t in tree.sample_tensors(sample).values() for d in t.shape if 1 < d < GROWN})
    if not sizes:
        return ()
    for target in (GROWN, SMALLER_GROWN):
        total = sum(math.prod(target if 1 < d < target else d for d in t.shape) for t in tree.sample_tensors(sample).values())
        if total <= MAX_GROWN:
            return tuple(sample_edits.grow(s, target) for s in sizes if s < target)
    return ()


def _dim_edits(sample, all_samples, function) -> list[tuple[str, ...]]:
    """For an op that takes a ``dim``: the edits setting it to each dim of the input, ``keepdim`` both ways where taken."""
    input_dims = getattr(sample.input, "ndim", 0)
    path = _dim_path(sample, function)
    if path is None:  # this sample leaves it at its default: named as another sample of the op passes it
        path = next((n for s in all_samples for n in DIM_NAMES if isinstance(s.kwargs.get(n), int)), None)
    if path is None or input_dims == 0:
        return []
    keepdim = any("keepdim" in s.kwargs for s in all_samples)
    found = []
    for d in range(input_dims):
        for keep in ((False, True) if keepdim else (None,)):
            edit = (arguments.edit(path, d),)
            found.append(edit if keep is None else (*edit, arguments.edit("keepdim", keep)))
    return found


def _dim_path(sample, function) -> str | None:
    """Where the sample passes its ``dim`` (``args[I]`` or a keyword; a list of dims there is replaced by one), or
    where the op takes it by keyword with a number default; None when it takes none."""
    for name in DIM_NAMES:
        if name in sample.kwargs:
            return name if isinstance(sample.kwargs[name], (int, tuple, list)) else None
    try:
        known = argument_names.signature(function, sample)
    except Exception:
        return None
    for i, name in enumerate(known.positional):
        if name in DIM_NAMES and i < len(sample.args) and type(sample.args[i]) is int:
            return f"args[{i}]"
    if any(name in DIM_NAMES for name, _ in known.defaulted):
        return next(name for name, _ in known.defaulted if name in DIM_NAMES)
    return None


def one(shape: tuple[int, ...], dtype: str, on: placing.Mesh, chosen: tuple[str, ...] = placing.KINDS) -> list[str]:
    """Every placement the deep plan gives one argument of ``shape`` and ``dtype`` on mesh ``on`` (design note)."""
    partials = _partials(dtype) if "partial" in chosen else []
    shards = [f"S{d}" for d in range(len(shape))] if "shard" in chosen else []
    strided = "strided" in chosen and support.strided_shard() is not None
    if len(on.shape) == 1:
        n = on.shape[0]
        found = list(shards)
        if strided:
            found += [f"SS{d}x{sf}" for d, size in enumerate(shape) for sf in range(2, size + 1) if size and size % (sf * n) == 0]
        return found + partials
    a, b = on.shape
    found = []
    if strided and shards:
        found += [f"SS{d}x{b}.S{d}" for d, size in enumerate(shape) if size and size % (a * b) == 0]
    found += [f"{x}.{y}" for x, y in itertools.product(shards, shards)]
    found += [f"R.{s}" for s in shards]
    if "Psum" in partials:
        found += [f"{s}.Psum" for s in shards]
    found += [f"R.{p}" for p in partials]
    return list(dict.fromkeys(found))


def together(shapes: dict[str, tuple[int, ...]], on: placing.Mesh, chosen: tuple[str, ...] = placing.KINDS) -> list[dict[str, str]]:
    """Placements of several arguments at once (design note): every pair of ``Shard``s of the first two on a 1-D mesh,
    the FSDP2+TP placement on all arguments of one shape on a 2-D mesh."""
    paths = list(shapes)
    if len(paths) < 2 or "shard" not in chosen:
        return []
    found = []
    if len(on.shape) == 1:
        first, second = paths[:2]
        for x, y in itertools.product(range(len(shapes[first])), range(len(shapes[second]))):
            found.append({first: f"S{x}", second: f"S{y}"})
        return found
    a, b = on.shape
    same = [p for p in paths if shapes[p] == shapes[paths[0]]]
    if len(same) > 1:
        for d, size in enumerate(shapes[paths[0]]):
            found.append({p: f"S{d}.R" for p in same})
            if support.strided_shard() is not None and "strided" in chosen and size and size % (a * b) == 0:
                found.append({p: f"SS{d}x{b}.S{d}" for p in same})
    return found


def _partials(dtype: str) -> list[str]:
    if dtype == "bool":
        return []
    floating = dtype.startswith(("float", "bfloat", "complex"))
    found = [f"P{r}" for r in placing.REDUCTIONS if r != "avg" or floating]
    return [p for p in found if not (dtype.startswith("complex") and p in ("Pmax", "Pmin"))]
