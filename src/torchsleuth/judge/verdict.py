"""The verdict of the references and contracts: what "wrong" means for one case, as findings.

Design note. ``judge`` looks at a case's evidence (run.evidence) and applies,
in order:

1. the contracts (judge.contracts): storage to every variant, then the
   in-place or out= contract for those variants;
2. the layout reference, for functional, method and backward cases: the same
   call with every tensor contiguous on the same device; for the all-
   contiguous case that is the same call twice, so it is compared bit for bit
   (``nondeterministic``, unless PyTorch says the op has no deterministic
   implementation, which is noted and not reported);
3. on the all-contiguous functional and backward cases only: the precision
   reference (float64 on the CPU) and, off the CPU, the device reference.
   Layout cases are tied to these through the layout reference.
   A call compiled by torch.compile (``Evidence.compiled``, the compile
   oracle's variant cases) is other kernels than eager's: its contiguous case
   is compared with eager by the rule, like a layout case, never bit for bit.
   Where the op's function has an exact value (judge.arbiter), the elements
   the precision reference rejects are arbitrated by it: float64's own error
   is not the dtype's. A float64 case of another op notes that it was judged
   only for consistency.

Comparability is decided by facts (run.facts): random ops are compared on
metadata and seeded determinism, uninitialized results on metadata, results
defined by storage against the same call on the same storage layout.
Against float64, an element that is an infinity or NaN where float64 is finite
is excused where the float64 run overflowing like the dtype (``run.ranged``)
has it so too. Tolerances come from judge.tolerance. A comparison is first made with the
table alone; only if that fails is the float64 sensitivity computed and the
comparison made again with the widened tolerance, so a clean case pays for
no float64 runs.
"""

from __future__ import annotations

import math

import torch

from ..dtypes import is_inexact, wide
from ..errors import one_line
from ..run.evidence import Evidence
from . import arbiter, canonical, conditioning
from . import compare as cmp
from . import contracts
from .context import Context
from .records import Outcome
from .tolerance import DEVICE_FACTOR, PRECISION_MARGIN, Tolerance


def judge(ev: Evidence, *, override: tuple[float, float] | None = None, seconds: float = 0.0) -> Outcome:
    case = ev.case
    if ev.ran.error is not None:
        return Outcome(case=case, status="raised", reason=one_line(ev.ran.error), seconds=seconds)
    if not ev.refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(ev.refs.contiguous.error), seconds=seconds)
    ctx = Context(ev, override)
    if contracts.unreadable(ctx):
        return Outcome(case=case, status="finding", findings=tuple(ctx.findings), seconds=seconds)
    contracts.storage(ctx)
    if case.variant == "inplace":
        contracts.inplace(ctx)
    elif case.variant == "out":
        contracts.out(ctx)
    else:
        layout(ctx)
        if not case.layouts:
            precision(ctx)
            device(ctx)
    if ctx.facts.random:
        contracts.draws(ctx)
    status = "finding" if ctx.findings else "pass"
    return Outcome(case=case, status=status, reason="; ".join(ctx.notes), findings=tuple(ctx.findings), seconds=seconds)


def layout(ctx: Context) -> None:
    ev, facts = ctx.ev, ctx.facts
    kind = "gradient_mismatch" if ctx.case.variant == "backward" else "mismatch"
    actual, expected = ev.ran.result, ev.refs.contiguous.value
    if facts.storage_defined:
        return contracts.same_layout(ctx)
    again = not ctx.case.layouts and not ev.compiled  # the same call twice: bit for bit
    if facts.uninitialized or ((facts.random or facts.repeated_writes) and not again):
        # values are memory garbage, draws PyTorch makes differently per layout (inductor with its own generator), or
        # writes through repeated indices whose order the layout picks: metadata only
        found = [m for m in cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=ctx.tolerance) if m.attribute != "values"]
    elif again:
        found = cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=ctx.tolerance, bitwise=True)
    else:
        found = ctx.differs(actual, expected, scale=2.0)
    if not found:
        return
    mismatch = found[0]
    if again and mismatch.attribute == "values":
        if ev.declared_nondeterministic:
            ctx.notes.append(f"{ctx.short()} is nondeterministic by PyTorch's own account")
            return
        ctx.report(
            "nondeterministic", "determinism",
            f"{ctx.name()} gives different results for the same call twice, and PyTorch does not declare it nondeterministic",
            mismatch,
        )
        return
    if ev.declared_nondeterministic and ev.nondeterministic:
        ctx.notes.append(f"{ctx.short()} on {ctx.placed()} differs from the contiguous call, but PyTorch declares it nondeterministic")
        return
    ctx.report(kind, "layout", f"{ctx.name()} on {ctx.placed()} differs from the contiguous call", mismatch)


def precision(ctx: Context) -> None:
    ev, facts = ctx.ev, ctx.facts
    dtype = getattr(torch, ctx.case.dtype)
    if dtype == wide(dtype) and is_inexact(dtype) and not facts.random:
        note = arbiter.consistency_only(ctx.case)
        if note:
            ctx.notes.append(note)
    if dtype == wide(dtype) or not is_inexact(dtype) or facts.random or facts.uninitialized or facts.storage_defined:
        return
    if facts.repeated_writes and ctx.case.layouts:
        return  # the float64 call walks the contiguous layout: another order of the repeated writes
    names = set(facts.names) | {ctx.short_op(facts.op)}
    if names & canonical.REPRESENTATION_OPS:
        ctx.notes.append(f"{', '.join(sorted(names & canonical.REPRESENTATION_OPS))} is defined by its dtype's representation: "
                         "float64 is no reference")
        return
    reference = ev.refs.float64
    if not reference.ok:
        ctx.notes.append("no float64 reference: " + one_line(reference.error))
        return
    actual = cmp.flatten(ev.ran.result)
    in_float64 = cmp.flatten(reference.value)
    if names & canonical.LIMIT_OPS:  # the dtype's own limits (judge.canonical)
        in_float64 = [(p, canonical.at_dtype_limits(v, dtype)) for p, v in in_float64]
    expected = _rounded_like(in_float64, actual)
    zeros = _structural_zeros(ctx, in_float64)
    if zeros:
        ctx.notes.append(f"{', '.join(zeros)} is zero in float64 (a structural zero): its rounding noise is not judged")
        actual = [(p, v) for p, v in actual if p not in zeros]
        expected = [(p, v) for p, v in expected if p not in zeros]
    def tolerance(dtype):
        base = ctx.tolerance(dtype)
        return Tolerance(atol=PRECISION_MARGIN * base.atol, rtol=PRECISION_MARGIN * base.rtol)

    second = conditioning.allowance(ctx.case.op, ctx.case.edits, ev.prepared.tensors, dict(in_float64), dtype) \
        if ctx.case.variant == "backward" else {}  # a gradient at a conditioned matrix: the second order too

    for jumps in (False, True, "ranged"):
        if jumps == "ranged":  # a last try: the elements where the call's intermediates overflow in the dtype
            overflowed = _overflowed(ctx, actual, in_float64)
            if not overflowed:
                break
            ctx.notes.append(f"{', '.join(overflowed)}: an intermediate of the call overflows {ctx.case.dtype} where float64 "
                             "does not, or the op's documented formula evaluated in it gives the result; those elements are not judged")
            actual = cmp.set_aside(actual, expected, overflowed)
        slack = {p: PRECISION_MARGIN * s for p, s in (ctx.slack(1.0, jumps=bool(jumps)) or {}).items()}
        slack = {**second, **{p: s + second[p] if p in second and second[p].shape == s.shape else s for p, s in slack.items()}}
        found = ctx.canonical(cmp.compare(actual, expected, tolerance=tolerance, slack=slack), actual, expected, slack)
        if not found:
            return
    if found:  # the exact value, where the function has one, sets aside the elements where float64 is the wrong one
        acquit, lines = arbiter.acquitted(ctx.case, ctx.ev.prepared, ctx.ev.refs.host, actual, expected, tolerance)
        if acquit:
            ctx.notes.extend(lines)
            actual = cmp.set_aside(actual, expected, acquit)
            found = ctx.canonical(cmp.compare(actual, expected, tolerance=tolerance, slack=slack), actual, expected, slack)
    if found:
        kind = "gradient_mismatch" if ctx.case.variant == "backward" else "mismatch"
        ctx.report(kind, "precision", f"{ctx.name()} is further from the float64 result than rounding to {ctx.case.dtype} allows", found[0])


def device(ctx: Context) -> None:
    ev, facts = ctx.ev, ctx.facts
    if ctx.case.device == "cpu" or facts.random or facts.uninitialized:
        return
    if facts.repeated_writes:
        ctx.notes.append(f"{ctx.short()} writes through repeated indices, whose order PyTorch leaves unspecified: "
                         "not compared with the CPU")
        return
    reference = ev.same_layout if facts.storage_defined else ev.refs.cpu
    if not reference.ok:
        ctx.notes.append("no CPU reference: " + one_line(reference.error))
        return
    extra = {}
    zeros = _structural_zeros(ctx, cmp.flatten(ev.refs.float64.value)) if ev.refs.float64.ok else []
    if ev.refs.float64.ok:
        # how far the CPU's own result is from the unrounded float64 one
        exact = dict(cmp.flatten(ev.refs.float64.value))
        for path, value in cmp.flatten(reference.value):
            value, base = cmp.dense(value), cmp.dense(exact.get(path))
            if isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor) and value.shape == base.shape and is_inexact(value.dtype):
                work = torch.complex128 if value.is_complex() else torch.float64
                extra[path] = DEVICE_FACTOR * torch.nan_to_num((value.detach().cpu().to(work) - base.cpu().to(work)).abs(), nan=0.0)
    # devices may differ in an auxiliary output's dtype (saved statistics in float32 for
    # half inputs, on CUDA): values are compared, in float64, not dtypes
    # a leaf empty on one device and not on the other is an output one of them
    # does not compute (batch norm's saved statistics in eval mode)
    uncomputed = {p for (p, a), (_, e) in zip(cmp.flatten(ev.ran.result), cmp.flatten(reference.value))
                  if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and (a.numel() == 0) != (e.numel() == 0)}

    def differing(result) -> list:
        return [m for m in ctx.differs(result, reference.value, scale=2.0, extra=extra, check_dtype=False) if m.path not in {*zeros, *uncomputed}]

    found = differing(ev.ran.result)
    if found:  # the exact value, where the function has one, sets aside the elements where the CPU is the wrong one
        actual, expected = cmp.flatten(ev.ran.result), cmp.flatten(reference.value)
        acquit, lines = arbiter.acquitted(ctx.case, ev.prepared, ev.refs.host, actual, expected, ctx.tolerance,
                                          names=("the CPU", ctx.case.device))
        if acquit:
            ctx.notes.extend(lines)
            found = differing(dict(cmp.set_aside(actual, expected, acquit)))  # a dict of leaves flattens to the same paths
    if found and ev.declared_nondeterministic and ev.nondeterministic:
        ctx.notes.append(f"{ctx.short()} on {ctx.case.device} differs from the CPU, but PyTorch declares it nondeterministic there")
    elif found:
        kind = "gradient_mismatch" if ctx.case.variant == "backward" else "mismatch"
        ctx.report(kind, "device", f"{ctx.name()} on {ctx.case.device} differs from the CPU beyond how far the CPU is from float64", found[0])


def _overflowed(ctx: Context, actual: cmp.Leaves, exact: cmp.Leaves) -> dict[str, torch.Tensor]:
    """Per leaf, the elements non-finite as the float64 run overflowing like the dtype (``refs.ranged``) has them, where
    plain float64 is finite: an intermediate of the call passed the dtype's largest value (``run.ranged``)."""
    ranged = ctx.ev.refs.ranged
    if not ranged.ok:
        return {}
    found = {}
    limited, exact = dict(cmp.flatten(ranged.value)), dict(exact)
    for path, value in actual:
        if not (isinstance(value, torch.Tensor) and value.layout == torch.strided):
            continue
        base, limit = cmp.dense(exact.get(path)), cmp.dense(limited.get(path))
        tensors = (value, base, limit)
        if not all(isinstance(t, torch.Tensor) and t.shape == value.shape and t.is_floating_point() for t in tensors):
            continue
        value, base, limit = (t.detach().cpu().to(torch.float64) for t in tensors)
        same = (torch.isnan(value) & torch.isnan(limit)) | (value == limit)  # a documented formula's rounding: finite too
        mask = torch.isfinite(base) & same
        if bool(mask.any()):
            found[path] = mask
    return found


def _structural_zeros(ctx: Context, exact: cmp.Leaves) -> list[str]:
    """Leaves whose float64 value is zero to within 1e-6 of the inputs' scale.

    An op whose exact result is identically zero (layer_norm over one element,
    the gradient of a shift-invariant function) leaves only rounding noise in
    lower precision, amplified by whatever the kernel divides by: its size
    says nothing about the kernel's accuracy, and no nudge of the inputs moves
    the float64 result off zero to measure it.
    """
    scale = max((float(t.detach().abs().max()) for t in ctx.ev.refs.host.values()
                 if isinstance(t, torch.Tensor) and t.numel() and is_inexact(t.dtype)), default=0.0)
    found = []
    for path, value in exact:
        value = cmp.dense(value)
        if isinstance(value, torch.Tensor) and value.numel() and is_inexact(value.dtype):
            largest = float(torch.nan_to_num(value.detach().abs(), nan=math.inf).max())
            if largest <= 1e-6 * scale:
                found.append(path)
    return found


def _rounded_like(expected: cmp.Leaves, actual: cmp.Leaves) -> cmp.Leaves:
    """Each float64 expected leaf rounded to the dtype of the matching actual leaf."""
    dtypes = {p: v.dtype for p, v in actual if isinstance(v, torch.Tensor)}
    found = []
    for path, value in expected:
        value = cmp.dense(value)
        if isinstance(value, torch.Tensor) and path in dtypes:
            value = value.detach().cpu().to(dtypes[path])
        found.append((path, value))
    return found
