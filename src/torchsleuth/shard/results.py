"""What a sharded call's results are judged on beyond their values: the spec of each DTensor, and numbers ranks read.

Design note. ``full_tensor()`` gathers a result through its placements, but
a DTensor is more than its values: its spec (global shape and strides, the
placements) is what every later redistribution reads. ``spec_words`` checks
that it describes the tensor: the global shape the single-device op gives,
the wrapper's shape and strides, and on every rank the local shape its
placements give (DTensor's own ``_compute_local_shape_and_global_offset``).
torch 2.13's dispatch returns an in-place op's ``self`` unchanged when the
placements are (``squeeze_`` of a replicated DTensor, or of a dim the
shards do not split), so its spec keeps the old shape: values gather right
until the next redistribution.

A Python number read from a DTensor (``item()``, ``float()``, ``bool()``)
is judged as a 0-d tensor (``number``: a float in the case's dtype, so the
judge's rounding allowance applies). Where simulated ranks read different
numbers (world.reads), ``rank_numbers`` makes each rank's number the
result, when the results are those numbers (``PerRank``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import placements as placing, support


def spec_wrong(results: dict, expected: dict, world) -> str:
    """How the spec of a DTensor result fails to describe it ("" when every one does): see ``spec_words``."""
    for path, value in results.items():
        if isinstance(value, support.dtensor().DTensor):
            want = expected.get(path)
            wrong = spec_words(value, world, tuple(want.shape) if isinstance(want, torch.Tensor) else None)
            if wrong:
                return f"{path}: {wrong}"
    return ""


def spec_words(dt, world, shape: tuple | None = None) -> str:
    """How ``dt``'s spec fails to describe the tensor ("" when it does): the global shape (the wrapper's, and
    ``shape``, the single-device result's, when given), the wrapper's strides, and on every rank the local shape its
    placements give. An in-place op that changes shape or strides must update it; later redistributions read it."""
    spec = dt._spec
    claimed = tuple(spec.shape)
    if shape is not None and claimed != shape:
        return f"the spec's shape is {list(claimed)}, the single-device result's {list(shape)}"
    if tuple(dt.shape) != claimed or tuple(dt.stride()) != tuple(spec.stride):
        return (f"the spec says shape {list(claimed)} and strides {list(spec.stride)}, the DTensor has {list(dt.shape)} "
                f"and {list(dt.stride())}")
    try:
        from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset as local_shape
    except ImportError:  # an older torch: the global shape alone
        return ""
    with world.disabled():
        locals_ = world.values(dt._local_tensor)
        ranks = range(len(locals_)) if len(locals_) > 1 else [getattr(world, "rank", 0)]
        for rank, local in zip(ranks, locals_):
            try:
                want, _ = local_shape(claimed, world.mesh.shape, list(world.mesh.coordinate(rank)), spec.placements)
            except Exception:  # placements the helper does not know: not checked
                return ""
            if tuple(local.shape) != tuple(want):
                return (f"rank {rank}'s local tensor has shape {list(local.shape)}, but the spec "
                        f"({placing.words(placing.text(spec.placements))} of {list(claimed)}) gives it {list(want)}")
    return ""


@dataclass(frozen=True, slots=True)
class PerRank:
    """A Python number each rank read on its own (world.reads), as one 0-d tensor per rank."""

    values: list


def is_number(value) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, torch.SymInt)


def number(value, like: torch.dtype) -> torch.Tensor:
    """A Python number as the judge compares it: a 0-d tensor (a float in the case's dtype, so its rounding is allowed)."""
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    return torch.tensor(value, dtype=like)


def number_dtype(tensors: dict) -> torch.dtype:
    floating = [t.dtype for t in tensors.values() if t.is_floating_point()]
    return floating[0] if floating else torch.float64


def rank_numbers(results: dict, differing: list[dict], ranks: int, like: torch.dtype) -> dict | None:
    """Each result that is a number ranks read differently, as every rank's value; None when another result depends
    on such a read (the simulator went on with rank 0's number on every rank) or a number cannot be matched to one."""
    found = {}
    for path, value in results.items():
        if not is_number(value):
            return None
        read = next((r for r in reversed(differing) if r.get(0) == value and type(r.get(0)) is type(value)), None)
        if read is None:
            return None
        found[path] = PerRank([number(read[rank], like) for rank in range(ranks)])
    return found
