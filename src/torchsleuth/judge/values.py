"""What kind of value an element holds, and how far apart two floats are.

Design note. Oracles that compare two results of one op (another length,
another instruction set, a stretched tensor) tell two kinds of difference
apart: a change of class (a NaN against a number, an infinity against a
finite value or the other infinity, and, where it matters, the sign of a
zero), which no tolerance excuses, and a distance in units in the last
place, which the tolerance rule judges. The class of an element is one
definition here (``value_classes``), and ``class_change`` and the oracles'
own reports are written on it; ``ulps`` measures only within a class. The
capability oracle's repro script copies ``value_classes`` and
``class_change`` (``inspect.getsource``), so keep them plain torch.
"""

from __future__ import annotations

import torch


def value_classes(t: torch.Tensor) -> torch.Tensor:
    """Per element: 0 finite, 1 NaN, 2 +inf, 3 -inf, as int8 (complex: real and imaginary parts side by side)."""
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return torch.isnan(t).to(torch.int8) + 2 * (t == float("inf")).to(torch.int8) + 3 * (t == float("-inf")).to(torch.int8)


def class_change(a: torch.Tensor, e: torch.Tensor, *, signed_zero: bool = True) -> torch.Tensor:
    """Elementwise: a NaN against a number, an infinity against anything else, or (``signed_zero``) +0 against -0.

    Integers and bools have no classes: any difference counts.
    """
    a, e = a.detach().cpu(), e.detach().cpu().to(a.dtype)
    if a.is_complex():
        return class_change(a.real, e.real, signed_zero=signed_zero) | class_change(a.imag, e.imag, signed_zero=signed_zero)
    if not a.is_floating_point():
        return a != e
    changed = value_classes(a) != value_classes(e)
    if signed_zero:
        changed |= (a == 0) & (e == 0) & (torch.signbit(a) != torch.signbit(e))
    return changed


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place of ``a``'s dtype (floats; complex: the larger part).

    NaNs and infinities are 0 against a value of their own class and are
    not measured otherwise (class changes are told apart by ``class_change``).
    """
    a, b = a.detach().cpu(), b.detach().cpu().to(a.dtype)
    if a.is_complex():
        return torch.maximum(ulps(a.real, b.real), ulps(a.imag, b.imag))
    if not a.is_floating_point():
        return (a.to(torch.int64) - b.to(torch.int64)).abs()
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    ia, ib = _ordered(a.contiguous().view(bits).to(torch.int64), bits), _ordered(b.contiguous().view(bits).to(torch.int64), bits)
    distance = (ia - ib).abs()
    finite = torch.isfinite(a) & torch.isfinite(b)
    return torch.where(finite, distance, torch.zeros_like(distance))


def _ordered(i: torch.Tensor, bits: torch.dtype) -> torch.Tensor:
    """Sign-magnitude integers as ordered ones: -0 and +0 both 0, and adjacent floats 1 apart."""
    width = torch.iinfo(bits).bits
    magnitude = i & ((1 << (width - 1)) - 1)
    return torch.where(i < 0, 0 - magnitude, magnitude)
