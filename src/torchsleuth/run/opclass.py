"""What kind of computation an op is: pointwise, a reduction, or neither.

Decided from facts PyTorch states (STYLE.md): the OpInfo classes an entry is
(a ufunc is elementwise by PyTorch's own account) and the tags of the aten ops
a call's trace reached. Oracles that judge an element against itself
elsewhere (sizes, large) apply only to pointwise ops and reductions.
"""

from __future__ import annotations

import functools

import torch

from ..cases import opinfo
from .trace import PLUMBING

UFUNCS = frozenset({"UnaryUfuncInfo", "BinaryUfuncInfo"})
POINTWISE_OR_REDUCTION_CLASSES = UFUNCS | {"ReductionOpInfo"}
# dtype conversions compute too, elementwise
_CONVERSIONS = frozenset({"_to_copy", "copy_"})


def classes(entry) -> set[str]:
    """The names of the OpInfo classes the entry is."""
    return {c.__name__ for c in type(entry).__mro__}


@functools.cache
def may_be_pointwise_or_reduction(op: str) -> bool:
    """Whether the op may be pointwise or a reduction (the trace decides when the case runs)."""
    entry = opinfo.get(op)
    if classes(entry) & POINTWISE_OR_REDUCTION_CLASSES:
        return True
    wanted = {torch.Tag.pointwise, getattr(torch.Tag, "reduction", torch.Tag.pointwise)}
    try:
        packet = getattr(torch.ops.aten, getattr(entry, "aten_name", None) or entry.name)
        return any(wanted & set(getattr(packet, name).tags) for name in packet.overloads())
    except Exception:  # no such aten op
        return False


def short_name(op) -> str:
    return op._schema.name.split("::")[-1]


def computation(trace, entry) -> str:
    """"pointwise", "reduction", or why the call is neither (a sentence)."""
    computing = [op for op in trace.ops if short_name(op) not in PLUMBING]
    if not computing:
        computing = [op for op in trace.ops if short_name(op) in _CONVERSIONS]
    if not computing:
        return "the call computes nothing (only views)"
    if trace.has_tag(torch.Tag.nondeterministic_seeded):
        return "the op draws random numbers: an element's draw depends on its position by design"
    reduction = getattr(torch.Tag, "reduction", None)
    if reduction is not None and any(reduction in op.tags for op in computing):
        return "reduction"
    if all(torch.Tag.pointwise in op.tags for op in computing) or classes(entry) & UFUNCS:
        return "pointwise"
    odd = sorted({short_name(op) for op in computing if torch.Tag.pointwise not in op.tags})
    return f"neither pointwise nor a reduction: it computes with {', '.join(odd[:3])}"
