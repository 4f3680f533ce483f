"""Where a derivative's exact value leaves a dtype's range: the elements the autodiff oracle gives no verdict at.

Design note. The ``thresholds`` search puts an op's argument where its
result overflows, underflows or is subnormal (search.edges). The function is
judged there against its exact value; a derivative formula is not the
function, and where the derivative itself (or its product with the tangent
and cotangents, in whichever order a formula multiplies them) lies outside
the dtype's normal range, ``[smallest normal, largest]``, two right
formulas part: one overflows where the other multiplies in another order
(exp's forward over reverse at 88.72 in float32, where the derivative fits
but ``exp(x) * v`` does not), or an error below the smallest normal is
scaled up by a tangent drawn with ``|x|`` (erfcx's second derivative at
4.8e37 is 1e-113; float32 gives 2.35e-38, times a tangent of 4.8e34). No
verdict there, and the case's note says how many elements that left out.

``outside`` says where, for a one-argument function of run.exact_functions
differentiated along ``v`` (against cotangents ``u``) at an argument of few
distinct values (a search's set; OpInfo's random samples are left to the
usual rules): the exact first and second derivatives at each distinct value
by mpmath (``mp.diff`` at a step relative to the argument, at far more bits
than any dtype, cached), the quantities a mode computes on the way
(``f'``, ``f' v`` for J v; also ``f''``, ``f' u``, ``f'' u``, ``f'' v``,
``f'' u v`` for H v) each checked against the range. Where mpmath has no
value (a pole, outside the domain, too slow) the element is judged as before:
finite differences decide there. ``beyond`` is the rule without an exact
function: a mode's own float64 value outside the dtype's range (the
magnitude sets of binary ops), for the verdict in the case's dtype.
"""

from __future__ import annotations

import functools

import mpmath as mp
import torch

from ...run.exact import TooSlow, deadline
from ...run.exact_functions import FUNCTIONS

# Bits the derivatives are taken at, and the relative step of mpmath's differences: 2^-64 of the argument leaves
# 2^-320 of rounding over a step squared, far below any dtype's smallest normal relative to the derivative.
BITS, STEP = 448, 64
# Distinct values of the argument past which the rule is not tried (OpInfo's samples: every element its own).
DISTINCT = 16
# Seconds mpmath may take for one value's two derivatives (lgamma next to a pole takes the longest, about 0.7 s).
EACH = 2.0
FIRST, SECOND = "first", "second"


def applies(op: str) -> bool:
    entry = FUNCTIONS.get(op)
    return entry is not None and entry.arity == 1 and not op.startswith(("polygamma", "special.polygamma"))


@functools.cache
def derivatives(op: str, x: float) -> tuple[mp.mpf | None, mp.mpf | None]:
    """The exact f'(x) and f''(x) of ``op``'s function; None for one mpmath has no real finite value of."""
    fn = FUNCTIONS[op].fn
    found = []
    with mp.workprec(BITS):
        point = mp.mpf(x)
        h = abs(point) * mp.mpf(2) ** -STEP if x else mp.mpf(2) ** -(STEP + 20)
        for n in (1, 2):
            try:
                with deadline(EACH):
                    d = mp.diff(fn, point, n, h=h)
            except (Exception, TooSlow):
                d = None
            found.append(+d if isinstance(d, mp.mpf) and mp.isfinite(d) else None)
    return found[0], found[1]


def _outside_range(q, low: float, high: float) -> bool:
    return q != 0 and not (low <= abs(q) <= high)


def outside(op: str, order: str, x: torch.Tensor, v: torch.Tensor, u: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Where the exact derivative of ``op`` at ``x`` (or a product a mode computes on the way, see the design note)
    lies outside ``dtype``'s normal range; None where the rule does not apply (no exact function, too many values)."""
    if not applies(op) or x.is_complex() or u is not None and u.shape != x.shape or v.shape != x.shape:
        return None
    values = x.detach().cpu().to(torch.float64)
    distinct = torch.unique(values[torch.isfinite(values)])
    if distinct.numel() > DISTINCT:
        return None
    info = torch.finfo(dtype)
    low, high = info.smallest_normal, info.max
    bad_at: dict[float, tuple] = {}
    for value in distinct.tolist():
        d1, d2 = derivatives(op, value)
        bad_at[value] = (d1, d2)
    found = torch.zeros(values.shape, dtype=torch.bool)
    flat_x, flat_v = values.reshape(-1), v.detach().cpu().to(torch.float64).reshape(-1)
    flat_u = u.detach().cpu().to(torch.float64).reshape(-1) if u is not None else None
    flat = found.reshape(-1)
    for i, value in enumerate(flat_x.tolist()):
        if value not in bad_at:
            continue
        d1, d2 = bad_at[value]
        if d1 is None:
            continue
        tv = mp.mpf(flat_v[i].item())
        quantities = [d1, d1 * tv]
        if order == SECOND:
            if d2 is None:
                continue
            tu = mp.mpf(flat_u[i].item()) if flat_u is not None else mp.mpf(1)
            quantities += [d2, d1 * tu, d2 * tu, d2 * tv, d2 * tu * tv]
        flat[i] = any(_outside_range(q, low, high) for q in quantities)
    return found


def beyond(values: list[dict], dtype: torch.dtype) -> dict:
    """By leaf: where a mode's float64 value (``values``: a dict of leaves per mode) is finite but outside ``dtype``'s
    normal range: the exact derivative's stand-in where no exact function is known."""
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    found: dict = {}
    for mode in values:
        for p, t in mode.items():
            size = t.detach().cpu().abs().to(torch.float64)
            out = torch.isfinite(size) & (size != 0) & ((size < info.smallest_normal) | (size > info.max))
            found[p] = found[p] | out if p in found else out
    return found
