"""Where a function's result changes kind in a dtype: its thresholds, found by bisection against the exact function.

Design note. A kernel is written in pieces: a series near zero, a rational
approximation in the middle, an asymptotic form in the tails, a branch that
returns an infinity past the overflow threshold and zero past the underflow
one. Its bugs sit at the seams, within a few units of the dtype from where
the exact result leaves the dtype's range, underflows, or rounds to a value
that no longer depends on the argument's digits. OpInfo's samples never go
there, and a fixed set of special values meets a seam only by chance.

``points(op, dtype)`` finds the seams of a one-argument function of
run.exact_functions in ``dtype``'s own numbers. Each finite number ``x`` of
the dtype gets a kind from the exact value ``f(x)`` rounded to the dtype:

* ``overflow``: past the largest finite value (rounds to an infinity);
* ``zero``: below half the smallest subnormal (rounds to zero), f not 0;
* ``subnormal``: below the smallest normal;
* ``same``: rounds to x itself (sin, tan, expm1, log1p near 0: the
  kernel's "return x" branch, where every further digit of f is lost);
* ``unit``: rounds to +-1 (tanh, erf, exp near 0, cos: saturated);
* ``normal``: any other finite value; and ``none`` where f has no finite
  real value (a pole, outside the domain).

A ladder of magnitudes over the dtype's whole range (a power of two every
``LADDER`` binades, both signs) is classified, and between each pair of
neighbours of different kinds (``none`` apart) the boundary is bisected in
the dtype's numbers (their bit patterns, as ordered integers) down to the
last number of one kind and the first of the other; the boundary and
``SIDE`` numbers each side of it are kept (at an overflow boundary, where
the exact values may lie within a unit of the overflow bound, a kernel right
to its allowance rounds either way, float32 erfcx giving inf at the last
number that fits and float64 entr the largest value at the first past it:
the judges take an infinity there for the bound, judge.compare.brink).
``sign``: the sign changes of f
on a linear grid (its zeros and the poles it changes sign across: lgamma's
negative integers, tan's odd multiples of pi/2, digamma's), bisected the same
way, and the grid's own points with no value (a pole at an integer, where
mpmath raises) with the numbers just each side.

The points of a kind are grouped into named sets of at most ``MOST`` values
(``overflow``, ``overflow.2``, ...), the form the ``thresholds`` search lays
out as a cycle. Everything is deterministic (no clock: the functions whose
exact values take long at the ladder's far ends are left out, ``SLOW``) and
cached per (op, dtype), so a run computes each once per process.
"""

from __future__ import annotations

import functools
import math

import mpmath as mp
import torch

from ..run.exact_functions import FUNCTIONS

# Significant bits mpmath classifies with: past float64's 53 and their rounding, enough to place a boundary
# within a unit of the dtype (a boundary one unit off is as good a seam).
BITS = 128
LADDER = 4  # binades between the ladder's rungs
SIDE = 3  # dtype numbers kept each side of a boundary, itself included
BOUNDARIES = 4  # boundaries of a kind kept, nearest zero first (lgamma's poles go on to -inf)
MOST = 7  # values in a set: a set fits whole in every scalar tail (search.value_sets.MAX_SET)
# The linear grid the sign changes are looked for on: [-GRID_END, GRID_END] in steps of 1/GRID_STEPS.
GRID_END, GRID_STEPS = 8, 4
# Functions whose exact values at the ladder's far ends take mpmath seconds (Bessel functions of a huge argument,
# zeta and the incomplete gamma functions), or that take a number as well (polygamma's order): no thresholds.
SLOW = ("special.airy_ai", "special.bessel_j0", "special.bessel_j1", "special.bessel_y0", "special.bessel_y1")
KINDS = ("overflow", "zero", "subnormal", "same", "unit", "sign", "pole")  # a boundary is named by the first of its two

_INTS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def known(op: str) -> bool:
    """Whether ``op``'s thresholds can be found: a one-argument exact function, quick at any magnitude."""
    entry = FUNCTIONS.get(op)
    return entry is not None and entry.arity == 1 and op not in SLOW and not op.startswith(("polygamma", "special.polygamma"))


@functools.cache
def sets(op: str, dtype: torch.dtype) -> dict[str, tuple[float, ...]]:
    """The named sets of ``op``'s seams in ``dtype`` (``{"overflow": (...), "same": (...), ...}``); {} where unknown."""
    if not known(op) or dtype not in _INTS:
        return {}
    found = _Finder(op, dtype).seams()
    named: dict[str, tuple[float, ...]] = {}
    for kind in KINDS:
        boundaries = sorted(dict.fromkeys(found.get(kind, ())), key=lambda p: (abs(p[len(p) // 2]), p[len(p) // 2]))
        for i, points in enumerate(boundaries[:BOUNDARIES]):
            named[kind if i == 0 else f"{kind}.{i + 1}"] = points
    return named


class _Finder:
    def __init__(self, op: str, dtype: torch.dtype):
        self.fn, self.dtype = FUNCTIONS[op].fn, dtype
        info = torch.finfo(dtype)
        self.info = info
        self.bits = torch.iinfo(_INTS[dtype]).bits
        self.top = key(info.max, dtype)
        with mp.workprec(BITS):  # half a unit past the largest value: from there on f rounds to an infinity
            self.overflow = mp.mpf(info.max) + mp.ldexp(mp.mpf(info.eps), math.frexp(info.max)[1] - 2)
            self.zero = mp.mpf(info.smallest_normal) * mp.mpf(info.eps) / 2  # up to here f rounds to zero
        self.kinds: dict[int, str] = {}

    def seams(self) -> dict[str, list[tuple[float, ...]]]:
        """The points around each boundary, by its kind (the rarer of the two kinds it parts: KINDS' order)."""
        found: dict[str, list[tuple[float, ...]]] = {}
        ladder = self._ladder()
        for a, b in zip(ladder, ladder[1:]):
            ka, kb = self.kind(a), self.kind(b)
            if ka != kb and "none" not in (ka, kb):
                low, high = self._bisect(a, b, lambda k: self.kind(k) == ka)
                kind = next(k for k in KINDS if k in (ka, kb))
                found.setdefault(kind, []).append(self._around(low, high))
        grid = [key(i / GRID_STEPS, self.dtype) for i in range(-GRID_END * GRID_STEPS, GRID_END * GRID_STEPS + 1)]
        for a, b in zip(grid, grid[1:]):
            sa, sb = self.sign(a), self.sign(b)
            if sa and sb and sa != sb:
                low, high = self._bisect(a, b, lambda k: self.sign(k) == sa)
                found.setdefault("sign", []).append(self._around(low, high))
        for k in grid:  # a zero the grid lands on (lgamma at 1 and 2): the numbers each side
            if self.sign(k) == 0 and self.exact(k) is not None and k != 0:
                found.setdefault("sign", []).append(self._around(k, k))
        for k in grid:
            if self.kind(k) == "none" and self.kind(k - 1) != "none" and self.kind(k + 1) != "none":
                found.setdefault("pole", []).append(tuple(value(j, self.dtype) for j in range(k - SIDE, k + SIDE + 1) if j != k))
        return found

    def _ladder(self) -> list[int]:
        """Both signs of a power of two every LADDER binades, from the smallest subnormal to the largest value."""
        low = math.frexp(self.info.smallest_normal * self.info.eps)[1] - 1
        high = math.frexp(self.info.max)[1] - 1
        powers = [key(math.ldexp(1.0, e), self.dtype) for e in range(low, high + 1, LADDER)] + [self.top]
        return sorted({-k for k in powers} | set(powers))

    def _bisect(self, low: int, high: int, left) -> tuple[int, int]:
        """Adjacent numbers ``(a, b)`` between ``low`` and ``high`` with ``left(a)`` and not ``left(b)``."""
        while high - low > 1:
            middle = (low + high) // 2
            if left(middle):
                low = middle
            else:
                high = middle
        return low, high

    def _around(self, low: int, high: int) -> tuple[float, ...]:
        """SIDE numbers each side of the boundary between ``low`` and ``high``."""
        keys = [*range(low - SIDE + 1, low + 1), *range(high, high + SIDE)]
        return tuple(value(k, self.dtype) for k in keys if -self.top <= k <= self.top)

    def exact(self, k: int):
        x = value(k, self.dtype)
        with mp.workprec(BITS):
            try:
                y = self.fn(mp.mpf(x))
            except Exception:  # a pole, outside the domain
                return None
            return +y if isinstance(y, mp.mpf) and mp.isfinite(y) else None

    def kind(self, k: int) -> str:
        if k not in self.kinds:
            self.kinds[k] = self._kind(k)
        return self.kinds[k]

    def _kind(self, k: int) -> str:
        y = self.exact(k)
        if y is None:
            return "none"
        size = abs(y)
        if size >= self.overflow:
            return "overflow"
        if size == 0:
            return "normal"  # an exact zero is the function's own value, no underflow
        if size <= self.zero:
            return "zero"
        rounded = rounded_to(y, self.dtype)
        if rounded == value(k, self.dtype):
            return "same"
        if size < self.info.smallest_normal:
            return "subnormal"
        return "unit" if abs(rounded) == 1.0 else "normal"

    def sign(self, k: int) -> int:
        y = self.exact(k)
        return 0 if y is None or y == 0 else (1 if y > 0 else -1)


def key(x: float, dtype: torch.dtype) -> int:
    """``x`` (held by ``dtype``) as an integer in the order of the dtype's numbers: the next number up is ``key + 1``."""
    bits = int(torch.tensor(x, dtype=dtype).view(_INTS[dtype]).item())
    return bits if bits >= 0 else -(bits & ((1 << (torch.iinfo(_INTS[dtype]).bits - 1)) - 1))


def value(k: int, dtype: torch.dtype) -> float:
    """The number of ``dtype`` whose ``key`` is ``k``."""
    width = torch.iinfo(_INTS[dtype]).bits
    bits = k if k >= 0 else (-k) | (1 << (width - 1))
    if bits >= 1 << (width - 1):
        bits -= 1 << width  # as the signed integer of the same bits
    return float(torch.tensor(bits, dtype=_INTS[dtype]).view(dtype).item())


def rounded_to(y, dtype: torch.dtype) -> float:
    """The exact value ``y`` (an mpf inside the dtype's range) rounded to ``dtype``: once for a normal result of
    float64 and narrower dtypes, through float64 for a subnormal one of a narrower dtype (a tie rounded twice is
    off by one unit: a boundary one unit off is as good a seam)."""
    info = torch.finfo(dtype)
    if abs(y) >= info.smallest_normal:
        with mp.workprec(round(-math.log2(info.eps)) + 1):
            y = +y  # rounded to the dtype's significand
    return float(torch.tensor(float(y), dtype=torch.float64).to(dtype).item())
