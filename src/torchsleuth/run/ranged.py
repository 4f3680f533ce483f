"""A float64 run that overflows where the case's dtype would: every intermediate past its largest value becomes an infinity.

Design note. The precision reference computes a call in float64, where nothing
overflows. A call made of several ops in a narrow dtype (a backward graph:
``pow``'s exponent gradient is ``x**y * log(x)``, ``x**y`` past float16's 65504
while the product is 2136) rounds every intermediate to that dtype, so one
intermediate past the range makes the result an infinity or NaN where the
float64 result is finite, and neither is wrong. ``Overflowing`` is a dispatch
mode that, after each op, turns every float64 element whose magnitude is past
the given largest value into an infinity of its sign: the float64 call with
the dtype's range and without its rounding. Only results an op makes afresh
are replaced (a new tensor: writing in place would bump the version counter
autograd checks); a view shows what its base holds, and an in-place or
``out=`` op's result is left as written. Where that run is non-finite as the case's result is,
the intermediates overflowed by the dtype's own range (``judge.verdict``).
A single fused kernel computes its intermediates where no mode sees them (in
float32 for half inputs), so its own overflow is not excused.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


class Overflowing(TorchDispatchMode):
    def __init__(self, largest: float):
        super().__init__()
        self.largest = largest

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return result
        return tree_map(self._overflow, result)

    def _overflow(self, value):
        if not (isinstance(value, torch.Tensor) and value.dtype in (torch.float64, torch.complex128) and value.numel()):
            return value
        parts = torch.view_as_real(value) if value.is_complex() else value
        past = parts.abs() > self.largest
        if not bool(past.any()):
            return value
        parts = torch.where(past, parts.sign() * float("inf"), parts)
        return torch.view_as_complex(parts) if value.is_complex() else parts
