"""The functions the arbitrary-precision reference knows (run.exact evaluates them): an OpInfo op's float result, by mpmath.

Design note. Each entry maps an OpInfo op to its mathematical function over
the reals, as mpmath evaluates it at any precision: the elementwise special
functions whose float64 kernels have no reference above them in a sweep
(exponentials and logarithms, trigonometric and hyperbolic functions and
their inverses, the error, gamma and Bessel families, the zeta and
incomplete gamma functions, two-argument ``atan2``, ``hypot``, ``xlogy``).
An entry names its arity (the tensors of the call it takes, in the sample's
path order) and evaluates ``fn(*values, *numbers)``, ``numbers`` being the
sample's non-tensor positional arguments (``polygamma``'s order).

Only ops with a kernel of their own are here. A composite whose
documentation spells its evaluation (``tanhshrink``: ``x - tanh(x)``) rounds
its intermediates, and judging it against the exact function would report
the cancellation the formula allows; and functions whose conventions at
special points differ from the mathematical one (``softplus``'s threshold)
are left out for the same reason.

Each formula is one that mpmath evaluates without cancellation at its working
precision (``log_ndtr`` through ``log1p`` for positive x, ``logaddexp``
through its larger argument); the judge also evaluates it at twice the
precision and leaves a point unjudged where the two disagree.

An element is judged only where its inputs are finite, inside the entry's
``domain``, and the function has a finite real value there: where mpmath raises, returns a complex number or
an infinity (a pole, a point outside the domain), PyTorch's convention
(NaN, an infinity of either sign) is not the exact function's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mpmath as mp


def _anywhere(*values) -> bool:
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class Exact:
    arity: int  # the tensors of the call the function takes, in path order
    fn: Callable[..., object]  # fn(*values, *numbers) -> mpf
    source: str  # the same, as mpmath source for a reader ("mp.erfc(x)")
    # where the function PyTorch documents is the mathematical one (zeta's analytic continuation, an incomplete gamma
    # function of a non-positive order, are not what the kernels compute): floats in, True to judge
    domain: Callable[..., bool] = _anywhere


def _unary(fn, source, domain=_anywhere) -> Exact:
    return Exact(arity=1, fn=fn, source=source, domain=domain)


def _binary(fn, source, domain=_anywhere) -> Exact:
    return Exact(arity=2, fn=fn, source=source, domain=domain)


def _log_ndtr(x):
    """log(ncdf(x)), without the cancellation of 1 - ncdf(-x) for large x."""
    return mp.log(mp.ncdf(x)) if x < 0 else mp.log1p(-mp.ncdf(-x))


def _logaddexp(a, b):
    return max(a, b) + mp.log1p(mp.exp(-abs(a - b)))


def _sinc(x):
    return mp.mpf(1) if x == 0 else mp.sin(mp.pi * x) / (mp.pi * x)


def _entr(x):
    return mp.mpf(0) if x == 0 else -x * mp.log(x)


def _xlogy(x, y):
    return mp.mpf(0) if x == 0 else x * mp.log(y)


def _xlog1py(x, y):
    return mp.mpf(0) if x == 0 else x * mp.log1p(y)


FUNCTIONS: dict[str, Exact] = {
    "exp": _unary(mp.exp, "mp.exp(x)"),
    "exp2": _unary(lambda x: mp.power(2, x), "mp.power(2, x)"),
    "expm1": _unary(mp.expm1, "mp.expm1(x)"),
    "log": _unary(mp.log, "mp.log(x)"),
    "log2": _unary(lambda x: mp.log(x, 2), "mp.log(x, 2)"),
    "log10": _unary(mp.log10, "mp.log10(x)"),
    "log1p": _unary(mp.log1p, "mp.log1p(x)"),
    "sin": _unary(mp.sin, "mp.sin(x)"),
    "cos": _unary(mp.cos, "mp.cos(x)"),
    "tan": _unary(mp.tan, "mp.tan(x)"),
    "asin": _unary(mp.asin, "mp.asin(x)"),
    "acos": _unary(mp.acos, "mp.acos(x)"),
    "atan": _unary(mp.atan, "mp.atan(x)"),
    "sinh": _unary(mp.sinh, "mp.sinh(x)"),
    "cosh": _unary(mp.cosh, "mp.cosh(x)"),
    "tanh": _unary(mp.tanh, "mp.tanh(x)"),
    "asinh": _unary(mp.asinh, "mp.asinh(x)"),
    "acosh": _unary(mp.acosh, "mp.acosh(x)"),
    "atanh": _unary(mp.atanh, "mp.atanh(x)"),
    "sqrt": _unary(mp.sqrt, "mp.sqrt(x)"),
    "rsqrt": _unary(lambda x: 1 / mp.sqrt(x), "1 / mp.sqrt(x)"),
    "sigmoid": _unary(lambda x: 1 / (1 + mp.exp(-x)), "1 / (1 + mp.exp(-x))"),
    "erf": _unary(mp.erf, "mp.erf(x)"),
    "erfc": _unary(mp.erfc, "mp.erfc(x)"),
    "erfinv": _unary(mp.erfinv, "mp.erfinv(x)"),
    "special.erfcx": _unary(lambda x: mp.exp(x * x) * mp.erfc(x), "mp.exp(x * x) * mp.erfc(x)"),
    "special.ndtr": _unary(lambda x: mp.ncdf(x), "mp.ncdf(x)"),
    "special.ndtri": _unary(lambda p: mp.sqrt(2) * mp.erfinv(2 * p - 1), "mp.sqrt(2) * mp.erfinv(2 * p - 1)"),
    "special.log_ndtr": _unary(_log_ndtr, "mp.log(mp.ncdf(x))"),
    "lgamma": _unary(lambda x: mp.log(abs(mp.gamma(x))), "mp.log(abs(mp.gamma(x)))"),
    "digamma": _unary(mp.digamma, "mp.digamma(x)"),
    **{f"polygamma.polygamma_n_{k}": _unary(lambda x, n: mp.polygamma(n, x), "mp.polygamma(n, x)") for k in range(5)},
    "special.polygamma.special_polygamma_n_0": _unary(lambda x, n: mp.polygamma(n, x), "mp.polygamma(n, x)"),
    "i0": _unary(lambda x: mp.besseli(0, x), "mp.besseli(0, x)"),
    "special.i0e": _unary(lambda x: mp.exp(-abs(x)) * mp.besseli(0, x), "mp.exp(-abs(x)) * mp.besseli(0, x)"),
    "special.i1": _unary(lambda x: mp.besseli(1, x), "mp.besseli(1, x)"),
    "special.i1e": _unary(lambda x: mp.exp(-abs(x)) * mp.besseli(1, x), "mp.exp(-abs(x)) * mp.besseli(1, x)"),
    "special.bessel_j0": _unary(lambda x: mp.besselj(0, x), "mp.besselj(0, x)"),
    "special.bessel_j1": _unary(lambda x: mp.besselj(1, x), "mp.besselj(1, x)"),
    "special.bessel_y0": _unary(lambda x: mp.bessely(0, x), "mp.bessely(0, x)"),
    "special.bessel_y1": _unary(lambda x: mp.bessely(1, x), "mp.bessely(1, x)"),
    "special.modified_bessel_i0": _unary(lambda x: mp.besseli(0, x), "mp.besseli(0, x)"),
    "special.modified_bessel_i1": _unary(lambda x: mp.besseli(1, x), "mp.besseli(1, x)"),
    "special.modified_bessel_k0": _unary(lambda x: mp.besselk(0, x), "mp.besselk(0, x)"),
    "special.modified_bessel_k1": _unary(lambda x: mp.besselk(1, x), "mp.besselk(1, x)"),
    "special.scaled_modified_bessel_k0": _unary(lambda x: mp.exp(x) * mp.besselk(0, x), "mp.exp(x) * mp.besselk(0, x)"),
    "special.scaled_modified_bessel_k1": _unary(lambda x: mp.exp(x) * mp.besselk(1, x), "mp.exp(x) * mp.besselk(1, x)"),
    "special.spherical_bessel_j0": _unary(lambda x: mp.mpf(1) if x == 0 else mp.sin(x) / x, "mp.sin(x) / x"),
    "special.airy_ai": _unary(mp.airyai, "mp.airyai(x)"),
    "special.entr": _unary(_entr, "-x * mp.log(x)"),
    "sinc": _unary(_sinc, "mp.sin(mp.pi * x) / (mp.pi * x)"),
    "atan2": _binary(mp.atan2, "mp.atan2(y, x)"),
    "hypot": _binary(mp.hypot, "mp.hypot(x, y)"),
    "xlogy": _binary(_xlogy, "x * mp.log(y)"),
    "special.xlog1py": _binary(_xlog1py, "x * mp.log1p(y)"),
    "logaddexp": _binary(_logaddexp, "mp.log(mp.exp(a) + mp.exp(b))"),
    # Hurwitz zeta for s > 1 and q > 0, where the series converges (the kernel's domain; elsewhere it returns NaN)
    "special.zeta": _binary(mp.zeta, "mp.zeta(x, q)", domain=lambda s, q: s > 1 and q > 0),
    # the regularized incomplete gamma functions of a positive order, at x >= 0
    "igamma": _binary(lambda a, x: mp.gammainc(a, 0, x, regularized=True), "mp.gammainc(a, 0, x, regularized=True)",
                      domain=lambda a, x: a > 0 and x >= 0),
    "igammac": _binary(lambda a, x: mp.gammainc(a, x, mp.inf, regularized=True), "mp.gammainc(a, x, mp.inf, regularized=True)",
                       domain=lambda a, x: a > 0 and x >= 0),
}
