"""What an autodiff repro script checks, as real code: ``script`` copies these functions into each script.

Design note. ``check_first`` (``autodiff:forward``) and ``check_second``
(``autodiff:second``) make the finding's comparison again, on the tensors
the script rebuilds, with the derivatives of autodiff.helpers (copied in
too): the tangent and cotangents from the same seeds, float64 finite
differences and their kinks as the oracle took them, then the one check
that failed (``CHECK``), printing both derivatives and the finite-difference
estimate at the finding's element and at every element that disagrees.
Each returns 1 while the check fails, else 0.

They read the script's own constants as globals, as the repro kit's
helpers do; the values below are only what plain use of this module sees.
"""

from __future__ import annotations

import math

import torch

from .helpers import (CONFIRM_SHIFTS, contraction, cotangents, double_backward, far, fmt, forward_mode, forward_over_reverse,
                      gradient_differences, lopsided, masked, output_differences, outputs, reverse_jvp, reverse_mode, shifts, show, tangent,
                      widen, widened)

# A script's own constants (see the design note): what plain use sees.
CHECK = MODE = ARGUMENT = PRECISION = CASE_DTYPE = ""
MODES, CONTRACTION, FINITE, SECOND_MODES = "modes", "contraction", "finite", "second-modes"
DOUBLE_BACKWARD = "double backward"
TANGENT_SEED = COTANGENT_SEED = 0
INDEX: tuple[int, ...] = ()
OUTPUT = ""
ATOL = RTOL = SLACK = 0.0
FD_ATOL = FD_RTOL = CONTRACTION_ATOL = CONTRACTION_RTOL = 0.0


def precision(call, call_wide, T, W):
    """The call and tensors the derivatives are taken in: float64 (complex128) copies, or the case's own."""
    if PRECISION != CASE_DTYPE:
        return call_wide, W
    return call, {p: t.detach() for p, t in T.items()}


def kinks(smooth):
    """Says how many elements float64 finite differences leave out (not differentiable along the tangent)."""
    left = sum(int((~s).sum()) for s in smooth)
    if left:
        print(f"  at a kink: {left} of {sum(s.numel() for s in smooth)} element(s) not differentiable along the tangent, not judged")


def at_index(label, value):
    """One derivative at the finding's element."""
    where = value[INDEX] if INDEX else value.reshape(-1)[0]
    print(f"  {label:<28} {fmt(where)}")


def check_first(call, call_wide, T):
    """autodiff:forward: forward mode's J v against reverse mode's (or their contraction), or against finite differences."""
    W = widened(T)
    v64 = tangent(W[ARGUMENT], TANGENT_SEED)
    fd = output_differences(call_wide, W, ARGUMENT, v64, shifts(W[ARGUMENT], TANGENT_SEED, CONFIRM_SHIFTS))
    f, S = precision(call, call_wide, T, W)
    v = v64 if f is call_wide else tangent(S[ARGUMENT], TANGENT_SEED)
    outs = outputs(f(S))
    if f is call:  # in the case's dtype: a value that overflowed has no derivative to judge
        fd = [(e, error, s & torch.isfinite(o.detach()).cpu()) for (e, error, s), (_, o) in zip(fd, outs)]
    u = [masked(c, s) for c, (_, _, s) in zip(cotangents(outs, COTANGENT_SEED), fd)]
    forward = forward_mode(f, S, ARGUMENT, v)
    print(f"derivatives with respect to {ARGUMENT} in {PRECISION}, tangent seeded {TANGENT_SEED}, cotangents seeded {COTANGENT_SEED}")
    kinks([s for _, _, s in fd])
    if CHECK == CONTRACTION:
        gradient = reverse_mode(f, S, ARGUMENT, u)
        s_forward, size_forward = contraction([(c, masked(a, s)) for c, (_, a), (_, _, s) in zip(u, forward, fd)])
        s_reverse, size_reverse = contraction([(gradient, v)])
        s_fd, _ = contraction([(c, masked(e, s)) for c, (e, _, s) in zip(u, fd)])
        allowed = CONTRACTION_ATOL + CONTRACTION_RTOL * (size_forward + size_reverse)
        print(f"  u.(Jv) by forward mode       {s_forward:.9g}")
        print(f"  (u^T J).v by reverse mode    {s_reverse:.9g}")
        print(f"  u.(Jv) by finite differences {s_fd:.9g}")
        print(f"  difference {abs(s_forward - s_reverse):.3g}, allowed {allowed:.3g}")
        return 1 if math.isfinite(s_forward - s_reverse) and abs(s_forward - s_reverse) > allowed else 0
    reverse = reverse_jvp(f, S, ARGUMENT, v, u) if CHECK == MODES else [(p, e) for (p, _), (e, _, _) in zip(forward, fd)]
    if CHECK == MODES and f is call and widen(v).dtype != v.dtype:  # in a narrow dtype: one mode off its float64 value
        v64, u64 = widen(v, W[ARGUMENT]), [widen(c) for c in u]
        lop = lopsided(dict(forward), dict(reverse), dict(forward_mode(call_wide, W, ARGUMENT, v64)),
                       dict(reverse_jvp(call_wide, W, ARGUMENT, v64, u64)))
        fd = [(e, error, s & lop[p]) for (e, error, s), (p, _) in zip(fd, forward)]
    wrong = False
    for (path, a), (_, r), (e, error, smooth) in zip(forward, reverse, fd):
        if path == OUTPUT:
            print(f"{path}{list(INDEX)}:")
            at_index("forward mode (J v)", a)
            if CHECK == MODES:
                at_index("reverse mode (J v)", r)
            at_index("float64 finite differences", e)
        if CHECK == MODES:
            bad = far(a, r, ATOL, RTOL, SLACK + error, smooth)
            sides = [("forward mode", a), ("reverse mode", r), ("finite differences", e)]
        else:
            bad = far(a, e, FD_ATOL, FD_RTOL, error, smooth)
            sides = [("forward mode", a), ("finite differences", e)]
        show(path, sides, bad)
        wrong = wrong or bool(bad.any())
    return 1 if wrong else 0


def check_second(call, call_wide, T):
    """autodiff:second: double backward's H v against forward over reverse's, or one of them against finite differences."""
    W = widened(T)
    v64 = tangent(W[ARGUMENT], TANGENT_SEED)
    u64 = cotangents(outputs(call_wide(W)), COTANGENT_SEED)
    ((estimate, error, smooth),) = gradient_differences(call_wide, W, ARGUMENT, v64, shifts(W[ARGUMENT], TANGENT_SEED, CONFIRM_SHIFTS), u64)
    f, S = precision(call, call_wide, T, W)
    v, u = (v64, u64) if f is call_wide else (tangent(S[ARGUMENT], TANGENT_SEED), cotangents(outputs(f(S)), COTANGENT_SEED))
    if f is call and CHECK == SECOND_MODES:  # in the case's dtype: a gradient that overflowed has no derivative to judge
        smooth = smooth & torch.isfinite(reverse_mode(f, S, ARGUMENT, u)).cpu()
    print(f"H v with respect to {ARGUMENT} in {PRECISION}, tangent seeded {TANGENT_SEED}, cotangents seeded {COTANGENT_SEED}")
    kinks([smooth])
    path = f"grad[{ARGUMENT}]"
    if CHECK == SECOND_MODES:
        double, over = double_backward(f, S, ARGUMENT, u, v), forward_over_reverse(f, S, ARGUMENT, u, v)
        if f is call and widen(v).dtype != v.dtype:  # in a narrow dtype: one mode off its float64 value
            v64, u64 = widen(v, W[ARGUMENT]), [widen(c) for c in u]
            lop = lopsided({path: double}, {path: over}, {path: double_backward(call_wide, W, ARGUMENT, u64, v64)},
                           {path: forward_over_reverse(call_wide, W, ARGUMENT, u64, v64)})
            smooth = smooth & lop[path]
        print(f"{path}{list(INDEX)}:")
        at_index("double backward", double)
        at_index("forward over reverse", over)
        at_index("float64 finite differences", estimate)
        bad = far(double, over, ATOL, RTOL, SLACK + error, smooth)
        show(path, [("double backward", double), ("forward over reverse", over), ("finite differences", estimate)], bad)
    else:
        value = (double_backward if MODE == DOUBLE_BACKWARD else forward_over_reverse)(f, S, ARGUMENT, u, v)
        print(f"{path}{list(INDEX)}:")
        at_index(MODE, value)
        at_index("float64 finite differences", estimate)
        bad = far(value, estimate, FD_ATOL, FD_RTOL, error, smooth)
        show(path, [(MODE, value), ("finite differences", estimate)], bad)
    return 1 if bool(bad.any()) else 0
