"""The special values of the ``values`` search: a few named sets per dtype, each small enough for any scalar tail.

Design note. OpInfo's samples hold small uniform values; silent bugs sit at
the values below. They come in sets, named by what they probe, so a case id
says which (``special:input=overflow``). A set is computed from the dtype's
own limits (``torch.finfo``, ``torch.iinfo``), holds only values the dtype
can hold, and is the same in every process. Each holds at most
``MAX_SET`` values: a CPU loop's scalar tail is ``W - 1`` elements long at
most, ``W`` being 8 for float64 and int64 with AVX2 (two vectors of 4), so a
set of 7 fits whole in every tail of a tensor laid out by the search
(``values.py``).

Floating sets (complex dtypes take them for both parts):

* ``nonfinite``: NaN, +-inf, +-0, +-1 (NaN in, NaN out is agreement; a NaN
  or infinity one path drops or makes is not);
* ``extreme``: the largest finite values, the subnormal range and the
  smallest normal, and the square root of the largest (squares overflow);
  ordered so that each is next to one of the other end of the range, so
  the set against itself rotated by one pairs huge with tiny both ways;
* ``overflow``: around where ``exp`` overflows (just below, and between
  that and where ``sinh`` and ``cosh`` do, ``log(max) + 0.35``: 89.0 for
  float32, where their vectorised paths used to overflow early), where
  ``sinh`` overflows, and where ``exp`` underflows to subnormals and to 0;
* ``rounding``: halfway cases (0.5, 1.5, 2.5 and negatives: ties to even),
  the largest float below 0.5, and ``2**(p-1) + 1``, the first odd integer
  whose ulp is 1 (``floor(x + 0.5)`` rounds both wrong).

Integer sets: ``int`` (min, max, min+1, max-1, 0, -1, 1) and, for types
wider than float32's significand, ``wide`` (``2**24 + 1`` and friends, which
float32, and for int64 float64, cannot hold). Bool: ``bool``.
"""

from __future__ import annotations

import functools
import math

import torch

MAX_SET = 7

FLOAT_SETS = ("nonfinite", "extreme", "overflow", "rounding")
INT_SETS = ("int", "wide")
BOOL_SETS = ("bool",)


def names(dtype: torch.dtype) -> tuple[str, ...]:
    """The sets a tensor of ``dtype`` can take, in the order the planner uses them (empty ones left out)."""
    if dtype == torch.bool:
        return BOOL_SETS
    if dtype.is_floating_point or dtype.is_complex:
        return FLOAT_SETS
    return tuple(name for name in INT_SETS if values(name, dtype))


@functools.cache
def values(name: str, dtype: torch.dtype) -> tuple:
    """The values of set ``name`` in ``dtype`` (Python numbers, each exactly representable); () when ``dtype`` has no such set.

    Complex dtypes give their real part's values: the verb puts them in both parts.
    """
    if dtype == torch.bool:
        return (True, False) if name == "bool" else ()
    if dtype.is_complex:
        dtype = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}[dtype]
    if dtype.is_floating_point:
        make = _FLOAT.get(name)
        return _held_floats(make(torch.finfo(dtype)), dtype) if make else ()
    make = _INT.get(name)
    return _held_ints(make(torch.iinfo(dtype)), dtype) if make else ()


# --- floating sets ---------------------------------------------------------------------------


def _nonfinite(info) -> list[float]:
    return [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0]


def _extreme(info) -> list[float]:
    big, sub = info.max, info.smallest_normal * info.eps  # eps * tiny: the smallest subnormal
    return [big, sub, -big, -sub, 2.0 * math.sqrt(big), info.smallest_normal, info.smallest_normal - sub]


def _overflow(info) -> list[float]:
    top = math.log(info.max)  # exp overflows past it; sinh and cosh past top + log(2)
    return [top - 0.3, top + 0.35, -(top + 0.35), top + math.log(2.0) + 0.3,
            # the logs summed, not the log of the product: a process in flush-to-zero mode (a library built with
            # -ffast-math sets it when loaded, as inductor's compiled kernels did in torch 2.4) makes the subnormal 0
            math.log(info.smallest_normal) - 4.0, math.log(info.smallest_normal) + math.log(info.eps) - 2.0, -(top - 0.3)]


def _rounding(info) -> list[float]:
    odd = 2.0 ** (_digits(info) - 1) + 1  # the first odd integer where the ulp is 1: held exactly by construction
    return [0.5, -0.5, 1.5, 2.5, -2.5, 0.5 - info.eps / 4, odd]


def _digits(info) -> int:
    """Significand bits, the implicit one included (24 for float32)."""
    return round(-math.log2(info.eps)) + 1


_FLOAT = {"nonfinite": _nonfinite, "extreme": _extreme, "overflow": _overflow, "rounding": _rounding}


def _held_floats(wanted: list[float], dtype: torch.dtype) -> tuple:
    """``wanted`` rounded to ``dtype``, without repeats, and without values past its range.

    The limits come from the dtype's own ``finfo`` and are held exactly; the thresholds
    (``log(max) - 0.3``) are wanted near a point, not at it, and are rounded to the nearest value held.
    """
    held: list[float] = []
    for value in wanted:
        rounded = torch.tensor(value, dtype=torch.float64).to(dtype).item()
        if math.isinf(rounded) and not math.isinf(value):
            continue  # past the dtype's range
        if not any(_same(rounded, h) for h in held):
            held.append(rounded)
    return tuple(held[:MAX_SET])


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# --- integer sets ------------------------------------------------------------------------------


def _int(info) -> list[int]:
    return [info.min, info.max, info.min + 1, info.max - 1, 0, -1, 1]


def _wide(info) -> list[int]:
    # beyond float32's (and float64's) significand: a conversion rounds them
    return [2 ** 24 + 1, -(2 ** 24 + 1), 2 ** 53 + 1, -(2 ** 53 + 1), 2 ** 31 - 1, -(2 ** 31)]


_INT = {"int": _int, "wide": _wide}


def _held_ints(wanted: list[int], dtype: torch.dtype) -> tuple:
    info = torch.iinfo(dtype)
    held: list[int] = []
    for value in wanted:
        if info.min <= value <= info.max and value not in held:
            held.append(value)
    return tuple(held[:MAX_SET])
