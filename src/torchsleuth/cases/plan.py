"""Which cases a sample yields: variants times layout assignments.

For each variant the tensors it lays out are: the inputs (functional, method,
in-place), the ``out=`` tensors (out), the inputs and the output gradients
(backward). Each layout that applies is given

* to one tensor at a time, so a failure names the argument;
* to every tensor it applies to at once, where there are two or more;

plus the all-contiguous case, which also carries the precision, device and
determinism oracles. A joint-only layout (``empty``) is only given jointly,
and only where it reaches every written tensor; the out variant, which lays
out its outputs alone, never gets one. The method variant,
which reaches the same kernels as the functional one, gets the all-
contiguous case and the joint assignments only.
"""

from __future__ import annotations

import torch

from . import layouts as layout_rules
from .records import Case

Assignment = tuple[tuple[str, str], ...]


def assignments(tensors: dict[str, torch.Tensor], layouts: tuple[str, ...], *, written: frozenset[str] = frozenset(), singles: bool = True) -> list[Assignment]:
    found: list[Assignment] = [()]
    for layout in layouts:
        if layout == layout_rules.CONTIGUOUS:
            continue
        fits = [p for p, t in tensors.items() if layout_rules.applies(layout, t, written=p in written)]
        if not fits:
            continue
        if layout_rules.by_name(layout).joint_only:
            if written and not all(p in fits for p in written):
                continue
            found.append(tuple(sorted((p, layout) for p in fits)))
            continue
        if singles:
            found.extend(((p, layout),) for p in fits)
        if len(fits) > 1:
            found.append(tuple(sorted((p, layout) for p in fits)))
    return found


def jointly(tensors: dict[str, torch.Tensor], layouts: tuple[str, ...], *, written: frozenset[str] = frozenset()) -> list[Assignment]:
    """The all-contiguous assignment, then each layout on every tensor it fits at once: one a layout (the widest of
    ``assignments``' for it; a read-only layout leaves the ``written`` tensors out). What a searched case is tried
    under (search.compose)."""
    widest: dict[str, Assignment] = {}
    for assignment in assignments(tensors, layouts, written=written):
        if assignment and len(assignment) > len(widest.get(assignment[0][1], ())):
            widest[assignment[0][1]] = assignment
    return [(), *widest.values()]


def cases_for(*, op: str, variant: str, dtype: str, device: str, sample: int, tensors: dict[str, torch.Tensor], layouts: tuple[str, ...],
              written: frozenset[str] = frozenset()) -> list[Case]:
    if variant == "out":  # only the outputs are laid out: a joint-only layout would reach no input
        layouts = tuple(name for name in layouts if not layout_rules.by_name(name).joint_only)
    singles = variant != "method"
    return [
        Case(op=op, variant=variant, dtype=dtype, device=device, sample=sample, layouts=assignment)
        for assignment in assignments(tensors, layouts, written=written, singles=singles)
    ]


def spread(count: int, cap: int) -> list[int]:
    """``cap`` indices spread evenly over ``range(count)``, first and last included."""
    if cap <= 0 or count <= cap:
        return list(range(count))
    if cap == 1:
        return [0]
    return sorted({round(i * (count - 1) / (cap - 1)) for i in range(cap)})
