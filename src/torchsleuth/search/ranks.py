"""The ranks search: an op's sample grown to the ranks where the layouts that need them exist.

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

An op over a dim (a reduction, a scan, a softmax, a sort) is grown too,
where its call has one tensor with elements and its other arguments are the
dim, flags and dtypes (by the names the callable gives them,
search.argument_names): the tensor is tiled into ``SHAPES[K]`` as above and
a ``dim`` it names moves with it, to dim 1, the channels, at 4-D only
(each of the op's samples grows to the same call but for its flags) (an int stays an
int, a list of dims becomes ``[1]``). Dim 1 is where the layouts differ
most: innermost in memory for ``channels_last``, outermost for contiguous,
so the same reduction walks a strided path in one and a unit-stride path in
the other. An argument that depends on the shape (a size, an index, a
count) stops the plan: the grown call would be another call, or none.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..cases import opinfo
from ..errors import UsageError
from ..run import tree
from . import values
from .argument_names import signature
from .registry import Search

DESCRIPTION = ("an elementwise op's tensors, or the one tensor of an op over a dim (its dim moved to 1), grown to 3-D, 4-D "
               "and 5-D (values tiled), where permuted and channels-last layouts exist")
VERB = "rank"
FORM = "rank:K"

# The shape each rank grows to: every dim above 1, and odd and even sizes, so no layout degenerates to contiguous.
SHAPES = {3: (3, 4, 5), 4: (2, 3, 4, 5), 5: (2, 3, 2, 4, 5)}
VARIANTS = ("functional", "method", "inplace", "backward")
# The dim a grown call of an op over a dim is taken over: the channels; and the one rank it is grown to (every sample
# of such an op grows to the same call but for its flags: one rank, where channels-last and permuted both exist).
DIM = 1
OVER_DIM = 4
# The other arguments an op over a dim may have, by name, for its grown call to be the same call on more elements.
FLAGS = frozenset({"keepdim", "dtype", "descending", "stable", "unbiased", "correction", "largest", "sorted", "half_to_float",
                   "exclusive", "reverse", "out_dtype"})


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """``rank:K`` for each rank of SHAPES above the call's: an elementwise op whose tensors all share one shape, or an op
    over a dim with one tensor (``over_dim``)."""
    if variant not in VARIANTS:
        return []
    if values.op_kind(op) == "pointwise":
        shape, ranks = call_shape(sample), SHAPES
    else:
        shape, ranks = over_dim(op, variant, sample), (OVER_DIM,)
    if shape is None:
        return []
    return [(f"{VERB}:{rank}",) for rank in ranks if rank > len(shape)]


def over_dim(op: str, variant: str, sample) -> tuple[int, ...] | None:
    """The shape of the one tensor of a call over a dim whose other arguments are its dim and flags (FLAGS); None for
    any other call."""
    tensors = [t for t in tree.sample_tensors(sample).values() if t.dim() > 0]
    if len(tensors) != 1 or tensors[0].numel() == 0 or len(tree.sample_tensors(sample)) != 1:
        return None
    function = opinfo.functions(opinfo.get(op)).get(variant) or opinfo.functions(opinfo.get(op)).get("functional")
    names = [*signature(function, sample).positional, *sample.kwargs]
    if len(names) != len(sample.args) + len(sample.kwargs) or "dim" not in names:
        return None  # an argument the callable does not name, or no dim: not a call over a dim
    if any(name not in FLAGS | {"dim"} for name in names):
        return None
    dim = dict(zip(names, [*sample.args, *sample.kwargs.values()]))["dim"]
    if not (isinstance(dim, int) and not isinstance(dim, bool)) and not (isinstance(dim, (list, tuple)) and dim):
        return None  # every dim (None) or a dim named by a string
    return tuple(tensors[0].shape)


def call_shape(sample) -> tuple[int, ...] | None:
    """The one shape every tensor of the sample has (0-d scalars aside), if it has elements; None otherwise."""
    tensors = tree.sample_tensors(sample)
    shapes = {tuple(t.shape) for t in tensors.values() if t.dim() > 0}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    return shape if math.prod(shape) > 0 else None


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``rank:K`` made: every tensor of the call's shape tiled into ``SHAPES[K]``, and the dim
    of a call over a dim moved to DIM."""
    try:
        target = SHAPES[int(rest)]
    except (ValueError, KeyError):
        raise UsageError(f"unknown rank edit 'rank:{rest}'; allowed: {', '.join(f'rank:{k}' for k in SHAPES)}") from None
    shape = call_shape(sample)
    if shape is None:
        return sample
    grown = tree.map_sample_tensors(sample, lambda path, t: _tiled(t, target) if tuple(t.shape) == shape else t)
    if not op or values.op_kind(op) == "pointwise" or over_dim(op, "functional", sample) is None:
        return grown
    return _dim_moved(op, grown)


def _dim_moved(op: str, sample):
    """``sample`` with its ``dim`` argument (positional or keyword) set to DIM, an int as an int, dims as ``[DIM]``."""
    function = opinfo.functions(opinfo.get(op)).get("functional")
    positional = signature(function, sample).positional

    def moved(dim):
        return DIM if isinstance(dim, int) else type(dim)([DIM])

    if "dim" in sample.kwargs:
        return dataclasses.replace(sample, kwargs={**sample.kwargs, "dim": moved(sample.kwargs["dim"])})
    args = [moved(a) if name == "dim" else a for name, a in zip(positional, sample.args)]
    return dataclasses.replace(sample, args=tuple(args))


def _tiled(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    flat = t.reshape(-1)
    return flat[torch.arange(math.prod(shape)) % flat.numel()].reshape(shape).contiguous()


SEARCH = Search(name="ranks", description=DESCRIPTION, edits="the rank of an elementwise call or a call over a dim (rank: edits)", order=35, plan=plan,
                verb=VERB, form=FORM, apply=apply)
