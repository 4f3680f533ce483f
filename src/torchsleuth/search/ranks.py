"""The ranks search: an elementwise op's sample grown to the ranks where the layouts that need them exist.

Design note. OpInfo's samples of elementwise ops are mostly 1-D to 3-D, so
the layouts that exist only at a higher rank (``channels_last`` at 4-D,
``channels_last_3d`` at 5-D, ``permuted`` from 3-D on) never reach those
kernels, whose channels-last and permuted loops are paths of their own. An
edit ``rank:K`` gives every tensor of the sample that has the call's shape
(the largest) the shape ``SHAPES[K]``, its values tiled in order (entry ``i``
holds entry ``i % n``); tensors of no elements, or of other shapes (a
broadcast operand), leave the op alone: it is planned only where every tensor
has the call's shape or is a 0-d scalar, so the grown call is the same
elementwise call on more elements. Composition (search.compose) then lays
the grown tensors out every way that fits them.

Reductions and scans over a dim are not grown: their dims and the op's
``dim`` argument would have to move together.
"""

from __future__ import annotations

import math

import torch

from ..errors import UsageError
from ..run import tree
from . import values
from .registry import Search

DESCRIPTION = "an elementwise op's tensors grown to 3-D, 4-D and 5-D (values tiled), where permuted and channels-last layouts exist"
VERB = "rank"
FORM = "rank:K"

# The shape each rank grows to: every dim above 1, and odd and even sizes, so no layout degenerates to contiguous.
SHAPES = {3: (3, 4, 5), 4: (2, 3, 4, 5), 5: (2, 3, 2, 4, 5)}
VARIANTS = ("functional", "method", "inplace", "backward")


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """``rank:K`` for each rank of SHAPES above the call's, for an elementwise op whose tensors all share one shape."""
    if variant not in VARIANTS or values.op_kind(op) != "pointwise":
        return []
    shape = call_shape(sample)
    if shape is None:
        return []
    return [(f"{VERB}:{rank}",) for rank in SHAPES if rank > len(shape)]


def call_shape(sample) -> tuple[int, ...] | None:
    """The one shape every tensor of the sample has (0-d scalars aside), if it has elements; None otherwise."""
    tensors = tree.sample_tensors(sample)
    shapes = {tuple(t.shape) for t in tensors.values() if t.dim() > 0}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    return shape if math.prod(shape) > 0 else None


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``rank:K`` made: every tensor of the call's shape tiled into ``SHAPES[K]``."""
    try:
        target = SHAPES[int(rest)]
    except (ValueError, KeyError):
        raise UsageError(f"unknown rank edit 'rank:{rest}'; allowed: {', '.join(f'rank:{k}' for k in SHAPES)}") from None
    shape = call_shape(sample)
    if shape is None:
        return sample
    return tree.map_sample_tensors(sample, lambda path, t: _tiled(t, target) if tuple(t.shape) == shape else t)


def _tiled(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    flat = t.reshape(-1)
    return flat[torch.arange(math.prod(shape)) % flat.numel()].reshape(shape).contiguous()


SEARCH = Search(name="ranks", description=DESCRIPTION, edits="the rank of an elementwise call (rank: edits)", order=35, plan=plan,
                verb=VERB, form=FORM, apply=apply)
