"""The exact value of a float function at a point, by mpmath: what the ``exact`` oracle judges against and the
function-led searches bisect with.

Design note. ``exact(entry, point, numbers)`` evaluates one entry of
run.exact_functions at PRECISION bits and at twice that, and gives the value
only where both agree past 2^-120 (a formula that cancels at the lower
precision is left out, not trusted), where the inputs are finite and inside
the entry's domain, and where mpmath answers within EACH seconds (a zeta or
an incomplete gamma function at an extreme point can take minutes). No value
is an answer too: a pole, a complex result or a point outside the domain is
PyTorch's convention, not the exact function's business.
``conditioning`` is ``sum_i |x_i * df/dx_i|``: how far the exact value moves
when an input moves by its own relative size.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading

import mpmath as mp

from .exact_functions import Exact

# The precision (bits) mpmath evaluates at: far beyond float64's 53, so its result, rounded, is the exact one.
PRECISION = 192
# The relative step of the numerical derivative behind ``conditioning``.
STEP = mp.mpf(2) ** -100
# Seconds mpmath may take for one value (a few hundred microseconds is usual).
EACH = 0.2


class TooSlow(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise TooSlow inside the block after ``seconds`` (a real-time timer, in the main thread of a Unix process; no
    limit elsewhere)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TooSlow()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
            with deadline(EACH):
                y = entry.fn(*(mp.mpf(v) for v in point), *numbers)
        except (Exception, TooSlow):  # a pole, a point outside the domain, an argument mpmath cannot take in time
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
                with deadline(2 * EACH):
                    slope = (entry.fn(*up, *numbers) - entry.fn(*down, *numbers)) / (2 * h)
            except (Exception, TooSlow):
                return mp.inf
            if not isinstance(slope, mp.mpf) or not mp.isfinite(slope):
                return mp.inf
            total += abs(x * slope)
    return total


def slope(entry: Exact, x: float, numbers: tuple) -> mp.mpf | None:
    """df/dx of a one-argument function at ``x`` (its gradient's exact value, times the output's gradient): a
    central difference at a relative step of 2^-100 of its values at 2 * PRECISION bits on both sides, which leaves
    far more bits than float64's; None where a side has no value or is outside the domain, and at zero."""
    if x == 0 or not math.isfinite(x):
        return None
    with mp.workprec(2 * PRECISION):
        h = abs(mp.mpf(x)) * STEP
        sides = [x + h, x - h]
    found = [_at(entry, (side,), numbers, 2 * PRECISION) if entry.domain(float(side)) else None for side in sides]
    if any(y is None for y in found):
        return None
    with mp.workprec(2 * PRECISION):
        return (found[0] - found[1]) / (2 * h)
