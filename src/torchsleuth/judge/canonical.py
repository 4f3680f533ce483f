"""Declared canonicalisers: where two different answers are both right.

One entry per reason, each naming the ops it covers (short aten names):

* index ties: ops that return indices into their input may pick any of
  several equal elements unless asked to be stable. Two index results agree
  when the input values they point at agree; two gradients routed through
  such indices agree when, for every group of equal input values, they put
  the same total on the group.
* mode ties: where several values are equally frequent, ``mode`` may return
  any of them (and its index). Two results agree when the values they return
  are equally frequent in their row.
* vector phases: eigenvectors and singular vectors are defined up to a
  factor of modulus one per vector (a sign, for real ones). Two results agree
  when they do after each vector of one is turned by the phase that best
  matches the other; where singular values or eigenvalues repeat, only the
  subspace is defined, and two results agree when they rebuild the same
  matrix (``U diag(S) V^H``, ``V diag(L) V^H``).
* dtype limits: ``nan_to_num`` replaces infinities by the largest finite
  values of the dtype it runs in, unless told others; its float64 reference
  gives float64's, which round to infinity in the case's dtype. Where the
  float64 result is float64's largest value, the case dtype's stands for it.
* zero ties: ops that select one of their arguments by comparison
  (``clamp``, ``maximum``, ``relu``: ``min(max(x, lo), hi)``) see -0 and +0
  as equal, so where both zeros meet (clamp of -0.0 at a +0.0 bound) either
  one is the result. IEEE fixes the sign of every zero an arithmetic op
  returns (``neg``, ``copysign``, a product), not of one a comparison picks:
  the sign of a zero is judged only for ops outside this set.
* dtype representation: ``nextafter`` returns the next value representable
  in its own dtype; in float64 that is another value altogether, so float64
  is no reference for it (its layout reference and contracts still judge it).
"""

from __future__ import annotations

from typing import Callable

import torch

MODE_OPS = frozenset({"mode"})
TIE_INDEX_OPS = frozenset({
    "sort", "argsort", "topk", "kthvalue", "mode", "median", "nanmedian", "max", "min",
    "argmax", "argmin", "cummax", "cummin", "msort", "aminmax",
})
LIMIT_OPS = frozenset({"nan_to_num"})
# A list, not derived: what puts an op here is that its result is picked by a comparison, and nothing PyTorch states
# says so. Its schema does not (clamp and add both take Tensors and Scalars). Its decomposition mostly does
# (torch._decomp takes clamp, relu and hardtanh to maximum, minimum and where), but that only moves the list down to
# the primitives that pick (maximum, minimum, fmax, fmin, where), and max and min have no decomposition; a probe of
# the results cannot tell a pick from arithmetic that returns an operand (x * 1 and x - 0 keep x's bits too, yet
# IEEE fixes their zeros' signs).
ZERO_TIE_OPS = frozenset({
    "clamp", "clamp_min", "clamp_max", "clip", "hardtanh", "relu", "relu6", "maximum", "minimum", "max", "min", "fmax", "fmin",
})
REPRESENTATION_OPS = frozenset({"nextafter"})
PHASE_OPS = frozenset({"linalg_eig", "_linalg_eigh", "linalg_eigh", "_linalg_svd", "linalg_svd", "svd", "eig"})


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


def _equal(a: torch.Tensor, e: torch.Tensor) -> bool:
    if a.shape != e.shape:
        return False
    same = a == e
    if a.is_floating_point() or a.is_complex():
        same |= torch.isnan(a) & torch.isnan(e)
    return bool(same.all())


def same_up_to_ties(x: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two index tensors point at equal values of ``x`` along some dim (or flattened)."""
    if actual.shape != expected.shape or actual.dtype != torch.int64 or expected.dtype != torch.int64:
        return False
    x, actual, expected = x.detach().cpu(), actual.detach().cpu(), expected.detach().cpu()
    for dim in [None, *range(x.dim())]:
        a, e = _values_at(x, actual, dim), _values_at(x, expected, dim)
        if a is not None and e is not None and _equal(a, e):
            return True
    return False


def gradients_agree_up_to_ties(x: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor, close: Callable) -> bool:
    """Whether two gradients of ``x`` put the same total on every group of equal values of ``x``."""
    if actual.shape != x.shape or expected.shape != x.shape:
        return False
    x = x.detach().cpu().reshape(-1)
    _, group = torch.unique(x, return_inverse=True)
    buckets = int(group.max()) + 1 if group.numel() else 0

    def totals(g: torch.Tensor) -> torch.Tensor:
        g = g.detach().cpu().reshape(-1).to(torch.float64 if not g.is_complex() else torch.complex128)
        return torch.zeros(buckets, dtype=g.dtype).index_add_(0, group, g)

    return close(totals(actual), totals(expected))


def same_up_to_phase(actual: torch.Tensor, expected: torch.Tensor, close: Callable) -> bool:
    """Whether ``actual`` matches ``expected`` once each vector (column, or row) is turned by a phase."""
    if actual.shape != expected.shape or actual.dim() < 2:
        return False
    a = actual.detach().cpu().to(torch.complex128)
    e = expected.detach().cpu().to(torch.complex128)
    for axis in (-2, -1):  # columns are vectors (U, V); rows are vectors (Vh)
        overlap = (e * a.conj()).sum(dim=axis, keepdim=True)
        phase = torch.where(overlap.abs() > 0, overlap / overlap.abs(), torch.ones_like(overlap))
        turned = a * phase
        turned = turned.to(actual.dtype) if actual.is_complex() else turned.real.to(actual.dtype)
        if close(turned, expected.detach().cpu().to(actual.dtype)):
            return True
    return False


def same_factorization(actual: list, expected: list, close: Callable) -> bool:
    """Whether two (U, S, V or Vh) or (L, V) results rebuild the same matrix."""
    a, e = [v for _, v in actual], [v for _, v in expected]
    for rebuild in (_usvh, _usv, _vlv):
        try:
            left, right = rebuild(a), rebuild(e)
        except (RuntimeError, IndexError, TypeError, ValueError):
            continue
        if left is not None and right is not None and close(left, right):
            return True
    return False


def _c(t) -> torch.Tensor:
    return t.detach().cpu().to(torch.complex128)


def _usvh(parts):
    if len(parts) != 3:
        return None
    u, s, vh = (_c(p) for p in parts)
    return u @ torch.diag_embed(s) @ vh


def _usv(parts):  # torch.svd returns V, not V^H
    if len(parts) != 3:
        return None
    u, s, v = (_c(p) for p in parts)
    return u @ torch.diag_embed(s) @ v.mH


def _vlv(parts):  # eigh: V diag(L) V^H
    if len(parts) != 2:
        return None
    values, vectors = (_c(p) for p in parts)
    return vectors @ torch.diag_embed(values) @ vectors.mH


def same_frequency(x: torch.Tensor, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two ``mode`` values are equally frequent in their row of ``x`` (along some dim)."""
    if actual.shape != expected.shape or x.dim() == 0:
        return False
    x, actual, expected = x.detach().cpu(), actual.detach().cpu(), expected.detach().cpu()
    for dim in range(x.dim()):
        a, e = actual, expected
        if a.dim() == x.dim() - 1:
            a, e = a.unsqueeze(dim), e.unsqueeze(dim)
        if a.dim() != x.dim():
            continue
        try:
            if torch.equal((x == a).sum(dim), (x == e).sum(dim)):
                return True
        except RuntimeError:
            continue
    return False


def at_dtype_limits(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 reference with float64's largest finite values (either sign) replaced by ``dtype``'s."""
    if not isinstance(reference, torch.Tensor) or not (dtype.is_floating_point or dtype.is_complex):
        return reference
    if reference.is_complex():
        real = dtype.to_real() if dtype.is_complex else dtype
        return torch.complex(at_dtype_limits(reference.real, real), at_dtype_limits(reference.imag, real))
    if not reference.is_floating_point():
        return reference
    wide, narrow = torch.finfo(reference.dtype).max, torch.finfo(dtype.to_real() if dtype.is_complex else dtype).max
    return torch.where(reference == wide, narrow, torch.where(reference == -wide, -narrow, reference))
