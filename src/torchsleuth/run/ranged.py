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
float32 for half inputs), so its own overflow is not excused, with one kind of
exception: an op whose documentation defines its result by a formula that
scales one operand by a Scalar before the sum (``DOCUMENTED``: ``add`` and
``sub``'s ``input + alpha * other``, ``addcmul``'s ``input + value * tensor1 *
tensor2``, ``addcdiv``'s ``input + value * tensor1 / tensor2``). PyTorch's
kernels evaluate that formula left to right in the dtype, as documented, so
``value * tensor1`` past float32's largest value is an infinity there, and
``inf * 0`` a NaN, where the exact result fits: both the exact result and the
documented evaluation are right. For these the mode runs PyTorch's own
reference of the op (``torch._decomp``'s table, the formula as documented)
inside itself, so it sees every intermediate of the formula, and rounds each
to the case's dtype (given as ``dtype``): the formula as the kernel evaluates
it, where ``value * tensor1`` underflows to a subnormal with a digit or two
(addcdiv's ``3.14 * 1.4e-45 / -1.4e-45`` is -3 in float32, -3.14 exactly).
"""

from __future__ import annotations

import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_aten = torch.ops.aten
# Ops whose documentation gives their result as a formula with a Scalar factor, evaluated left to right in the dtype.
# A list, not derived from the schema: a Scalar factor there (``alpha``, ``value``, ``beta``) is needed but not enough:
# ``addmm``, ``addmv``, ``baddbmm`` and ``lerp`` take one too, and their kernels scale inside BLAS or a fused lerp, not
# as the documented formula reads; and ``torch._decomp``'s table decomposes ops of both kinds alike. What sets these
# apart is how the kernel evaluates, which only its documentation (and source) says.
DOCUMENTED = frozenset({_aten.add.Tensor, _aten.sub.Tensor, _aten.rsub.Tensor, _aten.addcmul.default, _aten.addcdiv.default})


class Overflowing(TorchDispatchMode):
    def __init__(self, largest: float, dtype: torch.dtype | None = None):
        super().__init__()
        self.largest, self.dtype = largest, dtype
        self.documented = False  # inside a documented formula: each intermediate is also rounded to ``dtype``

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in DOCUMENTED and func in decomposition_table and not self.documented:
            self.documented = True
            try:
                with self:  # the documented formula, op by op, each intermediate seen by this mode
                    return decomposition_table[func](*args, **(kwargs or {}))
            finally:
                self.documented = False
        result = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return result
        return tree_map(self._overflow, result)

    def _overflow(self, value):
        if not (isinstance(value, torch.Tensor) and value.dtype in (torch.float64, torch.complex128) and value.numel()):
            return value
        if self.documented and self.dtype is not None:  # the formula in the dtype: rounded (a subnormal loses digits), then widened
            value = value.to(self.dtype).to(value.dtype)
        parts = torch.view_as_real(value) if value.is_complex() else value
        past = parts.abs() > self.largest
        if not bool(past.any()):
            return value
        parts = torch.where(past, parts.sign() * float("inf"), parts)
        return torch.view_as_complex(parts) if value.is_complex() else parts


class Largest(TorchDispatchMode):
    """Keeps every floating value an op makes, changing nothing; ``largest()`` is the largest magnitude among them: whether
    a float64 computation passes a narrow dtype's range on the way, where replacing values (``Overflowing``) cannot be
    done (forward-mode AD's dual tensors must come back as they were made). The values are read after the computation:
    an op on a dual tensor inside the mode's handler kills the process on torch 2.13."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.seen += [v for v in tree_flatten(result)[0] if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())]
        return result

    def largest(self) -> float:
        found = [float(torch.nan_to_num(v.detach().abs(), nan=0.0, posinf=0.0).max()) for v in self.seen if v.numel() and v.device.type != "meta"]
        return max(found, default=0.0)
