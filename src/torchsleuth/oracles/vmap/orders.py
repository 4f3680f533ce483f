"""Where a batched result and a result alone may both be right and still differ past any tolerance: overflow.

Design note. Two computations of one value may overflow differently and both
be right, in two ways the vmap oracle meets:

* a documented formula evaluated left to right (``add``'s ``input + alpha *
  other``, run.ranged.DOCUMENTED): the kernel alone computes ``alpha *
  other`` in the dtype, an infinity past its range, where a batching rule
  that computes in another precision gives the exact result. Where a side is
  an infinity or NaN as the float64 run overflowing like the dtype
  (``refs.ranged``) has it, and plain float64 is finite, that side's element
  stands for the float64 value rounded to the dtype (``documented``);
* a sum whose order is free: the gradient of a broadcast tensor of a
  pointwise op sums the gradient over the broadcast dims, and a batching rule
  sums them in another order. Where the terms' magnitudes add up past the
  dtype's largest value, some order's partial sum overflows: an infinity of
  either sign, or a NaN where two of them meet, is what that order gives,
  even where the exact sum fits (``sum_orders``: the terms are the float64
  gradient against the tensor expanded to the broadcast shape, their
  magnitudes summed back to the tensor's shape). There a non-finite side's
  element stands for the float64 value rounded to the dtype, or, where that
  is not finite either (a float64 case has no wider value), for the other
  side's.

Either way only a non-finite element is replaced, and by float64's value:
the other side must still be what the op computes there, so a batching rule
that gives a wrong finite value, or an infinity where nothing can overflow,
is still found.
"""

from __future__ import annotations

import torch

from ...judge import calls
from ...judge import compare as cmp
from ...judge.context import Context


def documented(ctx: Context, side: dict) -> tuple[dict, int]:
    """``side`` (leaves by path) with each element that overflowed as the documented evaluation does standing for
    float64 rounded to its dtype; and how many were replaced."""
    refs = ctx.ev.refs
    if not (refs.float64.ok and refs.ranged.ok):
        return side, 0
    exact, limited = dict(cmp.flatten(refs.float64.value)), dict(cmp.flatten(refs.ranged.value))
    masks = {}
    for path, value in side.items():
        base, limit = cmp.dense(exact.get(path)), cmp.dense(limited.get(path))
        if _comparable(value, base, limit):
            v, limit = value.detach().cpu().double(), limit.detach().cpu().double()
            masks[path] = torch.isfinite(base.cpu()) & ~torch.isfinite(v) & ((torch.isnan(v) & torch.isnan(limit)) | (v == limit))
    return _replaced(side, masks, exact)


def sum_orders(batch, key: tuple, b: int, sample: dict, ctx: Context, actual: dict, expected: dict) -> tuple[dict, dict, int]:
    """Both sides with each element of a broadcast tensor's gradient whose terms' magnitudes add up past the dtype's largest
    value, and where a side is not finite, standing for float64 rounded to the dtype where that is finite (the finite side
    is still judged against it), else for the other side (a float64 case: no wider value to judge by); and how many."""
    refs = ctx.ev.refs
    mapped = {p: t for p, t in sample.items() if p in batch.paths}
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in mapped.values()))
    except RuntimeError:
        return actual, expected, 0
    largest = torch.finfo(getattr(torch, ctx.case.dtype)).max
    exact = dict(cmp.flatten(refs.float64.value)) if refs.float64.ok else {}
    actual, expected, count = dict(actual), dict(expected), 0
    for p in batch.differentiated:
        path, t = f"grad[{p}]", sample.get(p)
        a, e = actual.get(path), expected.get(path)
        if not (_comparable(a, e) and isinstance(t, torch.Tensor)) or t.shape == shape:
            continue
        terms = _terms(batch, key, b, sample, p, shape)
        if terms is None:
            continue
        free = (terms.abs().sum_to_size(t.shape) > largest).to(a.device) & ~(torch.isfinite(a) & torch.isfinite(e))
        if not bool(free.any()):
            continue
        count += int(free.sum())
        value = cmp.dense(exact.get(path))
        if isinstance(value, torch.Tensor) and value.shape == a.shape:
            rounded = value.detach().to(a.dtype).to(a.device)
            known = free & torch.isfinite(rounded)
            actual[path] = torch.where(known & ~torch.isfinite(a), rounded, a)
            expected[path] = torch.where(known & ~torch.isfinite(e), rounded, e)
            free = free & ~known
        expected[path] = torch.where(free, actual[path], expected[path])
    return actual, expected, count


def _terms(batch, key: tuple, b: int, sample: dict, path: str, shape) -> torch.Tensor | None:
    """The float64 gradient against ``sample[path]`` expanded to ``shape``: the terms its own gradient sums."""
    expanded = {**sample, path: sample[path].detach().expand(shape).contiguous()}
    tensors = {p: t.detach().requires_grad_(p in batch.differentiated) for p, t in expanded.items()}
    judged = calls.Judged(calls.with_tensors(batch.prepared, tensors), None, override=batch.subject.override,
                          function_name=batch.function_name, op=batch.op)
    wide = judged.context.ev.refs.float64
    if not wide.ok:
        return None
    terms = cmp.dense(dict(cmp.flatten(wide.value)).get(f"grad[{path}]"))
    if not isinstance(terms, torch.Tensor) or tuple(terms.shape) != tuple(shape):
        return None
    return torch.nan_to_num(terms.detach().cpu().double(), nan=0.0)


def _replaced(side: dict, masks: dict, exact: dict) -> tuple[dict, int]:
    count = sum(int(m.sum()) for m in masks.values())
    if not count:
        return side, 0
    found = dict(side)
    for path, mask in masks.items():
        value = side[path]
        rounded = cmp.dense(exact[path]).detach().cpu().to(value.dtype).to(value.device)
        found[path] = torch.where(mask.to(value.device), rounded, value)
    return found, count


def _comparable(value, *others) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and all(
        isinstance(o, torch.Tensor) and o.shape == value.shape for o in others)
