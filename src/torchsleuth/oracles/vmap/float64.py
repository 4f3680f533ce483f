"""What float64 says about a sample whose batched result and result alone disagree.

Design note. The oracle judges a batching rule, not the op's own kernel. Two
disagreements are the kernel's, and the main sweep's precision reference
already judges them:

* a leaf that is zero in float64 (to within 1e-6 of the inputs' scale): an
  op whose exact result is identically zero (layer_norm over one element,
  the gradient of a shift-invariant function) leaves only rounding noise,
  amplified by whatever the kernel divides by, and the batched path may well
  leave less of it (``structural_zeros``, the precision reference's rule).
  Only where the batch is no further from zero than the sample alone
  (``no_further_off``): a batch that puts another sample's values there is
  wrong however zero the exact result is;
* a batched result that is as near float64 as rounding to its dtype allows
  (the precision reference's rule and margin): then the sample alone is the
  one further off, and the batch gives a right answer (``near_float64``).

Both read the float64 runs the tolerance rule has made already. A case in
float64 itself has no wider reference, so only the first applies there.
"""

from __future__ import annotations

import math

import torch

from ...dtypes import is_inexact, wide
from ...judge import compare as cmp
from ...judge.context import Context
from ...judge.tolerance import PRECISION_MARGIN, Tolerance


def structural_zeros(ctx: Context) -> set[str]:
    """The result's leaves whose float64 value is zero to within 1e-6 of the inputs' scale."""
    refs = ctx.ev.refs
    if not refs.float64.ok:
        return set()
    scale = max((float(torch.nan_to_num(t.detach().abs(), nan=0.0, posinf=0.0).max()) for t in refs.host.values()
                 if isinstance(t, torch.Tensor) and t.numel() and is_inexact(t.dtype)), default=0.0)
    found = set()
    for path, value in cmp.flatten(refs.float64.value):
        value = cmp.dense(value)
        if isinstance(value, torch.Tensor) and value.numel() and is_inexact(value.dtype):
            if float(torch.nan_to_num(value.detach().abs(), nan=math.inf).max()) <= 1e-6 * scale:
                found.add(path)
    return found


def no_further_off(batched, alone) -> bool:
    """Whether every element of ``batched`` is as near zero as ``alone``'s (NaN: only against NaN)."""
    if not (isinstance(batched, torch.Tensor) and isinstance(alone, torch.Tensor)) or batched.shape != alone.shape:
        return False
    b, a = batched.detach().cpu().abs().double(), alone.detach().cpu().abs().double()
    return bool(((b <= a) | (torch.isnan(b) & torch.isnan(a)) | (torch.isnan(a) & ~torch.isnan(b))).all())


def near_float64(ctx: Context, actual: dict, paths: set[str]) -> bool:
    """Whether the batched result's leaves ``paths`` are as near float64 as rounding to their dtype allows."""
    dtype = getattr(torch, ctx.case.dtype)
    refs = ctx.ev.refs
    if dtype == wide(dtype) or not is_inexact(dtype) or not refs.float64.ok:
        return False
    exact = dict(cmp.flatten(refs.float64.value))
    pairs = [(p, v, exact.get(p)) for p, v in cmp.flatten(actual) if p in paths]
    if not pairs or not all(isinstance(v, torch.Tensor) and isinstance(e, torch.Tensor) for _, v, e in pairs):
        return False
    leaves = [(p, v) for p, v, _ in pairs]
    expected = [(p, cmp.dense(e).detach().cpu().to(v.dtype)) for p, v, e in pairs]

    def tolerance(dtype):
        base = ctx.tolerance(dtype)
        return Tolerance(atol=PRECISION_MARGIN * base.atol, rtol=PRECISION_MARGIN * base.rtol)

    for jumps in (False, True):
        slack = {p: PRECISION_MARGIN * s for p, s in (ctx.slack(1.0, jumps=jumps) or {}).items()}
        if not ctx.canonical(cmp.compare(leaves, expected, tolerance=tolerance, slack=slack), leaves, expected, slack):
            return True
    return False
