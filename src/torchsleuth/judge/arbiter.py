"""Arbitration past float64: where a narrow dtype's result and float64's disagree, which one the exact value sides with.

Design note. The precision reference of a float32, float16 or bfloat16 call is
the same call in float64, rounded. Where float64 is itself wrong (a special
function's float64 kernel off in a tail, past a threshold, where its
approximation switches), the narrow dtype's right answer is reported as
wrong, and the finding blames the dtype for float64's error. For the
functions the arbitrary-precision reference knows (run.exact_functions), the
elements the precision rule rejects are judged once more against the exact
value, by mpmath: an element whose result is within the dtype's own
tolerance of the exact value, where float64's rounded result is not, is
float64's error, not the dtype's. Those elements are set aside (the rule is
applied again to the rest), and a note says how many and where: float64's
error is the ``exact`` oracle's finding, in float64's own cases.

The device rule (judge.verdict.device) asks the same of the CPU: where a
device's result and the CPU's disagree, an element whose device result is
within tolerance of the exact value, where the CPU's is not, is the CPU's
error (its vector path overflowing early, in float64 too, where nothing
else stands above it), not the device's.

It is paid for only where the precision rule already failed: at most
``MOST`` distinct points, each evaluated at 192 and 384 bits (run.exact), within
the evaluation's own deadlines. Functional and method calls of an op in the
table, elementwise (the result has the inputs' broadcast shape), real
floating dtypes; and a one-argument function's backward case, whose
gradient is judged against the exact slope (run.exact.slope) times the
output's gradient (cosh's vector path overflowing early makes sinh's
gradient -inf where the exact one fits).
An element without an exact value (a pole, outside the domain, too slow) is
left to the rule as it was.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..run.exact import exact, slope
from ..run.exact_functions import FUNCTIONS
from . import compare as cmp
from .tolerance import Tolerance

# The distinct points of the rejected elements evaluated at most, per case (the first ones, in row-major order); every
# rejected element at one of them is arbitrated (a sample's values repeat: the searches tile a few values).
MOST = 64


def acquitted(case, prepared, host: dict, actual: cmp.Leaves, expected: cmp.Leaves,
              tolerance: Callable[[torch.dtype], Tolerance], *,
              names: tuple[str, str] | None = None) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Per leaf, the elements the exact value acquits (a bool mask of the leaf's shape), and a line for each: the
    elements where ``actual`` (the dtype's result) is within ``tolerance`` of the exact value and ``expected`` (float64
    rounded to the dtype) is not; ``tolerance(dtype)`` is the precision rule's. ``names``: what the lines call the
    reference and the result (default float64 and the dtype; the device rule's: the CPU and the device). Empty where
    the op has no exact function or the call is not elementwise."""
    wrong, right = names or ("float64", case.dtype)
    entry = FUNCTIONS.get(case.op)
    backward = case.variant == "backward"
    if entry is None or case.variant not in ("functional", "method", "backward") or (backward and entry.arity != 1):
        return {}, []
    variables = [t for p, t in host.items() if isinstance(t, torch.Tensor) and t.is_floating_point() and not p.startswith("grad_output")]
    variables = variables[: entry.arity]
    seed = host.get("grad_output[0]") if backward else None  # a gradient is f'(x) times the output's gradient
    if len(variables) != entry.arity or (backward and not isinstance(seed, torch.Tensor)):
        return {}, []
    numbers = tuple(a for a in prepared.args if isinstance(a, (int, float)) and not isinstance(a, bool))
    found, lines = {}, []
    for (path, a), (_, e) in zip(actual, expected):
        a, e = cmp.dense(a), cmp.dense(e)
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.is_floating_point() and a.shape == e.shape):
            continue
        try:
            columns = [c.detach().cpu().to(torch.float64) for c in torch.broadcast_tensors(*variables)]
        except RuntimeError:
            return {}, []
        if tuple(columns[0].shape) != tuple(a.shape) or (backward and (path != "grad[input]" or tuple(seed.shape) != tuple(a.shape))):
            continue  # not elementwise: the result's elements are not the function (its slope) at the inputs' elements
        grads = seed.detach().cpu().to(torch.float64).reshape(-1) if backward else None
        got, rounded = a.detach().cpu().to(torch.float64).reshape(-1), e.detach().cpu().to(torch.float64).reshape(-1)
        allowed = tolerance(a.dtype)
        rejected = ~_within(got, rounded, allowed)
        mask = torch.zeros(got.shape, dtype=torch.bool)
        values: dict[tuple, object] = {}  # point -> its exact value (a gradient's: slope): at most MOST points evaluated
        for index in rejected.nonzero().flatten().tolist():
            point = tuple(float(c.reshape(-1)[index]) for c in columns)
            if point not in values:
                if len(values) >= MOST:
                    continue
                values[point] = slope(entry, point[0], numbers) if backward else exact(entry, point, numbers)
            y = values[point]
            if y is None or (backward and not math.isfinite(float(grads[index]))):
                continue
            y = _rounded(float(y * float(grads[index]) if backward else y), a.dtype)
            if _within(got[index:index + 1], y, allowed).item() and not _within(rounded[index:index + 1], y, allowed).item():
                mask[index] = True
        if bool(mask.any()):
            found[path] = mask.reshape(a.shape)
            first = int(mask.nonzero()[0])
            at = tuple(float(c.reshape(-1)[first]) for c in columns)
            lines.append(f"{path}: {wrong} is wrong at {int(mask.sum())} element(s) where the exact value (mpmath) agrees with "
                         f"{right} (first at {', '.join(repr(v) for v in at)}): {wrong}'s error, not {right}'s")
    return found, lines


def _rounded(value: float, dtype: torch.dtype) -> torch.Tensor:
    """The exact value rounded to the dtype (an overflowing one to the infinity of its sign), as a float64 tensor."""
    return torch.tensor([value], dtype=torch.float64).to(dtype).to(torch.float64)


def _within(got: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> torch.Tensor:
    """Elementwise: ``got`` is ``expected`` within ``tolerance``, by the rule every comparison uses (judge.compare)."""
    return ~cmp.elementwise(got, expected, tolerance)[0]


def consistency_only(case) -> str:
    """The note of a float64 case with nothing above it: "" for an op the exact oracle judges."""
    if case.op in FUNCTIONS and case.variant in ("functional", "method"):
        return ""
    return "float64 has no reference above it here: judged only for consistency (layouts, variants, devices, gradients)"
