"""What a gradient may be off by at an ill-conditioned matrix: perturbation theory's second order.

Design note. The judges' rules measure how far a result's float64 value
moves when its inputs move by a unit of the dtype's roundoff: the result's
first-order conditioning, ``kappa * eps`` relative for an inverse or a
solve at a matrix of condition number ``kappa``. A gradient there is
computed from results that carry that error already (the inverse, the
pseudo-inverse, the factors Q and R, the eigenvectors), and its formula
applies them again: ``inv``'s backward is ``-A^-H G A^-H``, ``pinv``'s
multiplies three pseudo-inverses, so the gradient's rounding is
``kappa^2 * eps`` relative, which no first-order measure sees (at
``kappa = 2^(p/4)``, float32 ``pinv``, ``qr`` and ``eigh`` gradients parted
from float64's by a few times the first-order rule). The derivatives of
eigenvectors and singular vectors divide by the gaps between eigenvalues
(singular values) instead, so for those ops ``kappa`` is also at least
``|A| / gap`` (torch.linalg.eigh's and svd's docs: not defined at a repeated
value).

``allowance(case, tensors, leaves)`` is that second order, for a case whose
edits made a matrix conditioned (the ``matrices`` search's ``near-singular``,
``ill-conditioned`` and ``batched`` kinds): ``SECOND_ORDER * eps * kappa^2``
times the leaf's largest float64 magnitude, per gradient leaf, ``kappa`` the
largest over the batch's matrices (a member exactly singular, ``kappa``
past 1/eps of float64, has a pole there and is judged as the singular kinds
are, without it). Nothing for other cases: OpInfo's matrices are well
conditioned, and a gradient there is judged by the first-order rule alone.
"""

from __future__ import annotations

import torch

from ..dtypes import unit_roundoff

# The kinds of the matrices search (search.matrices) whose matrix is conditioned, invertible.
CONDITIONED = ("near-singular", "ill-conditioned", "batched")
VERB = "matrix"
# Units of kappa^2 * eps a gradient may be off by, times its largest magnitude: a backward formula applies an inverse
# two or three times (pinv's three pseudo-inverses), each rounding relative to the result's size.
SECOND_ORDER = 4.0
# Words of an op's name whose derivative divides by gaps between eigenvalues or singular values.
GAPS = frozenset({"svd", "svdvals", "eigh", "eigvalsh", "eig", "eigvals"})


def kappa(op: str, case_edits: tuple[str, ...], tensors: dict) -> float | None:
    """The condition number the edited matrix has (its largest over a batch), or the inverse of its relative gap for
    an op whose derivative divides by gaps; None when no edit made a conditioned matrix."""
    worst = None
    for edit in case_edits:
        verb, _, rest = edit.partition(":")
        path, _, kind = rest.rpartition("=")
        if verb != VERB or kind not in CONDITIONED or path not in tensors:
            continue
        a = tensors[path].detach().cpu().to(torch.complex128 if tensors[path].is_complex() else torch.float64)
        s = torch.linalg.svdvals(a.reshape(-1, *a.shape[-2:]))
        largest, smallest = s[..., 0], s[..., -1]
        regular = smallest > largest * unit_roundoff(torch.float64) * 2 ** 8  # exactly singular members: a pole, no allowance
        if not bool(regular.any()):
            continue
        found = (largest / smallest)[regular]
        if _words(op) & GAPS and s.shape[-1] > 1:
            gaps = (s[..., :-1] - s[..., 1:]).min(dim=-1).values
            if torch.equal(a, a.mH):  # hermitian: the eigenvalues' gaps, signs kept
                values = torch.linalg.eigvalsh(a.reshape(-1, *a.shape[-2:]))
                gaps = (values[..., 1:] - values[..., :-1]).min(dim=-1).values
            found = torch.maximum(found, (largest / gaps.clamp_min(largest.max() * unit_roundoff(torch.float64)))[regular])
        value = float(found.max())
        worst = value if worst is None else max(worst, value)
    return worst


def allowance(op: str, case_edits: tuple[str, ...], tensors: dict, leaves: dict, dtype: torch.dtype) -> dict:
    """By leaf of ``leaves`` (float64 values of the gradients compared): the second-order slack at the case's conditioned
    matrix, in ``dtype``'s roundoff ({} where no edit made one)."""
    k = kappa(op, case_edits, tensors)
    if k is None:
        return {}
    real = torch.empty((), dtype=dtype).real.dtype
    factor = SECOND_ORDER * unit_roundoff(real) * k * k
    found = {}
    for path, value in leaves.items():
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()) and value.numel():
            size = torch.nan_to_num(value.detach().cpu().abs().to(torch.float64), nan=0.0, posinf=0.0).max()
            found[path] = torch.full(value.shape, float(factor * size), dtype=torch.float64)
    return found


def _words(op: str) -> set[str]:
    name = op.split(".")[1] if op.startswith("linalg.") else op.split(".")[0]
    return set(name.split("_"))
