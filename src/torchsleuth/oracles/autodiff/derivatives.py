"""The call the autodiff oracle differentiates, and its derivatives as calls the judge's tolerance rule can measure.

Design note. The helpers (autodiff.helpers) take derivatives of ``call(T)``,
a function of the call's tensors by path. ``as_call`` makes that function
from a prepared call; ``widened`` is the same call in float64 (complex128),
its tensors laid out as before and its dtype arguments of the case's dtype
turned too, the way the script turns them.

The judge's rule (judge.tolerance) widens the table by how far a result's
float64 value moves when its inputs are nudged. For a derivative that result
is the derivative itself, so ``derivative`` makes it a call of its own: the
op's arguments plus the tangent and cotangents as keywords
(``autodiff_tangent``, ``autodiff_cotangents``), computing one mode's
derivative. ``calls.Judged`` then measures it like any other call, nudging
the tangent and cotangents too (the derivative is linear in them, so they
move it no more than rounding does), and only when a comparison with the
table fails (``by_rule``).

The rule models rounding of the inputs, not of a computation's
intermediates beyond a term for composite calls that scales with the
result; a derivative that is a small difference of large intermediates
(layer_norm over a single element, whose derivative is exactly 0; a
norm's second derivative) has nothing but such rounding in it. So two
modes may also differ by ``NOISE_FACTOR`` times their ``noise``: how far
each moves, in its own dtype, when every input moves by a few units in the
last place. A wrong formula moves its result systematically, far beyond
that. The table's atol is for values of order 1, and a derivative grows with
the tangent (and the cotangents), so it grows by their size (``scale``).
"""

from __future__ import annotations

import math

import dataclasses

import torch

from ... import dtypes
from ...judge import calls
from ...judge import compare as cmp
from ...judge.records import Mismatch
from ...judge.tolerance import Tolerance, table
from ...run import call, tree
from . import helpers

TANGENT, COTANGENTS = "autodiff_tangent", "autodiff_cotangents"
# The noise of a derivative's computation (``noise``): inputs nudged by up to NUDGE units of roundoff, twice; a
# disagreement of two modes may exceed the rule by NOISE_FACTOR times the larger move.
NUDGE, NOISE_SEEDS, NOISE_FACTOR = 4.0, (1, 2), 4.0
FIRST, SECOND = "first", "second"  # which derivative ``derivative`` computes: J v by forward mode, H v by double backward


def as_call(prepared: call.Prepared):
    """The prepared call as a function of its tensors by path (``call(T)``, as a script writes it)."""
    def call_of(T):
        args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, T)
        return prepared.function(*args, **kwargs)

    return call_of


def widened(prepared: call.Prepared) -> call.Prepared:
    """``prepared`` in float64 (complex128): its tensors widened in their layouts, dtype arguments of the case's dtype too."""
    dtype = getattr(torch, prepared.case.dtype)
    wide = dtypes.wide(dtype)

    def move(value):
        return wide if isinstance(value, torch.dtype) and value == dtype else value

    case = dataclasses.replace(prepared.case, dtype=dtypes.name(wide))
    moved = dataclasses.replace(prepared, case=case, args=tree.map_values(prepared.args, move),
                                kwargs=tree.map_values(prepared.kwargs, move))
    return calls.with_tensors(moved, helpers.widened(prepared.tensors))


class Derivative:
    """One mode's derivative of a call, as a call of the op's own arguments with the tangent and cotangents as keywords."""

    def __init__(self, function, order: str, path: str):
        self.function, self.order, self.path = function, order, path

    def __call__(self, *args, **kwargs):
        kwargs = dict(kwargs)
        v, u = kwargs.pop(TANGENT), list(kwargs.pop(COTANGENTS))
        T = tree.call_leaves(args, kwargs)

        def call_of(U):
            a, k = tree.replace_call(args, kwargs, U)
            return self.function(*a, **k)

        if self.order == FIRST:
            return dict(helpers.forward_mode(call_of, T, self.path, v))
        return {f"grad[{self.path}]": helpers.double_backward(call_of, T, self.path, u, v)}


def derivative(prepared: call.Prepared, order: str, path: str, v: torch.Tensor, u: list[torch.Tensor]) -> call.Prepared:
    """``prepared``'s derivative (``order``: FIRST or SECOND) with respect to ``path``, as a prepared call."""
    kwargs = {**prepared.kwargs, TANGENT: v, COTANGENTS: tuple(u)}
    tensors = {**prepared.tensors, TANGENT: v, **{f"{COTANGENTS}[{i}]": c for i, c in enumerate(u)}}
    return dataclasses.replace(prepared, function=Derivative(prepared.function, order, path), kwargs=kwargs,
                               tensors={p: t.detach() for p, t in tensors.items()}, written=frozenset())


def kept(actual: dict, expected: dict, smooth: dict) -> dict:
    """``actual`` with ``expected``'s values where the function is not smooth: those elements are not judged."""
    return {p: torch.where(smooth[p].to(a.device), a, expected[p].to(a.dtype)) for p, a in actual.items()}


def by_rule(prepared: call.Prepared, order: str, path: str, v, u, actual: dict, expected: dict, smooth: dict, *,
            override, op: str, noise, allowance: dict | None = None) -> Mismatch | None:
    """The first leaf where ``actual`` (this mode's derivative of ``prepared``) is not ``expected`` (another mode's) within
    the judge's rule for two rounded results plus ``NOISE_FACTOR`` times ``noise()`` (by leaf: how far the two modes move
    when their inputs move by a few units in the last place) plus ``allowance`` (by leaf: the second order at a
    conditioned matrix, judge.conditioning), smooth elements only."""
    actual = kept(actual, expected, smooth)
    size = scale(v, u if order == SECOND else [])

    def tolerance(dtype: torch.dtype) -> Tolerance:
        allowed = table(dtype, override)
        return Tolerance(atol=allowed.atol * size, rtol=allowed.rtol)

    found = cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=tolerance)
    if not found:
        return None
    extra = {p: NOISE_FACTOR * n for p, n in noise().items()}
    for p, more in (allowance or {}).items():
        extra[p] = extra[p] + more if p in extra and extra[p].shape == more.shape else more
    for p, a in actual.items():  # the table's atol, for a derivative as large as the tangent (and cotangents) make it
        grown = torch.full(a.shape, table(a.dtype, override).atol * (size - 1), dtype=torch.float64)
        extra[p] = extra[p] + grown if p in extra else grown
    judged = calls.Judged(derivative(prepared, order, path, v, u), actual, override=override, function_name="", op=op)
    found = judged.context.differs(actual, expected, scale=2.0, extra=extra)
    return found[0] if found else None


def scale(v: torch.Tensor, u: list) -> float:
    """How large a derivative along ``v`` (against cotangents ``u``) is for values of order 1: the root mean square of ``v``
    (times that of the cotangents), at least 1. The table's atol is for values of order 1; tangents grow with |x|."""
    size = 1.0
    for t in (v, *u):
        if t.numel():
            size *= max(1.0, float(t.detach().abs().to(torch.float64).pow(2).mean().sqrt()))
    return size


def nudged(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``t`` (floating or complex) with each element moved by up to ``NUDGE`` units of roundoff of its own dtype, laid out alike."""
    if not helpers.inexact(t):
        return t
    work = torch.complex128 if t.is_complex() else torch.float64
    wide = t.detach().cpu().to(work)
    real = torch.view_as_real(wide) if wide.is_complex() else wide
    delta = (torch.rand(real.shape, generator=generator, dtype=torch.float64) * 2 - 1) * NUDGE * dtypes.unit_roundoff(t.dtype)
    real = real * (1 + delta)
    moved = torch.view_as_complex(real.contiguous()) if wide.is_complex() else real
    return helpers.like(moved.to(dtype=t.dtype, device=t.device), t)


def noise(compute, T: dict, v: torch.Tensor, u: list) -> dict[str, torch.Tensor]:
    """By leaf of ``compute(T, v, u)`` (a derivative in the tensors' own dtypes): how far it moves, at most, over two draws of
    every input (the call's tensors, the tangent, the cotangents) nudged by a few units in the last place of its dtype.
    That is the rounding its computation does on the way, which no float64 reference sees: a derivative that is a small
    difference of large intermediates (layer_norm over one element, a norm's second derivative) is all rounding."""
    base = compute(T, v, u)
    found: dict[str, torch.Tensor] = {}
    for seed in NOISE_SEEDS:
        generator = torch.Generator().manual_seed(seed)
        again = compute({p: nudged(t, generator) for p, t in T.items()}, nudged(v, generator), [nudged(c, generator) for c in u])
        for p, a in again.items():
            move = (a.detach().cpu().to(torch.complex128) - base[p].detach().cpu().to(torch.complex128)).abs()
            move = torch.nan_to_num(move, nan=0.0, posinf=0.0)
            found[p] = torch.maximum(found[p], move) if p in found else move
    return found


def by_differences(actual: dict, differences: dict) -> Mismatch | None:
    """The first leaf where an autodiff derivative is not float64's central difference within ``helpers.FD_ATOL``,
    ``helpers.FD_RTOL`` and the difference's own error estimate, smooth elements only (``differences``: path ->
    (estimate, error, smooth))."""
    tolerance = Tolerance(atol=helpers.FD_ATOL, rtol=helpers.FD_RTOL)
    for path, a in actual.items():
        estimate, error, smooth = (t.detach().cpu() for t in differences[path])  # an estimate may be another mode's, on the device
        a = torch.where(smooth, a.detach().cpu().to(estimate.dtype), estimate)
        m = cmp.compare_leaf(path, a, estimate, tolerance=lambda d: tolerance, slack=error, check_dtype=False)
        if m is not None:
            return m
    return None


def at(value: torch.Tensor, index: tuple[int, ...]) -> complex | float:
    """One element of ``value`` as a Python number."""
    value = value.detach().cpu()
    if value.numel() == 0:
        return math.nan
    return value[index].item() if index else value.reshape(-1)[0].item()


def slack_at(m: Mismatch, expected: torch.Tensor) -> float:
    """What the rule allowed beyond ``m.atol + m.rtol * |expected|`` at the mismatch's worst element."""
    if m.allowed is None:
        return 0.0
    return max(0.0, m.allowed - m.atol - m.rtol * abs(at(expected, m.worst_index)))
