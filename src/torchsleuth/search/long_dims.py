"""The ``long`` search: the dim an op works along, grown past block sizes.

Design note. OpInfo's samples give a scan, a reduction or a softmax a dim
of 5 to 20 entries; kernels switch strategy past their block sizes (a scan
done in blocks of 256 and then carried, a reduction split across threads
past a grain size, a vectorised inner loop), and bugs live on the far side.
This search takes the dim the op works along and tiles the input's entries
along it (the existing ``dim:PATH@D>K`` edit: entry ``i`` holds entry
``i % size``) to lengths just past the usual block sizes, 257, 1025 and
4097: cheap (a few thousand elements times the sample's other dims), and
judged by the same references as every case, float64 with the tolerance
rule that widens with the reduction length.

Which dim: the op's ``dim`` argument, found by name among the sample's
keyword arguments, or by position through the aten schema of the op (the
first overload that takes a ``dim``); an op with no ``dim`` whose OpInfo is
a reduction reduces everything, so its innermost dim is grown. Ops with
neither are left alone: growing a dim of some other op only makes a bigger
sample. Only the input is grown: an argument that must match it (a
``layer_norm`` weight) makes the call raise, which is loud, never a finding.
"""

from __future__ import annotations

import functools

import torch

from ..cases import opinfo
from .registry import Search

DESCRIPTION = "the dim a scan, reduction or softmax works along grown to 257, 1025 and 4097 entries (past block sizes)"

LENGTHS = (257, 1025, 4097)
# The variants whose kernels work along the dim (out= and in-place share the functional one's loops mostly,
# but not always: they are cheap enough to include).
VARIANTS = ("functional", "inplace", "out", "backward")
# The largest tensor a grown sample may hold: past it the case costs seconds, not milliseconds.
MAX_ELEMENTS = 1 << 20


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """``dim:input@D>K`` for each length past the input's size along the op's dim."""
    if variant not in VARIANTS or not isinstance(sample.input, torch.Tensor) or sample.input.dim() == 0:
        return []
    dim = working_dim(op, sample)
    if dim is None:
        return []
    shape = tuple(sample.input.shape)
    if shape[dim] == 0:
        return []
    others = max(1, sample.input.numel() // shape[dim])
    return [(f"dim:input@{dim}>{length}",) for length in LENGTHS if length > shape[dim] and length * others <= MAX_ELEMENTS]


def working_dim(op: str, sample) -> int | None:
    """The input's dim the op works along, as a non-negative index; None when it names none and is no reduction."""
    ndim = sample.input.dim()
    value = sample.kwargs.get("dim")
    if value is None:
        position = _dim_position(op)
        if position is not None and position < len(sample.args):
            value = sample.args[position]
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None and _reduces_everything(op):
            return ndim - 1
        return None
    if not -ndim <= value < ndim:
        return None
    return value % ndim


@functools.cache
def _dim_position(op: str) -> int | None:
    """Where ``dim`` stands among the arguments after the input, by the op's aten schema (the first overload with one)."""
    entry = opinfo.get(op)
    name = getattr(entry, "aten_name", None) or entry.name.split(".")[-1]
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    for overload in packet.overloads():
        arguments = [a.name for a in getattr(packet, overload)._schema.arguments if not a.kwarg_only]
        if "dim" in arguments[1:]:
            return arguments.index("dim") - 1
    return None


@functools.cache
def _reduces_everything(op: str) -> bool:
    return any(c.__name__ == "ReductionOpInfo" for c in type(opinfo.get(op)).__mro__)


SEARCH = Search(name="long", description=DESCRIPTION, edits="the length of the dim an op works along (dim: edits)", order=30, plan=plan)
