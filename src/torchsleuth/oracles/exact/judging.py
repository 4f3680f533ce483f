"""Judging float results against the exact function: where the points are, what is allowed, what is wrong.

Design note. The points an ``exact`` case judges are the sample's own
elements (its edited values, on the value search's edits) and, for the
sample as OpInfo made it, a grid led by the function's whole domain: every
power of two from the smallest subnormal to 2^64 (each one from 2^-60 to
2^64, every sixteenth below), both signs, and 1.5 times the powers from
2^-8 to 2^16 (a binary op: a coarser grid of pairs). The function changes
where its argument's magnitude does: overflow and underflow thresholds,
tails, the switch between a series and an asymptotic form.

An element is wrong when its distance from the exact value is more than
``ULPS`` units of roundoff of ``|y|`` plus ``CONDITION_ULPS`` units of
``c``, where ``y`` is the exact value and ``c = sum_i |x_i * df/dx_i|`` how
far the exact value moves when an input moves by its own relative size: what
a kernel that rounds its argument once (a range reduction, a scaling) may
lose at an ill-conditioned point, and no more. ``c`` is computed only where the
comparison fails without it. Where the exact value overflows the dtype, the
result must be the infinity of its sign; where it underflows, any value
within a subnormal of zero is right. At the brink, an infinity where the
exact value fits, or the largest value where it does not, is right when the
exact value lies within a unit and the conditioning term of the overflow
bound (``_brink``: float64 entr gives the largest value at the first number
past it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import mpmath as mp
import torch

from ...run.exact import PRECISION, conditioning, exact
from ...run.exact_functions import Exact

# How many units of roundoff a kernel may be off: four thousand of the exact value (2^-40, about 1e-12 relative in
# float64), far above a special function's own error (a few to a few hundred units), far below a wrong tail; and a few
# of the conditioning term, what rounding the argument once explains at an ill-conditioned point.
ULPS = 4096.0
CONDITION_ULPS = 8.0
# Units of roundoff within which a result at the overflow bound and an infinity are one (``_brink``): a unit of the
# dtype, plus the move rounding the inputs makes (the conditioning term once).
BRINK_ULPS = 2.0
# Points a case judges at most (the sample's first, then the grid's).
MOST = 1024
# Seconds the exact values of a case's points may take in all (one value's limit is run.exact.EACH): a point past it
# is left unjudged.
BUDGET = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Bad:
    index: int
    inputs: tuple[float, ...]
    got: float
    expected: str  # the exact value, 25 significant digits
    error: float  # |got - exact|
    allowed: float


def magnitudes(coarse: bool = False) -> list[float]:
    exponents = list(range(-1074, -60, 16)) + list(range(-60, 65)) if not coarse else [-1000, -600, -300, -40, -20, -8, -2, 0, 2, 8, 20, 40, 300, 600, 1000]
    found = [math.ldexp(1.0, k) for k in exponents] + ([1.5 * math.ldexp(1.0, k) for k in range(-8, 17)] if not coarse else [1.5, 3.5])
    return sorted(set(found))


def grid(arity: int) -> list[tuple[float, ...]]:
    """The function-led points of an ``arity``-argument function: each magnitude with both signs (pairs of a coarser
    set, for two arguments), zero included."""
    values = [0.0] + [s * m for m in magnitudes(coarse=arity > 1) for s in (1.0, -1.0)]
    if arity == 1:
        return [(v,) for v in values]
    return [(a, b) for a in values for b in values]


def judge(entry: Exact, points: list[tuple[float, ...]], got: list[float], numbers: tuple, dtype: torch.dtype) -> tuple[list[Bad], int]:
    """The wrong elements among ``got`` (the kernel's results at ``points``), and how many had an exact value."""
    info = torch.finfo(dtype)
    u, largest, tiny = info.eps / 2, info.max, info.smallest_normal  # below the smallest normal, any result is as good
    bad, judged, started = [], 0, time.monotonic()
    for index, (point, value) in enumerate(zip(points, got)):
        if time.monotonic() - started > BUDGET:
            break
        y = exact(entry, point, numbers)
        if y is None:
            continue
        judged += 1
        if abs(y) > largest * (1 + u):  # past the dtype's range: the infinity of its sign
            if value != (math.inf if y > 0 else -math.inf) and not _brink(entry, point, numbers, y, value, largest, u):
                bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=math.inf, allowed=0.0))
            continue
        if not math.isfinite(value) and not _brink(entry, point, numbers, y, value, largest, u):
            # an infinity or NaN where the exact value fits: wrong by any allowance
            bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=math.inf, allowed=float(ULPS * u * abs(y) + tiny)))
            continue
        if not math.isfinite(value):
            continue
        with mp.workprec(PRECISION):
            error = abs(mp.mpf(value) - y)
            allowed = ULPS * u * abs(y) + tiny
            if error > allowed:
                allowed = ULPS * u * abs(y) + CONDITION_ULPS * u * conditioning(entry, point, numbers) + tiny
            if error > allowed:
                bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=float(error), allowed=float(allowed)))
    return bad, judged


def _brink(entry: Exact, point, numbers: tuple, y, value: float, largest: float, u: float) -> bool:
    """Whether ``value`` is right at the brink of the range: the exact ``y`` and the result lie each side of the
    overflow bound (an infinity where ``y`` fits, or a finite value of ``y``'s sign where it does not), within the
    allowance of the finite one of the two: a kernel right to its allowance rounds either way there."""
    if math.isnan(value) or (value > 0) != (y > 0):
        return False
    finite = abs(y) if math.isinf(value) else mp.mpf(abs(value))
    with mp.workprec(PRECISION):  # a few units and the conditioning term, not ULPS: an overflow a window early is wrong
        allowed = BRINK_ULPS * u * finite + u * conditioning(entry, point, numbers)
        return bool(finite + allowed >= largest * (1 + u))
