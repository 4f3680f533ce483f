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
within a subnormal of zero is right.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from dataclasses import dataclass

import mpmath as mp
import torch

from .functions import Exact

# The precision (bits) mpmath evaluates at: far beyond float64's 53, so its result, rounded, is the exact one.
PRECISION = 192
# How many units of roundoff a kernel may be off: four thousand of the exact value (2^-40, about 1e-12 relative in
# float64), far above a special function's own error (a few to a few hundred units), far below a wrong tail; and a few
# of the conditioning term, what rounding the argument once explains at an ill-conditioned point.
ULPS = 4096.0
CONDITION_ULPS = 8.0
# The relative step of the numerical derivative behind ``c``.
STEP = mp.mpf(2) ** -100
# Points a case judges at most (the sample's first, then the grid's).
MOST = 1024
# Seconds mpmath may take for one value (a few hundred microseconds is usual; a zeta or an incomplete gamma function at
# an extreme point can take minutes), and for a case's points in all: a point past either is left unjudged.
EACH = 0.2
BUDGET = 5.0


class _TooSlow(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise _TooSlow inside the block after ``seconds`` (a real-time timer, in the main thread of a Unix process; no
    limit elsewhere)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _TooSlow()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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


def exact(entry: Exact, point: tuple[float, ...], numbers: tuple) -> mp.mpf | None:
    """The function's value at ``point``; None where it has no finite real value, where mpmath has none in time, or
    where its values at PRECISION and twice that disagree past 2^-120 (a formula that cancels at that precision)."""
    if not all(math.isfinite(v) for v in point) or not entry.domain(*point):
        return None
    found = [_at(entry, point, numbers, bits) for bits in (PRECISION, 2 * PRECISION)]
    if any(y is None for y in found):
        return None
    low, high = found
    with mp.workprec(2 * PRECISION):
        if abs(low - high) > abs(high) * mp.mpf(2) ** -120:
            return None
    return high


def _at(entry: Exact, point: tuple[float, ...], numbers: tuple, bits: int) -> mp.mpf | None:
    with mp.workprec(bits):
        try:
            with _deadline(EACH):
                y = entry.fn(*(mp.mpf(v) for v in point), *numbers)
        except (Exception, _TooSlow):  # a pole, a point outside the domain, an argument mpmath cannot take in time
            return None
        if not isinstance(y, mp.mpf) or not mp.isfinite(y):
            return None
        return +y


def conditioning(entry: Exact, point: tuple[float, ...], numbers: tuple) -> mp.mpf:
    """sum_i |x_i * df/dx_i| at ``point``: central differences at a relative step of 2^-100, at PRECISION bits."""
    total = mp.mpf(0)
    with mp.workprec(PRECISION):
        for i, v in enumerate(point):
            if v == 0:
                continue
            x = mp.mpf(v)
            h = abs(x) * STEP
            up = list(map(mp.mpf, point))
            down = list(up)
            up[i], down[i] = x + h, x - h
            try:
                with _deadline(2 * EACH):
                    slope = (entry.fn(*up, *numbers) - entry.fn(*down, *numbers)) / (2 * h)
            except (Exception, _TooSlow):
                return mp.inf
            if not isinstance(slope, mp.mpf) or not mp.isfinite(slope):
                return mp.inf
            total += abs(x * slope)
    return total


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
            if value != (math.inf if y > 0 else -math.inf):
                bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=math.inf, allowed=0.0))
            continue
        if not math.isfinite(value):  # an infinity or NaN where the exact value fits: wrong by any allowance
            bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=math.inf, allowed=float(ULPS * u * abs(y) + tiny)))
            continue
        with mp.workprec(PRECISION):
            error = abs(mp.mpf(value) - y)
            allowed = ULPS * u * abs(y) + tiny
            if error > allowed:
                allowed = ULPS * u * abs(y) + CONDITION_ULPS * u * conditioning(entry, point, numbers) + tiny
            if error > allowed:
                bad.append(Bad(index=index, inputs=point, got=value, expected=mp.nstr(y, 25), error=float(error), allowed=float(allowed)))
    return bad, judged
