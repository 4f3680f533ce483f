"""How far a sharded result may stray from the plain one: the allowance of judge.py's design note, for any call.

Design note. A sharded op reduces in another order than the plain one, and
Partial inputs carry their shares' rounding. Element ``i`` of a result in
dtype ``d`` may differ by

    allowed_i = atol + rtol*|e_i| + F(d, n) * k_i + SCALE_ULPS * u_d * max|e|

(judge.tolerance's table gives atol and rtol; ``k_i`` is how far the
float64 result moves when every floating input is nudged by up to a unit of
roundoff, and by a share's rounding where an input is Partial; ``F`` is the
slack factor for reduction length ``n``). ``allowance`` computes the terms
past the table for a call handed in as a function of its tensors, so the
shard sweep (a case of the catalog) and ``watch`` on a sharded program (an
op call the program made, judged on its gathered tensors) allow the same.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..dtypes import unit_roundoff
from ..judge.tolerance import SCALE_ULPS, slack_factor
from . import split

NUDGES = 2


def allowance(compute: Callable[[dict], dict], tensors: dict, expected: dict, dtype: torch.dtype, *, reduction: int = 1,
              partial: bool = False, partial_ranks: int = 1) -> dict[str, torch.Tensor]:
    """Per result path of ``expected``, the slack beyond the table, as float64 tensors.

    ``compute(tensors) -> {path: value}`` makes the plain call on the given
    tensors (by path); ``tensors`` are the call's own. ``partial``: an input
    was Partial, split over ``partial_ranks`` ranks.
    """
    u = unit_roundoff(dtype) if dtype.is_floating_point or dtype.is_complex else 0.0
    wide = {p: _wide(t) for p, t in tensors.items()}
    moved: dict[str, torch.Tensor] = {}
    try:
        exact = compute(wide)
        generator = torch.Generator().manual_seed(7)
        for _ in range(NUDGES):
            other = compute({p: _nudge(t, u, partial, generator) for p, t in wide.items()})
            for path, e in exact.items():
                o = other.get(path)
                if isinstance(e, torch.Tensor) and isinstance(o, torch.Tensor) and o.shape == e.shape:
                    diff = torch.nan_to_num((o.to(torch.float64) - e.to(torch.float64)).abs(), nan=0.0, posinf=0.0)
                    moved[path] = torch.maximum(moved[path], diff) if path in moved else diff
    except Exception:  # no float64 run: the table alone, plus the scale term
        moved = {}
    factor = slack_factor(dtype, reduction) if u else 0.0
    found = {}
    for path, e in expected.items():
        if not isinstance(e, torch.Tensor):
            continue
        k = moved.get(path)
        slack = torch.zeros(e.shape, dtype=torch.float64) if k is None or k.shape != e.shape else factor * k if u else k
        if u and e.numel() and (e.is_floating_point() or e.is_complex()):
            scale = float(torch.nan_to_num(e.detach().abs().to(torch.float64), nan=0.0, posinf=0.0).max())
            slack = slack + SCALE_ULPS * u * scale
            if partial and unit_roundoff(e.dtype) > u:
                # a Partial input cast down: each rank's share is rounded in the result's dtype, not the input's
                slack = slack + torch.nan_to_num(split.share_error(e.detach(), partial_ranks), nan=0.0, posinf=0.0)
        found[path] = slack
    return found


def _wide(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.detach().to(torch.complex128)
    if t.is_floating_point():
        return t.detach().to(torch.float64)
    return t.detach()


def _nudge(t: torch.Tensor, u: float, partial: bool, generator) -> torch.Tensor:
    if not t.is_floating_point() or not u:
        return t
    noise = torch.rand(t.shape, generator=generator, dtype=torch.float64) * 2 - 1
    amount = u * t.abs() + (u * (t.abs() + 1) if partial else 0)
    return t + noise * amount
