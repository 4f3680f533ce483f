"""The autodiff oracle's derivatives as plain torch code: the oracle runs these functions, and each repro script holds a copy.

Design note. Every derivative is taken of ``call(T)``, the op's call on a
dict of its tensors by path, with respect to one of them (``path``), and
only through public autograd: forward mode is ``torch.autograd.forward_ad``
dual tensors, reverse mode ``torch.autograd.grad``. What the oracle judges,
and what a script prints, is

* first order, ``J v``: ``forward_mode`` (the outputs' tangents), and
  ``reverse_jvp`` (reverse mode twice: the gradient of ``<u^T J, v>`` with
  respect to ``u``, which is linear in ``u``); ``reverse_mode`` gives
  ``u^T J`` itself, for the contraction ``(u^T J) . v`` that needs no
  second derivative;
* second order, ``H v`` of ``Re <u, f(x)>``: ``double_backward`` (reverse
  over reverse) and ``forward_over_reverse`` (the tangent of the gradient);
* float64 central differences of the outputs (first order) or of the
  gradient (second order) along ``v``, with where they can be trusted:
  ``finite_differences`` takes one-sided quotients at ``STEPS`` and calls an
  element smooth only where both sides agree, the central quotient is
  stable as the step shrinks, and it stays put when x moves a step along
  other directions (``shifts``). Elsewhere the function has a kink
  (abs and relu at 0, ties of max and sort, a jump of floor) or the steps
  are lost to rounding, and no derivative there is judged.

The tangent is standard normal times ``max(1, SCALE |x|)`` elementwise, so
a step moves a large element of ``x`` relative to its size (a step lost to
rounding would make every quotient 0); it is laid out like ``x`` (``like``). Cotangents are standard normal. Both are drawn in float64
from a seed, then rounded to the tensor's dtype, so the float64 check and
the check in the case's dtype differentiate along the same directions.

As in the repro kit (scripts.kit), these are ordinary functions copied into
scripts with ``inspect.getsource``; they read the constants below, which a
script writes itself (``script.constants``), and ``leaves`` from the kit.
"""

from __future__ import annotations

import torch

from ...scripts.kit import fmt, leaves

# One-sided and central quotients at these steps (along a tangent scaled to the elements' size).
STEPS = (1e-4, 1e-6)
# The tangent grows with |x| past 1 / SCALE: even the smaller step then moves x by at least 1e-9 of itself, far above
# float64's rounding of x + t v, and by no more than 1e-7 of itself, below the spacing of most values a sample holds.
SCALE = 1e-3
# Finite differences are also taken at SHIFTS points near x, each moved along a tangent drawn from the tangent's seed plus
# a multiple of SHIFT_SEED; before a finding is reported, at CONFIRM_SHIFTS such points (the first SHIFTS the same).
SHIFTS, CONFIRM_SHIFTS, SHIFT_SEED = 3, 16, 7919
# Each other floating argument is moved along a tangent of its own, drawn from OTHER_SEED plus its position, to find the
# points where the function has a kink in that argument (a tie of clamp's input with its bound): none is judged there.
OTHER_SEED = 104729
# An element is smooth along the tangent where the one-sided quotients at the smaller step, and the central
# quotients at both steps, agree within this share of 1 + |derivative| (plus what rounding of the values explains).
SMOOTH = 1e-3
# Rounding of a value, in float64 units of roundoff, that a quotient's numerator may carry.
NOISE = 16 * 2.0 ** -53
# An autodiff derivative may differ from the central difference by this much, plus the difference's own error estimate.
FD_ATOL, FD_RTOL = 1e-6, 1e-5
# In a narrow dtype, two modes disagree only where one is this many times farther from its float64 value than the other.
LOPSIDED = 8.0
# In float64, forward mode's u . (J v) and reverse mode's (u^T J) . v may differ by this much of the sum of |terms|.
CONTRACTION_ATOL, CONTRACTION_RTOL = 1e-7, 1e-7


def inexact(t):
    """Whether ``t`` is a floating or complex tensor: one that has a derivative."""
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def like(values, x):
    """``values`` in a fresh tensor with ``x``'s strides (contiguous where ``x`` repeats elements)."""
    if any(s == 0 and n > 1 for s, n in zip(x.stride(), x.shape)):
        return values.detach().clone(memory_format=torch.contiguous_format)
    laid = torch.empty_strided(x.shape, x.stride(), dtype=values.dtype, device=x.device)
    laid.copy_(values.detach())
    return laid


def widened(T):
    """``T`` with every floating tensor in float64 and every complex one in complex128, each laid out as before."""
    found = {}
    for path, t in T.items():
        if inexact(t):
            wide = torch.complex128 if t.is_complex() else torch.float64
            found[path] = like(t.detach().to(wide), t)
        else:
            found[path] = t.detach()
    return found


def widen(t, like_this=None):
    """``t`` in float64 (complex128), laid out like ``like_this`` (default: as it is): the same direction for a float64 mode."""
    wide = t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
    return like(wide, t if like_this is None else like_this)


def upload(t, device):
    """``t`` (a CPU tensor) on ``device``: to a CUDA device through pinned memory, queued rather than waited for."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def draw(shape, dtype, seed, device="cpu"):
    """Standard normal values drawn in float64 (complex128) from ``seed``, rounded to ``dtype``."""
    generator = torch.Generator().manual_seed(seed)
    work = torch.complex128 if dtype.is_complex else torch.float64
    return upload(torch.randn(tuple(shape), generator=generator, dtype=work).to(dtype), device)


def tangent(x, seed):
    """The direction ``v``: standard normal times max(1, SCALE |x|) elementwise (1 where x is not finite), laid out like ``x``."""
    size = x.detach().abs().to(torch.float64).cpu()
    scale = torch.where(torch.isfinite(size), (SCALE * size).clamp(min=1.0), torch.ones_like(size))
    work = torch.complex128 if x.is_complex() else torch.float64
    return like(upload((draw(x.shape, work, seed) * scale).to(dtype=x.dtype), x.device), x)


def outputs(value):
    """The differentiable leaves of a call's result: its floating and complex tensors, by path."""
    return [(path, t) for path, t in leaves(value) if inexact(t)]


def cotangents(outs, seed):
    """One cotangent per differentiable output, the i-th drawn from ``seed + i``."""
    return [draw(o.shape, o.dtype, seed + i, o.device) for i, (_, o) in enumerate(outs)]


def forward_mode(call, T, path, v):
    """J v by forward mode: each differentiable output's tangent, ``T[path]`` made dual with tangent ``v``."""
    fw = torch.autograd.forward_ad
    U = {p: t.detach() for p, t in T.items()}
    found = []
    with fw.dual_level():
        U[path] = fw.make_dual(U[path], v)
        for p, o in outputs(call(U)):
            primal, t = fw.unpack_dual(o)
            found.append((p, torch.zeros_like(primal.detach()) if t is None else t.detach().clone()))
    return found


def graph(call, T, path, u, w=None):
    """The call on ``T`` with ``T[path]`` a leaf that requires grad: that leaf, and the outputs that depend on it with their cotangents."""
    U = {p: t.detach() for p, t in T.items()}
    x = U[path] = U[path].requires_grad_(True)
    outs = outputs(call(U))
    pairs = [(i, o, c) for i, ((_, o), c) in enumerate(zip(outs, u if w is None else w)) if o.requires_grad]
    return x, outs, pairs


def reverse_mode(call, T, path, u):
    """u^T J by reverse mode: the gradient of the outputs, against cotangents ``u``, with respect to ``T[path]``."""
    with torch.enable_grad():
        x, _, pairs = graph(call, T, path, u)
        if not pairs:
            return torch.zeros_like(x.detach())
        (g,) = torch.autograd.grad([o for _, o, _ in pairs], [x], [c for _, _, c in pairs], allow_unused=True)
    return torch.zeros_like(x.detach()) if g is None else g.detach()


def reverse_jvp(call, T, path, v, u):
    """J v by reverse mode twice: the gradient of <u^T J, v> with respect to ``u`` (u^T J is linear in u)."""
    with torch.enable_grad():
        w = [c.detach().clone().requires_grad_(True) for c in u]
        x, outs, pairs = graph(call, T, path, u, w)
        found = [(p, torch.zeros_like(o.detach())) for p, o in outs]
        if not pairs:
            return found
        (g,) = torch.autograd.grad([o for _, o, _ in pairs], [x], [c for _, _, c in pairs], create_graph=True, allow_unused=True)
        if g is None or not g.requires_grad:
            return found
        back = torch.autograd.grad([g], [c for _, _, c in pairs], [v], allow_unused=True)
    for (i, _, _), b in zip(pairs, back):
        if b is not None:
            found[i] = (found[i][0], b.detach())
    return found


def double_backward(call, T, path, u, v):
    """H v by reverse over reverse: the gradient of <u^T J, v> with respect to ``T[path]``."""
    with torch.enable_grad():
        x, _, pairs = graph(call, T, path, u)
        if not pairs:
            return torch.zeros_like(x.detach())
        (g,) = torch.autograd.grad([o for _, o, _ in pairs], [x], [c for _, _, c in pairs], create_graph=True, allow_unused=True)
        if g is None or not g.requires_grad:
            return torch.zeros_like(x.detach())
        (h,) = torch.autograd.grad([g], [x], [v], allow_unused=True)
    return torch.zeros_like(x.detach()) if h is None else h.detach()


def forward_over_reverse(call, T, path, u, v):
    """H v by forward over reverse: the tangent of u^T J when ``T[path]`` is made dual with tangent ``v``."""
    fw = torch.autograd.forward_ad
    with torch.enable_grad(), fw.dual_level():
        U = {p: t.detach() for p, t in T.items()}
        x = U[path].requires_grad_(True)
        U[path] = fw.make_dual(x, v)
        pairs = [(o, c) for (_, o), c in zip(outputs(call(U)), u) if o.requires_grad]
        if not pairs:
            return torch.zeros_like(x.detach())
        (g,) = torch.autograd.grad([o for o, _ in pairs], [x], [c for _, c in pairs], create_graph=True, allow_unused=True)
        t = None if g is None else fw.unpack_dual(g).tangent
        return torch.zeros_like(x.detach()) if t is None else t.detach().clone()


def finite_differences(evaluate, shifts):
    """Per leaf of ``evaluate(0.0, None)`` (float64 values at x + t v, or at x + t v + w for a shift ``w``): the central quotient
    along ``v`` at the smaller step, an estimate of its error, and where it can be trusted (``smooth``): both one-sided
    quotients agree, the central one is stable as the step shrinks, and it stays put when x moves by each of ``shifts`` (at
    a tie of sort or max the one-sided quotients can agree, on the median of the tied tangents, but the derivative jumps
    once the tie is broken; several shifts, since one may break the tie towards the same element by chance)."""
    large, small = STEPS
    points = [(0.0, None), (large, None), (-large, None), (small, None), (-small, None)]
    points += [(t, w) for w in shifts for t in (small, -small)]
    evaluated = [[y.detach().to(torch.complex128 if y.is_complex() else torch.float64) for y in evaluate(t, w)] for t, w in points]
    values = [[y.to("cpu", non_blocking=y.is_cuda) for y in ys] for ys in evaluated]  # queued, then waited for once
    for device in {y.device for ys in evaluated for y in ys if y.is_cuda}:
        torch.cuda.synchronize(device)
    found = []
    for f0, p1, m1, p2, m2, *shifted in zip(*values):
        c1, c2 = (p1 - m1) / (2 * large), (p2 - m2) / (2 * small)
        noise = NOISE * (f0.abs() + p2.abs() + m2.abs()) / small
        bend = ((p2 - f0) / small - (f0 - m2) / small).abs()
        drift = (c1 - c2).abs()
        bound = SMOOTH * (1 + c2.abs()) + noise
        finite = torch.isfinite(c1) & torch.isfinite(c2) & torch.isfinite(f0)
        smooth = finite & (bend <= bound) & (drift <= bound)
        error = drift + bend + noise
        for ps, ms in zip(shifted[::2], shifted[1::2]):
            cs = (ps - ms) / (2 * small)
            jump = (cs - c2).abs()
            smooth &= torch.isfinite(cs) & (jump <= bound + NOISE * (ps.abs() + ms.abs()) / small)
            error = torch.maximum(error, drift + bend + noise + torch.nan_to_num(jump, nan=0.0, posinf=0.0))
        found.append((c2, torch.where(finite, error, torch.zeros_like(error)), smooth))
    return found


def tainted(evaluate, W):
    """Per leaf of ``evaluate(W)``: where it depends on an element of ``W`` that is not finite (it turns NaN once every
    such element is NaN), or None when every element is finite. No derivative there is judged: it is a limit at best."""
    if all(not inexact(t) or bool(torch.isfinite(t).all()) for t in W.values()):
        return None
    poisoned = {p: torch.where(torch.isfinite(t), t, torch.full_like(t, float("nan"))) if inexact(t) else t for p, t in W.items()}
    return [torch.isnan(y.detach()).cpu() for y in evaluate(poisoned)]


def untainted(found, taint):
    """``finite_differences``'s leaves with the estimate NaN (and so not smooth) where ``taint`` holds."""
    if taint is None:
        return found
    nan = float("nan")
    return [(torch.where(t, torch.full_like(e, nan), e), error, smooth & ~t) for (e, error, smooth), t in zip(found, taint)]


def moved(T, path, v, t, w=None):
    """``T`` with ``T[path]`` moved by ``t`` along ``v`` (and by the shift ``w``)."""
    if not t and w is None:
        return T
    return {**T, path: T[path] + t * v + (0 if w is None else w)}


def shifts(x, seed, count):
    """The shifts finite differences move x by to see whether the derivative along ``v`` stays put: ``count`` tangents, a
    large step long."""
    return [STEPS[0] * tangent(x, seed + SHIFT_SEED * (k + 1)) for k in range(count)]


def output_differences(call, W, path, v, ws):
    """Central differences of the outputs along ``v`` (first order), on float64 tensors ``W``, shifted by each of ``ws``;
    none where an output depends on an element that is not finite, nor where the function has a kink in another argument."""
    found = finite_differences(lambda t, w: [o for _, o in outputs(call(moved(W, path, v, t, w)))], ws)
    found = untainted(found, tainted(lambda P: [o for _, o in outputs(call(P))], W))
    return [(e, error, smooth & elsewhere) for (e, error, smooth), elsewhere in zip(found, smooth_elsewhere(call, W, path))]


def smooth_elsewhere(call, W, path):
    """Per output: where the function is smooth along each other floating argument of ``W`` moved alone, and along every
    floating argument moved at once (each along a tangent of its own, seeded OTHER_SEED plus its position; then along
    their magnitudes, all one way). A point where it
    is not is no point of differentiability, whichever argument is differentiated: at clamp's input equal to its bound both
    one-sided derivatives are valid, and at the input equal to both bounds the function of any one argument alone is flat
    while that of all of them is not."""
    floating = [p for p in W if inexact(W[p])]
    tangents = {p: tangent(W[p], OTHER_SEED + k) for k, p in enumerate(W) if p in floating}
    moves = [{p: tangents[p]} for p in floating if p != path]
    if len(floating) > 1:  # and with every argument moved the same way by its own amount, which breaks a tie either way
        moves += [tangents, {p: w if w.is_complex() else w.abs() for p, w in tangents.items()}]
    found = [torch.ones(o.shape, dtype=torch.bool) for _, o in outputs(call(W))]
    for move in moves:
        def at(t, _, move=move):
            return [o for _, o in outputs(call({**W, **{p: W[p] + t * w for p, w in move.items()}}))]
        try:
            differences = finite_differences(at, [])
        except Exception:  # the call refuses the moved arguments (a domain, a shape): nothing said about them
            continue
        found = [s & smooth for s, (_, _, smooth) in zip(found, differences)]
    return found


def gradient_differences(call, W, path, v, ws, u):
    """Central differences of the gradient u^T J along ``v`` (second order), on float64 tensors ``W``, shifted by each of ``ws``;
    none where the gradient depends on an element that is not finite, nor at an element of x that is not finite itself
    (the gradient's derivative there is taken at no number: index_reduce's prod ignores self where include_self is
    False, so its gradient is 0 at a NaN self, and its double backward multiplies that NaN by the mask's 0),
    nor where it depends on an output that is not smooth along ``v`` (the
    function itself has a kink there: atan2 at the origin, whose gradient is 0 all along a line through it)."""
    found = finite_differences(lambda t, w: [reverse_mode(call, moved(W, path, v, t, w), path, u)], ws)
    found = untainted(found, tainted(lambda P: [reverse_mode(call, P, path, u)], W))
    if inexact(W[path]) and not bool(torch.isfinite(W[path]).all()):  # the gradient at an x that is no number: no derivative
        found = untainted(found, [~torch.isfinite(W[path]).cpu()])
    smooth = [s for _, _, s in output_differences(call, W, path, v, ws)]
    if all(bool(s.all()) for s in smooth):
        return found
    nan = float("nan")
    poisoned = [torch.where(s.to(c.device), c, torch.full_like(c, nan)) for c, s in zip(u, smooth)]  # NaN flows to what depends on it
    taint = torch.isnan(reverse_mode(call, W, path, poisoned)).cpu()
    for s in smooth:  # a backward that masks its own result (pow's where the exponent is 0) stops the NaN: by position too
        try:
            wider = torch.broadcast_shapes(s.shape, taint.shape)
        except RuntimeError:
            continue
        if wider == s.shape and s.shape != taint.shape:
            s = (~s).to(torch.float64).sum_to_size(taint.shape) == 0
        if s.shape == taint.shape:
            taint |= ~s
    return untainted(found, [taint])


def lopsided(a, b, a64, b64):
    """By leaf: where one of two modes in a narrow dtype (``a``, ``b``: dicts of leaves) is more than LOPSIDED times as far
    from its own float64 value (``a64``, ``b64``: the same mode on widened inputs, along the same directions) as the other
    is, counting at least a unit of roundoff of the values. Elsewhere both are as far off as the dtype makes them."""
    found = {}
    for p, x in a.items():
        real = x.real if x.is_complex() else x
        u = torch.finfo(real.dtype).eps / 2
        floor = u * (a64[p].detach().cpu().abs() + b64[p].detach().cpu().abs()).to(torch.float64)
        off_a = torch.nan_to_num((x.detach().cpu().to(torch.complex128) - a64[p].detach().cpu().to(torch.complex128)).abs(), nan=float("inf"))
        off_b = torch.nan_to_num((b[p].detach().cpu().to(torch.complex128) - b64[p].detach().cpu().to(torch.complex128)).abs(), nan=float("inf"))
        found[p] = (off_a > LOPSIDED * (off_b + floor)) | (off_b > LOPSIDED * (off_a + floor))
    return found


def masked(values, smooth):
    """``values`` with zeros where the function is not smooth (a kink's NaN must not reach a sum)."""
    keep = smooth.to(values.device)
    return torch.where(keep, values, torch.zeros_like(values))


def contraction(pairs):
    """Re sum(conj(a) * b) over the pairs ``(a, b)``, and the sum of |a| |b|: the size rounding is relative to."""
    value = magnitude = 0.0
    for a, b in pairs:
        a, b = a.detach().cpu().to(torch.complex128), b.detach().cpu().to(torch.complex128)
        value += float((a.conj() * b).real.sum())
        magnitude += float((a.abs() * b.abs()).sum())
    return value, magnitude


def far(a, e, atol, rtol, slack, where):
    """Elementwise, where ``where`` holds: ``a`` is not ``e`` within atol + rtol |e| + slack (a NaN or infinity against a number counts)."""
    a, e = a.detach().cpu().to(torch.complex128), e.detach().cpu().to(torch.complex128)
    slack = slack.detach().cpu() if isinstance(slack, torch.Tensor) else slack
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    close = torch.isfinite(e) & ((a - e).abs() <= atol + rtol * e.abs() + slack)
    return where.cpu() & ~(same | close)


def show(label, sides, bad):
    """Prints how many elements disagree, and each side's value at the first few."""
    flat = bad.reshape(-1).nonzero().reshape(-1).tolist()
    shape = list(bad.shape)
    print(f"  {label}: {len(flat)} of {bad.numel()} element(s) disagree")
    for i in flat[:4]:
        index = [int(j) for j in torch.unravel_index(torch.tensor(i), shape)] if shape else []
        print(f"    {index}: " + ", ".join(f"{name} {fmt(value.reshape(-1)[i])}" for name, value in sides))
