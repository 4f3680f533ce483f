"""Declared canonicalisers: where two different answers are both right.

One entry per reason, each naming the ops it covers:

* index ties: ops that return indices into their input (sort, argsort, topk,
  max/min with a dim, ...) may pick any of several equal elements unless asked
  to be stable. Two index results agree when the input values they point at
  agree.
"""

from __future__ import annotations

import torch

TIE_INDEX_OPS = frozenset({
    "sort", "argsort", "topk", "kthvalue", "mode", "median", "nanmedian", "max", "min",
    "argmax", "argmin", "cummax", "cummin", "msort", "aminmax",
})


def _values_at(x: torch.Tensor, index: torch.Tensor, dim: int | None) -> torch.Tensor | None:
    try:
        if dim is None:
            return x.reshape(-1)[index]
        if index.dim() == x.dim() - 1:
            index = index.unsqueeze(dim)
        if index.dim() != x.dim():
            return None
        return torch.take_along_dim(x, index, dim)
    except (RuntimeError, IndexError):
        return None


def same_up_to_ties(x: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two index tensors point at equal values of ``x`` along some dim (or flattened)."""
    if actual.shape != expected.shape or actual.dtype != torch.int64 or expected.dtype != torch.int64:
        return False
    x, actual, expected = x.detach().cpu(), actual.detach().cpu(), expected.detach().cpu()
    for dim in [None, *range(x.dim())]:
        a, e = _values_at(x, actual, dim), _values_at(x, expected, dim)
        if a is None or e is None or a.shape != e.shape:
            continue
        if torch.equal(a, e) or bool(((a == e) | (torch.isnan(a) & torch.isnan(e)) if a.is_floating_point() else (a == e)).all()):
            return True
    return False
