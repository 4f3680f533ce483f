"""The batch a ``vmap`` case maps over, and the calls it makes, as real code: the oracle runs it, scripts copy it.

Design note. A batch holds ``count`` samples of the call's tensors: the
call's own first, then others whose values are redrawn (``redrawn``:
floats uniformly in the range of the tensor's finite values, so a domain
such as acos's or log's is kept, and a tensor of one value between its half
and itself; every other dtype from the tensor's own values, so an index
stays a valid index), seeded, or copies of the call's own. ``stacked`` stacks each tensor's samples at its batch dim (``in_dims``;
None: the call's own tensor, not mapped over), ``vmapped`` makes the call
under ``torch.func.vmap`` and ``mapped`` is the function vmap is handed: the
call as a function of the tensors mapped over. ``gradients`` turns a call
into its vjp against fixed cotangents, so the same code judges a gradient.

The oracle calls these functions and each repro script holds a copy
(``SOURCE``, copied with ``inspect.getsource``), so the script rebuilds the
very batch the oracle made. They need only torch and the repro kit's
``leaves`` (scripts.kit), which a script's preamble copies in.
"""

from __future__ import annotations

import torch

from ...scripts.kit import leaves


def redrawn(t, generator):
    """New values for ``t``: floats uniformly in the range of its finite values, other dtypes drawn from its own values."""
    x = t.detach().cpu()
    if x.numel() == 0:
        return t.detach().clone()
    if x.is_floating_point():
        finite = x[torch.isfinite(x)].double()
        low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (-1.0, 1.0)
        if low == high:  # one value: drawn between its half and itself, keeping its sign and a bound such as [0, 1]
            low, high = min(low / 2, low), max(low / 2, low)
        values = torch.rand(x.shape, generator=generator, dtype=torch.float64) * (high - low) + low
        return values.to(x.dtype).to(t.device)
    picks = torch.randint(0, x.numel(), x.shape, generator=generator)
    return x.reshape(-1)[picks].to(t.device)


def members(T, paths, fill, seed, count):
    """``count`` samples of the call's tensors: ``T`` first; then each of ``paths`` redrawn ("random", seeded by
    ``seed``) or copied ("same"); the tensors not in ``paths`` (cotangents) are ``T``'s in every sample."""
    generator = torch.Generator().manual_seed(seed)
    found = [dict(T)]
    for _ in range(1, count):
        found.append({**T, **{p: redrawn(T[p], generator) if fill == "random" else T[p].detach().clone() for p in paths}})
    return found


def unmapped(samples, paths, in_dims):
    """The samples as a batch with these ``in_dims`` holds them: a path not mapped over (None) is the first sample's in each."""
    kept = [p for p, d in zip(paths, in_dims) if d is None]
    return [{**s, **{p: samples[0][p] for p in kept}} for s in samples]


def stacked(samples, paths, in_dims):
    """The vmapped function's arguments: each path's samples stacked at its batch dim; the first sample's where None."""
    return [samples[0][p] if d is None else torch.stack([s[p] for s in samples], dim=d) for p, d in zip(paths, in_dims)]


def mapped(function, T, paths):
    """``function`` (of the tensors by path) as a function of the tensors of ``paths``, the others ``T``'s."""
    def over(*tensors):
        return function({**T, **dict(zip(paths, tensors))})
    return over


def vmapped(function, samples, paths, in_dims):
    """``function`` under ``torch.func.vmap`` over the batch of ``samples`` (stacked at ``in_dims``): the batched result."""
    return torch.func.vmap(mapped(function, samples[0], paths), in_dims=tuple(in_dims))(*stacked(samples, paths, in_dims))


def gradients(function, differentiated, cotangents):
    """``function``'s vjp as a function of the tensors by path: the gradient of its floating outputs, against
    ``cotangents``, with respect to each of ``differentiated`` (``{"grad[input]": ...}``)."""
    def grads(T):
        def outputs(*primals):
            result = function({**T, **dict(zip(differentiated, primals))})
            return tuple(v for _, v in leaves(result) if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()))
        _, pullback = torch.func.vjp(outputs, *[T[p] for p in differentiated])
        return {f"grad[{p}]": g for p, g in zip(differentiated, pullback(tuple(cotangents)))}
    return grads


def sample_of(batched, b):
    """Sample ``b`` of a batched result, leaf by leaf (vmap puts the batch first in every output)."""
    return {path: v[b] for path, v in leaves(batched)}


# What a script copies, in this order (the kit's ``leaves`` comes with its preamble).
SOURCE = (redrawn, members, unmapped, stacked, mapped, vmapped, gradients, sample_of)
