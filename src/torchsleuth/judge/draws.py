"""Draws judged against their parameters: values a random op's own arguments rule out.

Design note. A random op's values cannot be compared with another layout's or
device's (PyTorch draws differently for each), so a kernel that reads its
parameter tensors wrongly (a strided ``mean`` read as if contiguous, a
probability taken from the wrong row) passes every reference. But a draw
must be one its parameters allow, element by element, and at degenerate
parameters the draw is not random at all:

* ``normal``: where ``std`` is 0 the draw is ``mean`` exactly; elsewhere it
  lies within ``SIGMAS`` standard deviations of ``mean`` (PyTorch's
  Box-Muller cannot draw past 9 for float64 uniforms);
* ``bernoulli``: 0 or 1; 0 where ``p`` is 0, 1 where ``p`` is 1;
* ``multinomial``: an index of a category, never one of probability 0, and
  without replacement never twice in a row;
* ``poisson``: a whole number >= 0, 0 where the rate is 0; ``binomial``:
  a whole number in ``[0, count]``, 0 where ``prob`` is 0, ``count`` where 1;
* ``randint``, ``randint_like``: whole numbers in ``[low, high)``;
  ``rand``, ``rand_like``: in ``[0, 1]``; ``randn``, ``randn_like``: finite;
  ``randperm``: a permutation of ``0 .. n - 1``.

The parameters are the arguments the op's kernel was called with, by schema
name, as the trace recorded them (``run.trace``): whatever Python wrapper
made the call. The ``draws`` search (``search.draws``) gives these
parameters the degenerate values, under every layout. ``ruled_out`` and the
functions it calls use only torch, so a repro script carries their source
(``scripts.draws``).
"""

from __future__ import annotations

import json
import math

import torch

SIGMAS = 12.0


def ruled_out(op: str, params: dict, result: torch.Tensor):
    """(what is wrong, elements wrong, elements) of ``result``, the draw of aten overload ``op`` called with
    ``params`` (schema name -> value); None when every element is one the parameters allow or ``op`` has no rule."""
    parts = op.split(".")
    if len(parts) < 3 or not isinstance(result, torch.Tensor) or result.numel() == 0:
        return None
    packet, overload = parts[1].rstrip("_"), parts[2]
    v = result.detach().cpu()
    v = v.double() if not v.is_complex() else v
    if v.is_complex():
        return None
    if packet == "normal":
        return _normal(params, v, result.dtype)
    if packet == "bernoulli":
        p = params.get("self") if overload == "default" else params.get("p", 0.5)
        return _bernoulli(p, v)
    if packet == "multinomial":
        return _multinomial(params, v)
    if packet in ("poisson", "binomial"):
        return _counts(packet, params, v)
    if packet in ("randint", "randint_like", "random"):
        low = params.get("low", params.get("from", 0))
        high = params.get("high", params.get("to"))
        return _whole(v, low, high)
    if packet in ("rand", "rand_like"):
        return _found("values outside [0, 1]", (v < 0) | (v > 1) | torch.isnan(v))
    if packet in ("randn", "randn_like"):
        return _found("values that are not finite", ~torch.isfinite(v))
    if packet == "randperm":
        ordered = v.flatten().sort().values
        return _found(f"values that make no permutation of 0 .. {v.numel() - 1}", ordered != torch.arange(v.numel(), dtype=torch.double))
    return None


def _as(value, like: torch.Tensor) -> torch.Tensor:
    """``value`` (a number or a tensor) as float64 on the CPU, broadcast to ``like``'s shape."""
    t = value.detach().cpu().double() if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.double)
    return t.expand(like.shape)


def _found(what: str, bad: torch.Tensor):
    count = int(bad.sum())
    return (what, count, bad.numel()) if count else None


def _normal(params: dict, v: torch.Tensor, dtype: torch.dtype):
    mean, std = _as(params.get("mean", 0.0), v), _as(params.get("std", 1.0), v)
    known = torch.isfinite(mean) & torch.isfinite(std) & (std >= 0)
    exact = known & (std == 0) & (v != mean)
    if bool(exact.any()):
        return _found("values other than mean where std is 0", exact)
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    bound = SIGMAS * std
    slack = 4 * eps * (mean.abs() + bound) + (torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0)
    far = known & (std > 0) & ~((v - mean).abs() <= bound + slack)
    return _found(f"values more than {SIGMAS:g} standard deviations from mean", far)


def _bernoulli(p, v: torch.Tensor):
    if p is None:
        return None
    p = _as(p, v)
    bad = ((v != 0) & (v != 1)) | ((p == 0) & (v != 0)) | ((p == 1) & (v != 1))
    return _found("values other than p where p is 0 or 1, or other than 0 and 1", bad)


def _multinomial(params: dict, v: torch.Tensor):
    probs = params.get("self")
    if not isinstance(probs, torch.Tensor) or probs.dim() not in (1, 2):
        return None
    probs = probs.detach().cpu().double()
    rows, drawn = probs.reshape(-1, probs.shape[-1]), v.reshape(-1, v.shape[-1]) if v.dim() else v.reshape(1, 1)
    if drawn.shape[0] != rows.shape[0]:
        return None
    outside = (drawn < 0) | (drawn >= rows.shape[1]) | (drawn != drawn.floor())
    if bool(outside.any()):
        return _found(f"indices outside 0 .. {rows.shape[1] - 1}", outside)
    # a row of no weight, or a negative or non-finite one, torch refuses; without replacement, more draws than
    # categories of weight > 0 it documents no result for: neither is judged
    valid = (rows.sum(dim=1, keepdim=True) > 0) & ((rows >= 0) & torch.isfinite(rows)).all(dim=1, keepdim=True)
    replacement = params.get("replacement", False)
    if not replacement:
        valid &= (rows > 0).sum(dim=1, keepdim=True) >= drawn.shape[1]
    zero = (rows.gather(1, drawn.long()) == 0) & valid
    if bool(zero.any()):
        return _found("categories of probability 0", zero)
    if not replacement:
        ordered = drawn.sort(dim=1).values
        again = torch.zeros_like(drawn, dtype=torch.bool)
        again[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        return _found("a category drawn twice in one row without replacement", again)
    return None


def _counts(packet: str, params: dict, v: torch.Tensor):
    bad = (v < 0) | (v != v.floor())
    if packet == "poisson":
        rate = _as(params.get("self"), v)
        return _found("values that are not whole numbers >= 0, or not 0 where the rate is 0", bad | ((rate == 0) & (v != 0)))
    count, prob = _as(params.get("count"), v), _as(params.get("prob"), v)
    bad |= (v > count) | ((prob == 0) & (v != 0)) | ((prob == 1) & (v != count))
    return _found("values outside [0, count], or other than count * prob where prob is 0 or 1", bad)


def _whole(v: torch.Tensor, low, high):
    if high is None or isinstance(low, torch.Tensor) or isinstance(high, torch.Tensor):
        return _found("values that are not whole numbers", v != v.floor())
    bad = (v != v.floor()) | (v < float(low)) | (v >= float(high))
    return _found(f"values outside [{low}, {high})", bad)


def encode(op: str, params: dict, sources: dict, rule: str = "") -> str:
    """What a draws finding's repro script reads back (``Finding.data``): the overload to call, which of its tensor
    arguments is which tensor of the call (by sample path), its other arguments that are plain numbers, and the
    overload whose rule judges the draw (``rule``: the functional one an in-place or out= overload is a sibling of)."""
    numbers = {name: value for name, value in params.items() if name not in sources and _plain(value)}
    unknown = sorted(name for name, value in params.items() if name not in sources and name not in numbers and value is not None)
    return json.dumps({"op": op, "rule": rule or op, "tensors": sources, "numbers": numbers, "unknown": unknown})


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value))


# What a repro script carries, in order (scripts.draws): everything above but the module's imports.
SOURCES = (ruled_out, _as, _found, _normal, _bernoulli, _multinomial, _counts, _whole)
