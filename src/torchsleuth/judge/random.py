"""Plausibility of random draws: values the distribution cannot produce.

Declared per distribution, from its documented support; the parameters are
read from the call as ``torch.Tensor``'s methods take them. A check that
cannot read its parameters does not judge.
"""

from __future__ import annotations

import torch

# method -> (parameter names in order, defaults)
_PARAMETERS = {
    "uniform_": (("from", "to"), (0.0, 1.0)),
    "normal_": (("mean", "std"), (0.0, 1.0)),
    "exponential_": (("lambd",), (1.0,)),
    "geometric_": (("p",), (None,)),
    "log_normal_": (("mean", "std"), (1.0, 2.0)),
    "cauchy_": (("median", "sigma"), (0.0, 1.0)),
    "bernoulli_": (("p",), (0.5,)),
    "random_": (("from", "to"), (None, None)),
}


def _parameters(method: str, args: tuple, kwargs: dict) -> dict:
    names, defaults = _PARAMETERS[method]
    values = dict(zip(names, defaults))
    positional = list(args[1:])  # args[0] is self
    if method == "random_" and len(positional) == 1:
        positional = [0, positional[0]]  # random_(to)
    for name, value in zip(names, positional):
        values[name] = value
    for name in names:
        if name in kwargs:
            values[name] = kwargs[name]
    return values


def implausible(op: str, values: torch.Tensor, args: tuple, kwargs: dict) -> str | None:
    """A phrase naming what is impossible about ``values``, or None when they are plausible."""
    method = op.split(".")[1] if op.startswith("aten.") and op.count(".") >= 2 else op
    if method not in _PARAMETERS or values.numel() == 0:
        return None
    p = _parameters(method, args, kwargs)
    if values.is_floating_point():
        if bool(torch.isnan(values).any()):
            return f"NaN in {int(torch.isnan(values).sum())} element(s)"
        v = values.double()
    elif values.dtype == torch.bool:
        v = values.double()
    else:
        v = values.double()
    bad = None
    if method == "uniform_":
        low, high = float(p["from"]), float(p["to"])
        bad = (v < low) | (v > high)
        what = f"values outside [{low}, {high}]"
    elif method in ("normal_", "cauchy_"):
        bad = torch.isinf(v) if method == "normal_" else torch.zeros_like(v, dtype=torch.bool)
        what = "infinite values"
    elif method in ("exponential_", "log_normal_"):
        bad = v < 0
        what = "negative values"
    elif method == "geometric_":
        bad = (v < 1) | (v != torch.floor(v))
        what = "values that are not whole numbers >= 1"
    elif method == "bernoulli_":
        bad = (v != 0) & (v != 1)
        what = "values other than 0 and 1"
    elif method == "random_":
        low, high = p["from"], p["to"]
        bad = v != torch.floor(v)
        if low is not None:
            bad |= v < float(low)
        if high is not None:
            bad |= v >= float(high)
        what = "values outside the requested range" if low is not None else "non-integral values"
    if bad is not None and bool(bad.any()):
        return f"{what} in {int(bad.sum())} of {values.numel()} element(s)"
    return None
