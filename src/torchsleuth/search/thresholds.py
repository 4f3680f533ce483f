"""The ``thresholds`` search: values led by the function, at its seams in the case's dtype, in the vector body and
the scalar tail.

Design note. The ``values`` search gives every op the same special values of
a dtype; a kernel's own seams sit elsewhere: sinh overflows at 89.41599 in
float32 (the largest number whose exact sinh fits), lgamma has a pole at
every non-positive integer and zeros at 1 and 2, expm1(x) rounds to x below
2^-24. The edit ``edge:PATH=SET`` (``edge:PATH=SET@K``) gives tensor ``PATH``
the values of set ``SET`` for the case's op and the tensor's dtype, laid out
as the values search lays out its sets (``values.cycle``: an odd cycle,
rotated by ``K``, after the same ``dim:`` growth edits, so every set sits in
the vector body and, whole, in the scalar tail). The sets:

* for the one-argument functions of run.exact_functions (``edges``): the
  numbers of the dtype each side of where the exact result leaves the range
  (``overflow``), underflows (``subnormal``, ``zero``), rounds to the
  argument (``same``) or to +-1 (``unit``), changes sign (``sign``: zeros,
  and poles crossed), and around the poles on the integers (``pole``);
  each found by bisection against mpmath in the dtype's own numbers, cached
  per op and dtype;
* for the ops that round to an integer or divide and round
  (``boundaries``): operands within a unit of an integer or a halfway point,
  and dividend/divisor pairs whose exact quotient is within a unit of an
  integer (``edge:input=quotient`` with ``edge:args[0]=divisor``, aligned);
* for the other pointwise ops: magnitudes over the dtype's whole range on a
  log scale, both signs (``magnitude.1`` .. ``magnitude.4``), every floating
  tensor of the case's dtype, rotated by its position.

Judged as the values search's cases are: a lower dtype against the float64
call (the precision reference), float64 by the oracles that judge the
searched values (``on_values``: ``exact`` at the edited elements, and the
autodiff oracle's forward, reverse and second-order derivatives there, at
every set: where the exact derivative, or its product with the oracle's
tangent and cotangent, leaves the dtype's normal range, that element has no
verdict, oracles.autodiff.ranges). The
function-led sets are planned for the backward variant too (their points are
where a derivative formula's own overflow and poles are, which the float64
run with the dtype's range excuses where it is the intermediates'); the
magnitudes and rounding sets forward only, as the values search keeps its
``extreme`` set (a gradient formula squares them). The ``same`` sets are not
planned in place: where f(x) rounds to x, a write of the right value leaves
self's bits as they were, and the in-place contract cannot tell it from a
dropped write. Nor the ``unit`` sets backward: where f saturates, a gradient
formula that reads the result rounded to the dtype (tanh's ``1 - y*y``,
expm1's ``y + 1``) loses every digit (0 in float16 where float64 gives
7e-4), which is the formula's, not a kernel's bug; the autodiff oracle still
judges them within the dtype. Random ops, complex dtypes and non-pointwise
ops get nothing.
"""

from __future__ import annotations

import torch

from ..errors import UsageError
from ..run import tree
from . import boundaries, edges, values
from .registry import Search

DESCRIPTION = ("values led by the function: where its exact result overflows, underflows, rounds to its argument or to 1, "
               "changes sign, its poles (bisected against mpmath per op and dtype); operands within a unit of a rounding "
               "boundary; magnitudes over the whole range, both signs")
VERB = "edge"
FORM = "edge:PATH=SET[@K]"

VARIANTS = ("functional", "backward", "inplace")
FORWARD_ONLY = ("magnitude", "integer", "half", "quotient")  # set families whose backward is not judged fairly


def edge(path: str, name: str, rotation: int = 0) -> str:
    return f"{VERB}:{path}={name}" + (f"@{rotation}" if rotation else "")


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """One case per set of the op in ``dtype``, after the values search's growth edits."""
    wanted = getattr(torch, dtype)
    if variant not in VARIANTS or not wanted.is_floating_point or values.op_kind(op) != "pointwise":
        return []
    tensors = tree.sample_tensors(sample)
    targets = [path for path, t in tensors.items() if t.dtype == wanted and t.numel() > 0]
    if not targets:
        return []
    grown = values.growth("pointwise", tensors)
    if edges.known(op):
        return [(*grown, edge(targets[0], name)) for name in edges.sets(op, wanted)
                if not (variant == "inplace" and name.startswith("same") or variant == "backward" and name.startswith("unit"))]
    names = [n for n in boundaries.names(op, wanted) if variant != "backward" or n.partition(".")[0] not in FORWARD_ONLY]
    if op in boundaries.BINARY_ROUNDING:
        if len(targets) < 2 or tensors[targets[0]].shape != tensors[targets[1]].shape:
            return []  # the quotient and its divisor must meet element by element
        return [(*grown, edge(targets[0], name), edge(targets[1], "divisor")) for name in names]
    if op in boundaries.UNARY_ROUNDING:
        return [(*grown, edge(targets[0], name)) for name in names]
    return [(*grown, *(edge(path, name, i) for i, path in enumerate(targets))) for name in names]


def set_values(op: str, name: str, dtype: torch.dtype) -> tuple[float, ...]:
    """The values of set ``name`` for ``op`` in ``dtype``: the function's seams, else the boundaries' family."""
    found = edges.sets(op, dtype).get(name) if edges.known(op) else None
    return found if found is not None else boundaries.values(op, name, dtype)


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``edge:REST`` made: tensor PATH holds the set's values in a cycle."""
    target, name, rotation, found = values.read_edit(VERB, rest, sample)
    dtype = found[target].dtype
    held = set_values(op, name, dtype) if dtype.is_floating_point else ()
    if not held:
        raise UsageError(f"{op or 'this op'} has no set {name!r} in {dtype} for {VERB}:{rest}")
    return tree.map_sample_tensors(sample, lambda path, t: values.cycle(t, held, rotation) if path == target else t)


SEARCH = Search(name="thresholds", description=DESCRIPTION, edits="one tensor's values (two: a quotient and its divisor)", order=15,
                plan=plan, verb=VERB, form=FORM, apply=apply, on_values=True)
