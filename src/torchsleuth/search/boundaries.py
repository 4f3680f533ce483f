"""The ``thresholds`` search's sets where no exact function leads: magnitudes over the whole range, and operands
within a unit of a rounding boundary.

Design note. Two families of named sets, each of at most ``MOST`` values
held by the dtype (the form the search lays out as a cycle):

* ``magnitude.1`` .. ``magnitude.4``: ``RUNGS`` magnitudes spread evenly in
  exponent from the smallest subnormal to the largest binade (significand
  ``SIGNIFICAND``, not a power of two, so that products and quotients
  round), both signs; set ``i`` takes every fourth of them from the ``i``-th,
  so each set spans the whole range and two operands rotated against each
  other pair a huge value with a tiny one. The values search's ``extreme``
  set holds the range's very ends; these are the binades between.
* rounding boundaries, for the ops that round to an integer
  (``UNARY_ROUNDING``): ``integer`` (the numbers just below and above small
  integers of both signs, and just below the first integer whose ulp is 1)
  and ``half`` (just each side of a halfway point: 0.5, 1.5, -2.5, and the
  largest halfway point the dtype holds, ``2**(p-2) + 0.5``); ``round``
  with ``decimals`` scales them by ``10**-decimals`` (the boundaries it
  rounds at), rounded to the dtype;
* quotients, for the ops that divide and round (``BINARY_ROUNDING``): the
  pairs ``quotient`` / ``divisor`` hold at position ``j`` a divisor ``b_j``
  (0.1, 3, -0.3, 7, 1/3, -10, 1.1, none a power of two) and a dividend
  ``a_j = k_j * b_j`` rounded to the dtype, whose exact quotient is within a
  unit of the integer ``k_j`` (just above or below it, by the rounding);
  ``quotient.below`` and ``quotient.above`` are the dividends one number of
  the dtype lower and higher. The two tensors must take the cycle aligned
  (the same length and rotation, one shape), which the search checks.
"""

from __future__ import annotations

import functools
import math

import torch

MOST = 7
RUNGS = 14
SIGNIFICAND = 1.3
MAGNITUDE_SETS = 4
UNARY_ROUNDING = ("floor", "ceil", "round", "round.decimals_0", "round.decimals_3", "round.decimals_neg_3", "trunc", "frac")
BINARY_ROUNDING = ("remainder", "fmod", "div.floor_rounding", "div.trunc_rounding", "floor_divide")
DIVISORS = (0.1, 3.0, -0.3, 7.0, 1 / 3, -10.0, 1.1)
MULTIPLES = (3, -7, 10, 29, -100, 1001, 12)
QUOTIENT_SETS = ("quotient", "quotient.below", "quotient.above")


def names(op: str, dtype: torch.dtype) -> tuple[str, ...]:
    """The sets of this family ``op`` takes in ``dtype``, in planning order (the divisor set is planned beside each
    quotient set, not alone)."""
    if not dtype.is_floating_point:
        return ()
    if op in UNARY_ROUNDING:
        return ("integer", "half")
    if op in BINARY_ROUNDING:
        return QUOTIENT_SETS
    return tuple(f"magnitude.{i + 1}" for i in range(MAGNITUDE_SETS))


@functools.cache
def values(op: str, name: str, dtype: torch.dtype) -> tuple[float, ...]:
    """The values of set ``name`` for ``op`` in ``dtype``; () for a name this family does not have."""
    if not dtype.is_floating_point:
        return ()
    info = torch.finfo(dtype)
    if name.startswith("magnitude."):
        index = name.partition(".")[2]
        if not (index.isdigit() and 1 <= int(index) <= MAGNITUDE_SETS):
            return ()
        return _magnitudes(info, dtype)[int(index) - 1::MAGNITUDE_SETS][:MOST]
    if name in ("integer", "half"):
        return _rounding(name, op, info, dtype)
    if name == "divisor":
        return tuple(_held(b, dtype) for b in DIVISORS)
    if name in QUOTIENT_SETS:
        step = {"quotient": 0, "quotient.below": -1, "quotient.above": 1}[name]
        return tuple(_next(_held(k * _held(b, dtype), dtype), step, dtype) for k, b in zip(MULTIPLES, DIVISORS))
    return ()


def _magnitudes(info, dtype: torch.dtype) -> tuple[float, ...]:
    low = (math.frexp(info.smallest_normal)[1] - 1) + (math.frexp(info.eps)[1] - 1)  # the smallest subnormal's exponent, without making it (flush-to-zero)
    high = math.frexp(info.max)[1] - 2  # the significand above 1 must stay below the largest value
    exponents = [round(low + (high - low) * i / (RUNGS - 1)) for i in range(RUNGS)]
    found = [_held((-1) ** i * math.ldexp(SIGNIFICAND, e), dtype) for i, e in enumerate(exponents)]
    found += [-v for v in found]
    return tuple(found)


def _rounding(name: str, op: str, info, dtype: torch.dtype) -> tuple[float, ...]:
    digits = round(-math.log2(info.eps)) + 1
    if name == "integer":
        points = [(1.0, -1), (1.0, 1), (-2.0, -1), (-2.0, 1), (5.0, -1), (-5.0, 1), (2.0 ** (digits - 1), -1)]
    else:
        points = [(0.5, 1), (1.5, -1), (1.5, 1), (-2.5, -1), (-2.5, 1), (2.0 ** (digits - 2) + 0.5, 0), (-(2.0 ** (digits - 2) + 1.5), 0)]
    decimals = _decimals(op)
    scale = 10.0 ** -decimals
    found = []
    for boundary, step in points:
        if decimals and abs(boundary) > 2.0 ** 12:
            boundary = math.copysign(1001.5 if name == "half" else 1001.0, boundary)  # a scaled huge boundary means nothing
        value = _next(_held(boundary * scale, dtype), step, dtype)
        if math.isfinite(value) and value not in found:
            found.append(value)
    return tuple(found[:MOST])


def _decimals(op: str) -> int:
    """``round.decimals_3`` rounds at 3 decimals, ``round.decimals_neg_3`` at -3; other ops at 0."""
    _, _, variant = op.partition(".decimals_")
    if not variant:
        return 0
    return -int(variant[len("neg_"):]) if variant.startswith("neg_") else int(variant)


def _held(x: float, dtype: torch.dtype) -> float:
    return float(torch.tensor(x, dtype=torch.float64).to(dtype).item())


def _next(x: float, step: int, dtype: torch.dtype) -> float:
    """The number ``step`` places from ``x`` among ``dtype``'s (one place: nextafter in the dtype)."""
    t = torch.tensor(x, dtype=dtype)
    for _ in range(abs(step)):
        t = torch.nextafter(t, torch.tensor(math.inf if step > 0 else -math.inf, dtype=dtype))
    return float(t.item())
