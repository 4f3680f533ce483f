"""The ``matrices`` search: a linear algebra op's matrix made singular, rank-deficient, near-singular, ill-conditioned, batched.

Design note. OpInfo's samples of linear algebra ops are random matrices,
invertible and well conditioned almost surely; the kernels and derivative
formulas have branches of their own where a matrix is not (a zero pivot, a
repeated or zero singular value, a determinant of exactly 0), and bugs live
there: a derivative that divides by the determinant, a batched kernel that
takes one matrix's pivots for another's. The edit ``matrix:PATH=KIND``
replaces the square matrix (or batch of them) ``PATH`` by, for ``KIND``:

* ``singular``: its last row and column replaced by its first (``A[i, j]``
  becomes ``A[r(i), r(j)]``, ``r`` taking n - 1 to 0), rank at most n - 1:
  two identical rows and two identical columns stay identical through every
  row operation, so elimination leaves an exact zero pivot, and the
  determinant is exactly 0, however the kernel reads the matrix (by rows,
  or transposed by columns) and in every dtype;
* ``rank-deficient``: every row and column from the second on replaced by
  the second (``r`` taking 1..n-1 to 1), rank at most 2: from 4x4 on,
  below n - 1, where every cofactor is 0 too;
* ``near-singular``: ``singular`` plus ``2^-b`` times its largest entry on
  its last diagonal element: invertible, condition number about ``2^b``;
* ``ill-conditioned``: column ``j`` scaled by ``2^(-j * s)``, the spread
  ``2^(s (n - 1))`` about ``2^b`` (powers of two: exact in every dtype);
* ``batched``: a batch of three, the matrix, its ``singular`` (or, for an op
  that needs an inverse, ``near-singular``) and its ``ill-conditioned``
  forms, for a sample whose matrix is its only tensor: one batched call
  mixing a matrix a kernel handles and one it must treat apart.

A matrix that is hermitian in the sample (``eigh``'s, ``cholesky``'s) stays
so: rows and columns are replaced alike, which is exact indexing.

Which ops, by what they are: those OpInfo groups as linear algebra (its
name in the ``linalg`` namespace, or its sample function one of OpInfo's
``linalg`` ones), whose first tensor is square (the matrix a determinant,
a factorisation or an inverse is of), 2x2 or larger. An op whose name says
it inverts or solves (``inv``, ``solve``) takes no exactly singular matrix:
it raises there, which is loud and judges nothing, so it gets the
near-singular, ill-conditioned and batched ones only. ``linalg.eig`` and
``linalg.eigvals`` get none: their eigenvalues come in no specified order,
and at a singular matrix float64 and float32 list them differently.

How they are judged: the precision reference's rule measures how far the
float64 result moves when the inputs move by a unit of the dtype's
roundoff, so an ill-conditioned result is allowed what its conditioning
costs at first order; a gradient there, against float64's (the backward
variant, the vmap and autodiff oracles), is allowed the second order too,
``kappa^2 * eps`` (judge.conditioning: a backward formula applies the
inverse again; eigenvectors' derivatives divide by the eigenvalues' gaps).
The cases are planned for the functional, out= and backward variants, and
the oracles that judge values judge them too
(``on_values``): the autodiff oracle compares forward mode, reverse mode
and float64 finite differences at the singular matrix, where a derivative
formula that divides by the determinant goes wrong.
"""

from __future__ import annotations

import functools
import math

import torch

from ..cases import opinfo
from ..errors import UsageError
from ..run import tree
from .registry import Search

DESCRIPTION = ("a linear algebra op's square matrix made exactly singular, rank-deficient, near-singular, ill-conditioned, "
               "and a batch mixing them")
VERB = "matrix"
FORM = "matrix:PATH=KIND"

KINDS = ("singular", "rank-deficient", "near-singular", "ill-conditioned", "batched")
# Words of an op's name that say it needs an invertible matrix (it raises at a singular one), or that its result or its
# derivative has a pole there (a log-determinant is -inf, a condition number inf; rounding decides which infinity or
# NaN comes out, and a kernel that reads the matrix another way finds a tiny pivot instead of a zero one).
NEEDS_INVERSE = frozenset({"inv", "inverse", "tensorinv", "solve", "tensorsolve", "logdet", "slogdet", "cond"})
# Words of an op's name that say it returns singular vectors, eigenvectors or an orthogonal factor: at a singular
# matrix those are set by rounding where a singular value or eigenvalue is 0 or repeats (the columns past the rank),
# and torch.linalg.svd's and eigh's docs leave their derivatives undefined there (not finite at repeated values; in
# the complex case, dependent on a phase). Exactly singular matrices are given to their out= calls only: the values
# judged up to phase (the judge's canonicaliser), no derivative.
VECTORS = frozenset({"svd", "eigh", "qr"})
# Words of an op's name that say its derivative is undefined at a rank-deficient matrix for another reason: an LU
# factorisation with pivoting is not differentiable there (torch.linalg.lu's and lu_factor's docs: "gradient
# computations are only supported if the input matrix is full-rank ... the gradient may not be finite"). Its
# exactly singular matrices, like VECTORS', go to the out= calls only.
NOT_DIFFERENTIABLE = frozenset({"lu"})
# Ops whose eigenvalues come in no specified order (torch.linalg.eig's docs): float64 and the dtype may list the
# eigenvalues of a singular matrix in another order, and no reference can pair them.
UNORDERED = frozenset({"linalg.eig", "linalg.eigvals"})
VARIANTS = ("functional", "out", "backward")


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """One edit per kind that fits the op's first tensor, where it is a square matrix of a linear algebra op."""
    wanted = getattr(torch, dtype)
    if variant not in VARIANTS or not (wanted.is_floating_point or wanted.is_complex) or not linear_algebra(op) or op in UNORDERED:
        return []
    tensors = tree.sample_tensors(sample)
    path = next(iter(tensors), None)
    if path is None or not _square(tensors[path]) or tensors[path].dtype != wanted:
        return []
    exact = not needs_inverse(op) and (variant == "out" or not _words(op) & (VECTORS | NOT_DIFFERENTIABLE))
    kinds = [k for k in KINDS if k not in ("singular", "rank-deficient") or exact]
    if tensors[path].shape[-1] < 4:
        kinds = [k for k in kinds if k != "rank-deficient"]  # rank 2 is below n - 1 from 4x4 on
    if len(tensors) > 1:
        kinds = [k for k in kinds if k != "batched"]  # the other tensors would have to be batched alike
    return [(f"{VERB}:{path}={kind}",) for kind in kinds]


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``matrix:PATH=KIND`` made."""
    path, _, kind = rest.rpartition("=")
    if kind not in KINDS:
        raise UsageError(f"unknown matrix kind {kind!r} in {VERB}:{rest}; allowed: {', '.join(KINDS)}")
    found = tree.sample_tensors(sample)
    if path not in found or not _square(found[path]):
        raise UsageError(f"no square matrix {path!r} in the sample for {VERB}:{rest}; its tensors: {', '.join(found) or 'none'}")
    inverse = needs_inverse(op) or bool(_words(op) & (VECTORS | NOT_DIFFERENTIABLE))  # the batch's second matrix: near-singular
    return tree.map_sample_tensors(sample, lambda p, t: structured(t, kind, inverse=inverse) if p == path else t)


def structured(a: torch.Tensor, kind: str, *, inverse: bool = False) -> torch.Tensor:
    """A fresh contiguous matrix (or batch) of ``a``'s dtype with the structure ``kind`` (see the design note)."""
    n = a.shape[-1]
    if kind in ("singular", "rank-deficient"):
        rows = torch.arange(n)
        rows[-1:] = 0
        if kind == "rank-deficient":
            rows[1:] = rows[1]
        return a[..., rows, :][..., :, rows].contiguous()
    if kind == "near-singular":
        singular = structured(a, "singular")
        scale = singular.abs().amax(dim=(-2, -1), keepdim=True).clamp_min(1) * 2.0 ** -_condition_bits(a.dtype)
        bump = torch.zeros_like(singular)
        bump[..., -1, -1] = 1
        return (singular + bump * scale.to(singular.dtype)).contiguous()
    if kind == "ill-conditioned":
        step = _condition_bits(a.dtype) / max(n - 1, 1)
        scale = torch.tensor([2.0 ** -round(j * step) for j in range(n)], dtype=torch.float64).to(a.dtype)
        scaled = a * scale
        return ((scaled * scale.unsqueeze(-1)) if torch.equal(a, a.mH) else scaled).contiguous()  # a hermitian one stays so
    return torch.stack([a, structured(a, "near-singular" if inverse else "singular"), structured(a, "ill-conditioned")]).contiguous()


def _condition_bits(dtype: torch.dtype) -> int:
    """``b``: a quarter of the dtype's significand bits (6 in float32, 13 in float64), the condition number ``2^b`` of
    the near-singular and ill-conditioned matrices: their first-order error ``2^b * eps`` leaves three quarters of the
    digits, and a gradient's second order ``2^(2b) * eps`` half of them, which the judges allow (judge.conditioning)."""
    real = torch.empty((), dtype=dtype).real.dtype
    return max(2, (round(-math.log2(torch.finfo(real).eps)) + 1) // 4)


def _square(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t.shape[-1] == t.shape[-2] >= 2 and (t.is_floating_point() or t.is_complex())


def needs_inverse(op: str) -> bool:
    """Whether a word of the op's name (``inv_ex``: inv, ex) says it needs an inverse, or has a pole at a singular matrix
    (NEEDS_INVERSE); ``pinv`` does not: a pseudo-inverse is defined for every matrix."""
    return bool(NEEDS_INVERSE & _words(op))


def _words(op: str) -> set[str]:
    """The words of the op's own name (``linalg.inv_ex`` -> inv, ex; ``svd`` -> svd)."""
    name = op.split(".")[1] if op.startswith("linalg.") else op.split(".")[0]
    return set(name.split("_"))


@functools.cache
def linear_algebra(op: str) -> bool:
    """Whether OpInfo groups the op as linear algebra: the ``linalg`` namespace, or one of its ``linalg`` sample functions."""
    if op.startswith("linalg."):
        return True
    entry = opinfo.get(op)
    return "linalg" in getattr(getattr(entry, "sample_inputs_func", None), "__name__", "")


SEARCH = Search(name="matrices", description=DESCRIPTION, edits="one square matrix's structure (matrix: edits)", order=45, plan=plan,
                verb=VERB, form=FORM, apply=apply, on_values=True)
