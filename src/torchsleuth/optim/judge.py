"""Judging a run against its reference: findings as records.

Design note. Two references, as the ops engine has them:

* ``layout``: a configuration that is not the baseline (another
  implementation, another layout, or both) against the baseline, the
  for-loop run on contiguous parameters in the same dtype on the same
  device. Both sides round at the same precision, so this is tight: the
  allowance is rounding at that precision (below), doubled for two rounded
  sides, and nothing about the dtype's distance from float64.
* ``precision``: the baseline itself against the float64 for-loop run on
  the CPU, with ``PRECISION_MARGIN`` times the allowance. When the baseline
  fails this (or raised), the other configurations of its dtype are judged
  against float64 too, so that a right fused kernel is not blamed for a
  wrong for-loop.

The allowance (``core.allowance``) for element ``i`` of a tensor in dtype
``d`` after ``N`` steps:

    allowed_i = atol + rtol*|e_i| + F * (k_i + u * (2*N*M_i + SLACK*N*L_i))

``atol``, ``rtol``: judge.tolerance's table for ``d``. ``u``: the unit
roundoff of ``d``, or of a lower precision the optimizer computes at (Muon's
bfloat16). ``M_i``: the largest magnitude the element had in the reference
run; ``2u*M_i`` a step is one unit in the last place, the most two correct
roundings of the stored value can differ by. ``L_i``: how far the element
moved in the reference, summed over steps; ``SLACK*u*L_i`` covers the few
roundings inside each update, times ``N`` because rounding errors in the
optimizer's state carry into every later step. ``k_i``: how far emulated
rounding to ``d`` carries the float64 run at that element (core.Rounded),
for what a bound in units of roundoff misses (subnormals, constants the
dtype cannot hold), floored at the tensor's mean ``k``: where an update
mixes every element (Muon's Newton-Schulz), one sample of rounding can be
small at one element by chance (Muon at lr=1000 in bfloat16 missed by 2x
at 2 of 240 elements without the floor). ``F``: 2 for the layout
reference and a contract's tensor form, ``PRECISION_MARGIN`` for the
precision one.

With the gradients of this matrix (magnitudes in [0.5, 2)) the worst
correct configuration of torch 2.13 on the CPU uses about a third of its
precision allowance (float16 Adadelta, whose ``eps`` is subnormal) and under
a tenth of its layout allowance; a dropped write misses it by orders of
magnitude in float32, and in bfloat16 wherever the reference moves an
element by more than a few units in its last place.

Kinds. A parameter beyond its allowance is a ``dropped_write`` when every
element beyond it still holds its initial value (the update never landed:
the seed story's frozen encoder); any other tensor beyond its allowance,
parameter or state (``weight.exp_avg_sq``), is a ``mismatch``. A
configuration gets at most one such finding per reference, naming the
frozen parameter or else the tensor that misses its allowance by the
largest factor; the detail lists every tensor that failed. Poison written
outside a parameter's view is an ``out_of_view_write`` (contract). The
contracts of contracts.py add ``invariant`` findings (reference
``contract``) and judge a tensor form with ``findings(..., against=...)``.
"""

from __future__ import annotations

import hashlib
import math

import torch

from ..dtypes import unit_roundoff
from ..judge.records import Finding, Mismatch
from ..judge.tolerance import PRECISION_MARGIN, SLACK, table
from ..run.records import CallSpec, TensorSpec
from . import core
from .matrix import Configuration

LAYOUT_FACTOR = 2.0  # two rounded results (judge.tolerance doubles its slack term for these too)


def findings(
    configuration: Configuration, actual: core.Trajectory, expected: core.Trajectory, *,
    reference: str, sensitivity: dict, u: float, steps: int, against: str = "",
) -> tuple[Finding, ...]:
    """What is wrong with ``actual`` against ``expected`` (the ``reference``), and any write outside a view.

    ``against``: the reference in words, where it is not the layout or precision one (a contract's: the same
    run with numbers for tensors); it is judged with the layout allowance, both sides rounded alike.
    """
    factor = PRECISION_MARGIN if reference == "precision" else LAYOUT_FACTOR
    failed = []  # (is a parameter, frozen, excess ratio, mismatch)
    for path, value in actual.final.items():
        if path not in expected.final:
            continue  # state that only one side keeps (LBFGS history of another length): the parameters decide
        mismatch, frozen, ratio = _judge(path, value, expected, actual, sensitivity.get(path), u=u, steps=steps, factor=factor)
        if mismatch is not None:
            failed.append((path in actual.params, frozen, ratio, mismatch))
    found = []
    if failed:
        # a parameter that never moved first (the finding is then a dropped write); else the worst tensor,
        # parameter or state: a corrupted momentum buffer may move its parameter only a little in a few steps
        failed.sort(key=lambda f: (not (f[0] and f[1]), -f[2]))
        is_param, frozen, _, worst = failed[0]
        kind = "dropped_write" if is_param and frozen else "mismatch"
        detail = "\n".join(m.describe() + (" (never moved)" if fr else "") for _, fr, _, m in failed)
        found.append(finding(configuration, actual, kind=kind, reference=reference, mismatch=worst, salt=against,
                             summary=_summary(configuration, actual, expected, kind, reference, worst, steps, against), detail=detail))
    return tuple(found) + outside(configuration, actual, steps)


def outside(configuration: Configuration, actual: core.Trajectory, steps: int) -> tuple[Finding, ...]:
    """A write outside a parameter's view (the poison changed): a contract, no reference needed."""
    found = []
    written = {name: n for name, n in actual.outside.items() if n}
    if written:
        name, count = max(written.items(), key=lambda item: item[1])
        shape, stride, offset, storage = actual.layouts[name]
        mismatch = Mismatch(path=name, attribute="storage", expected=f"the poison {core.SENTINEL:g} in every element outside the view",
                            actual=f"{count} of {storage - math.prod(shape)} changed")
        summary = (f"{configuration.words()} writes {count} element{'s' if count != 1 else ''} outside {name}'s view "
                   f"(shape {list(shape)}, stride {list(stride)}) in {steps} steps: the gaps between its elements or the guard after it.")
        detail = "\n".join(f"{n}: {c} element(s) outside the view changed" for n, c in written.items())
        found.append(finding(configuration, actual, kind="out_of_view_write", reference="contract", mismatch=mismatch,
                             summary=summary, detail=detail))
    return tuple(found)


def _judge(path, value, expected, actual, sensitivity, *, u, steps, factor) -> tuple[Mismatch | None, bool, float]:
    e = expected.final[path]
    if value.shape != e.shape:
        return Mismatch(path=path, attribute="shape", expected=str(list(e.shape)), actual=str(list(value.shape))), False, float("inf")
    tol = table(value.dtype if value.is_floating_point() else torch.float64)
    allowed = core.allowance(
        e, expected.largest[path], expected.path[path], atol=tol.atol, rtol=tol.rtol,
        u=max(u, unit_roundoff(value.dtype)) if value.is_floating_point() else u, steps=steps, factor=factor,
        slack=SLACK, k=sensitivity if sensitivity is not None else 0.0,
    )
    bad = core.beyond(value, e, allowed)
    if not bool(bad.any()):
        return None, False, 0.0
    a64, e64 = value.to(torch.float64), e.to(torch.float64)
    diff = (a64 - e64).abs()
    excess = torch.where(bad, torch.nan_to_num(diff / allowed, nan=float("inf"), posinf=float("inf")), torch.zeros_like(diff))
    flat = int(excess.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), value.shape)) if value.dim() else ()
    frozen = False
    if path in actual.initial:
        start = actual.initial[path]
        frozen = bool((a64[bad] == start[bad]).all())
    err = float(diff.reshape(-1)[flat])
    mismatch = Mismatch(
        path=path, attribute="values", expected=f"{float(e64.reshape(-1)[flat]):.6g}", actual=f"{float(a64.reshape(-1)[flat]):.6g}",
        mismatched=int(bad.sum()), numel=value.numel(), worst_index=index,
        max_abs_err=float("inf") if math.isnan(err) else err, atol=tol.atol, rtol=tol.rtol, allowed=float(allowed.reshape(-1)[flat]),
    )
    return mismatch, frozen, float(excess.reshape(-1)[flat])


def _against(configuration: Configuration, reference: str, against: str = "") -> str:
    if against:
        return against
    if reference == "layout":
        return f"the contiguous for-loop run in {configuration.dtype}"
    return "float64 on the CPU"


def _summary(configuration, actual, expected, kind, reference, m: Mismatch, steps, against="") -> str:
    tensor = m.path
    where = ""
    if tensor in actual.layouts:
        shape, stride, _, _ = actual.layouts[tensor]
        where = f" (shape {list(shape)}, stride {list(stride)})"
    if kind == "dropped_write":
        start = actual.initial[tensor]
        reference_moved = expected.final[tensor].to(torch.float64) != start
        kept = int((reference_moved & (actual.final[tensor].to(torch.float64) == start)).sum())
        moved = float((expected.final[tensor].to(torch.float64) - start).abs().max())
        return (f"{configuration.words()} never updates {tensor}{where} in {steps} steps: {kept} of the "
                f"{int(reference_moved.sum())} elements {_against(configuration, reference, against)} moves (by up to {moved:.3g}) "
                f"keep their initial value; {m.mismatched} of {m.numel} are beyond the allowance (allowed {m.allowed:.3g} at the worst).")
    share = f"{m.mismatched} of {m.numel} elements" if m.attribute == "values" else m.attribute
    error = "" if m.max_abs_err is None else f" off by up to {m.max_abs_err:.3g}"
    allowed = "" if m.allowed is None else f", allowed {m.allowed:.3g} at the worst"
    return (f"{configuration.words()} leaves {tensor}{where}{error} after {steps} steps against "
            f"{_against(configuration, reference, against)} ({share}{allowed}).")


def finding(configuration: Configuration, actual: core.Trajectory, *, kind, reference, mismatch, summary, detail, salt="") -> Finding:
    """A finding of ``configuration``; ``salt`` tells apart findings of one kind and reference (two contracts)."""
    case_id = configuration.case.id
    salted = f"|{salt}" if salt else ""
    return Finding(
        id="f-" + hashlib.sha256(f"{case_id}|{kind}|{reference}{salted}".encode()).hexdigest()[:10],
        kind=kind, op=f"torch.optim.{configuration.optimizer}", opinfo=configuration.optimizer,
        variant=configuration.implementation, dtype=configuration.dtype, device=configuration.device, reference=reference,
        case_id=case_id, layouts=configuration.case.layouts, summary=summary, mismatch=mismatch, call=call_spec(configuration, actual),
        detail=detail,
    )


def call_spec(configuration: Configuration, actual: core.Trajectory) -> CallSpec:
    """The parameters as the optimizer saw them: the findings file lists their shapes and strides from this."""
    tensors = []
    for name in actual.params:
        shape, stride, offset, storage = actual.layouts[name]
        laid_out = configuration.layout if tuple(stride) != tuple(core.strides_of(shape, "contiguous")) else "contiguous"
        tensors.append(TensorSpec(path=name, shape=tuple(shape), stride=tuple(stride), storage_offset=offset, storage_numel=storage,
                                  dtype=configuration.dtype, device=configuration.device, layout=laid_out))
    return CallSpec(
        function="", args_src="", kwargs_src="", tensors=tuple(tensors), variant=configuration.implementation,
        why_not="an optimizer finding is several steps, not one op call: `torchsleuth optim` writes its repro script "
                "(OUT/repros/<finding id>.py) when it finds it",
    )
