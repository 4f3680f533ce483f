"""Partial inputs: each rank's share of a value, such that the reduction gives the value back.

Design note. ``distribute_tensor`` cannot make a Partial input worth
testing (it puts the whole value on one rank and zeros on the others, which
a wrong rule can get right by luck). So a Partial argument is distributed
with Replicate in place of each Partial, and every rank's local value is
then split along each Partial mesh dim, by a pure function of the rank's
coordinate, as PyTorch's own strategy validator does:

* ``sum``: rank 0 of the dim holds ``0.6 v + o``, each other rank
  ``0.4 v / (n-1) - o / (n-1)``, where ``o = ±(|v| + 1)`` alternates sign
  over the elements (a checkerboard): shares of mixed sign, so a non-linear
  op that wrongly accepts Partial(sum) cannot agree by accident. Integers:
  rank 0 holds ``v - (n-1) k``, the others ``k``, with ``k`` in -2..2.
* ``avg``: ``n`` times the sum's shares.
* ``max`` / ``min``: one rank of the dim holds ``v`` at each element (which
  one alternates over the elements), the others ``v`` moved by more than the
  value range the wrong way.
* an infinite or NaN element is not split (``inf - inf`` is NaN): under
  sum and avg rank 0 holds it and the others 0; under max and min every
  rank holds it, and the value range is that of the finite elements.

With Partial on both dims of a 2-D mesh the shares compose (placements.py
only pairs one reduction with itself). How far the shares' rounding may move
a sum back is bounded by ``share_error``, which the round-trip check allows.
"""

from __future__ import annotations

import torch

from ..dtypes import unit_roundoff


def _pattern(shape, device) -> torch.Tensor:
    """The sum of each element's coordinates: it alternates in parity along every dim."""
    if len(shape) == 0:
        return torch.zeros((), dtype=torch.int64, device=device)
    grids = torch.meshgrid(*[torch.arange(s, device=device) for s in shape], indexing="ij")
    return sum(grids[1:], grids[0].clone())


def share(value: torch.Tensor, reduce: str, position: int, size: int) -> torch.Tensor:
    """Rank ``position``'s share (of ``size`` along one mesh dim) of ``value`` under Partial(``reduce``)."""
    v = value.detach()
    index = _pattern(v.shape, v.device)
    floating = v.is_floating_point() or v.is_complex()
    if reduce in ("sum", "avg"):
        if floating:
            sign = 1 - 2 * (index % 2).to(v.dtype)
            offset = sign * (v.abs() + 1)
            if position == 0:
                part = 0.6 * v + offset
            else:
                part = (0.4 / (size - 1)) * v - offset / (size - 1)
            # an infinity or NaN cannot be split into finite shares (inf - inf is NaN): rank 0 holds it, the others 0
            part = torch.where(v.isfinite(), part, v if position == 0 else torch.zeros_like(v))
            return (part * size if reduce == "avg" else part).to(v.dtype)
        k = (index % 5 - 2).to(v.dtype)
        return v - (size - 1) * k if position == 0 else k
    if reduce in ("max", "min"):
        if v.numel() == 0:
            return v.clone()
        wide = v.to(torch.float64) if floating else v.to(torch.int64)
        finite = wide[wide.isfinite()] if floating else wide  # infinities and NaNs stay as they are on every rank
        spread = float(finite.max() - finite.min()) if finite.numel() else 0.0
        far = 2 * spread + 1
        away = v - far if reduce == "max" else v + far
        mine = (index % size) == position
        return torch.where(mine, v, away.to(v.dtype))
    raise ValueError(f"unknown Partial reduction {reduce!r}")


def share_error(value: torch.Tensor, size: int) -> torch.Tensor:
    """How far the sum of Partial(sum) shares of ``value`` may be from it by rounding, per element (float64)."""
    if not (value.is_floating_point() or value.is_complex()):
        return torch.zeros(value.shape, dtype=torch.float64)
    u = unit_roundoff(value.dtype)
    return 4.0 * size * u * (2 * value.detach().abs().to(torch.float64).cpu() + 2)
