"""What every oracle shares while judging one case: tolerances, comparison, findings, words."""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from ..run.evidence import Evidence
from ..search import duplicates
from . import canonical
from . import compare as cmp
from .records import Finding, Mismatch
from ..dtypes import is_inexact, unit_roundoff
from ..run.facts import SCANS
from .tolerance import CONVOLUTIONS, CUDNN_FACTOR, JUMP_RATIO, SCALE_ULPS, Tolerance, effective_dtype, scan_slack, slack_factor, table


class Context:
    def __init__(self, ev: Evidence, override: tuple[float, float] | None):
        self.ev = ev
        self.case = ev.case
        self.facts = ev.facts
        self.override = override
        self.findings: list[Finding] = []
        self.notes: list[str] = []

    # --- tolerances and comparison ---------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.case.dtype)

    @property
    def effective(self) -> torch.dtype:
        """The precision the case is computed at (float16's for float32 in TF32)."""
        return effective_dtype(self.dtype, self.case.device, self.facts.names)

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        if dtype == self.dtype and self.effective != dtype:
            dtype = self.effective
        return table(dtype, self.override)

    def sensitivity(self, nudges=None) -> dict[str, torch.Tensor] | None:
        """Per output leaf, how far float64 moves when the inputs are nudged (k_i of the rule)."""
        refs = self.ev.refs
        nudges = refs.perturbed if nudges is None else nudges
        if not refs.float64.ok or not nudges:
            return None
        exact = dict(cmp.flatten(refs.float64.value))
        found: dict[str, torch.Tensor] = {}
        for nudged in nudges:
            for path, value in cmp.flatten(nudged.value):
                value, base = cmp.dense(value), cmp.dense(exact.get(path))
                if not isinstance(value, torch.Tensor) or not isinstance(base, torch.Tensor) or value.shape != base.shape:
                    continue
                work = torch.complex128 if value.is_complex() or base.is_complex() else torch.float64
                move = (value.detach().cpu().to(work) - base.detach().cpu().to(work)).abs()
                move = torch.nan_to_num(move, nan=0.0, posinf=torch.finfo(torch.float64).max)
                found[path] = torch.maximum(found[path], move) if path in found else move
        return found

    def slack(self, scale: float, *, jumps: bool = False) -> dict[str, torch.Tensor] | None:
        """The rule's sensitivity term per output leaf; with ``jumps``, plus the jump term."""
        k = self.sensitivity()
        if k is None:
            return None
        names = set(self.facts.names)
        # K writes of one value into one slot round the same way each time: their error grows as K, not as the square
        # root a reduction of varied terms has (the rule's), so they count as a reduction of K^2 terms
        reduction, accumulation = max(self.facts.reduction_length, duplicates.writes(self.case.edits) ** 2), None
        if any(n.startswith("_fft_") for n in names):  # a transform sums over its whole length, in its own dtype
            reduction = max((t.numel() for t in self.ev.refs.base.tensors.values()), default=1)
            accumulation = self.effective
        factor = scale * slack_factor(self.effective, reduction, self.facts.steps, accumulation=accumulation)
        if self.case.device.startswith("cuda") and names & CONVOLUTIONS:
            factor *= CUDNN_FACTOR
        if self.effective != self.dtype:  # k was measured with nudges at the case dtype's roundoff
            factor *= unit_roundoff(self.effective) / unit_roundoff(self.dtype)
        found = {path: factor * value for path, value in k.items()}
        exact = dict(cmp.flatten(self.ev.refs.float64.value))
        if names & SCANS:  # the scans' term of the rule: a chain of partial results, each rounded at its own size
            for path in found:
                base = cmp.dense(exact.get(path))
                if isinstance(base, torch.Tensor) and base.shape == found[path].shape and is_inexact(base.dtype):
                    size = torch.nan_to_num(base.detach().cpu().abs().to(found[path].dtype), nan=0.0, posinf=0.0)
                    found[path] = found[path] + scan_slack(self.effective, reduction) * size
        if self.facts.steps > 1:  # the composite term of the rule
            for path in found:
                base = cmp.dense(exact.get(path))
                if isinstance(base, torch.Tensor) and base.numel() and is_inexact(base.dtype):
                    largest = float(torch.nan_to_num(base.detach().abs(), nan=0.0, posinf=0.0).max())
                    found[path] = found[path] + SCALE_ULPS * unit_roundoff(self.effective) * largest
        leaps = self.sensitivity(self.ev.refs.jumped) if jumps else None
        for path, leap in (leaps or {}).items():
            if path in found and leap.shape == found[path].shape:
                found[path] = found[path] + torch.where(leap > JUMP_RATIO * k[path], leap, torch.zeros_like(leap))
        return found

    def differs(self, actual, expected, *, scale: float, extra: dict | None = None, check_dtype: bool = True) -> list[Mismatch]:
        """Compare with the table; if that fails, again with the rule's slack added; then canonicalise."""
        a, e = cmp.flatten(actual), cmp.flatten(expected)
        found = cmp.compare(a, e, tolerance=self.tolerance, check_dtype=check_dtype)
        if not found:
            return []
        sizes = {path: value.numel() for path, value in a if isinstance(value, torch.Tensor)}
        for jumps in (False, True):  # the jump probe costs two more float64 runs: only if needed
            # a leaf whose float64 reference has another size than the compared values (native_batch_norm's saved
            # statistics, empty on the CPU and not on CUDA) has no slack from it
            slack = {path: v for path, v in (self.slack(scale, jumps=jumps) or {}).items() if v.numel() == sizes.get(path)}
            for path, more in (extra or {}).items():
                slack[path] = slack[path] + more if path in slack else more
            if slack:
                found = cmp.compare(a, e, tolerance=self.tolerance, slack=slack, check_dtype=check_dtype)
            found = self.canonical(found, a, e, slack)
            if not found:
                return []
        return found

    def canonical(self, found: list[Mismatch], actual: cmp.Leaves, expected: cmp.Leaves, slack: dict) -> list[Mismatch]:
        """``found`` less the mismatches a declared canonicaliser shows to be two right answers."""
        names = set(self.facts.names) | {self.short_op(self.facts.op)}
        phases, ties = names & canonical.PHASE_OPS, names & canonical.TIE_INDEX_OPS
        if not found or not (phases or ties):
            return found
        if names & canonical.MODE_OPS:  # values may differ too: check them first, then the indices
            x = self.ev.prepared.tensors.get("input")
            a, e = dict(actual), dict(expected)
            found = [m for m in found if not (x is not None and m.path == "out[0]" and m.attribute == "values"
                                             and canonical.same_frequency(x, a[m.path], e[m.path]))]
        a, e = dict(actual), dict(expected)
        x = self.ev.prepared.tensors.get("input")

        def close_for(path):
            return lambda u, v: cmp.compare_leaf(path, u, v, tolerance=self.tolerance, slack=None) is None

        kept = []
        for m in found:
            u, v = a.get(m.path), e.get(m.path)
            ok = False
            if m.attribute == "values" and isinstance(u, torch.Tensor) and isinstance(v, torch.Tensor):
                if phases:
                    ok = canonical.same_up_to_phase(u, v, close_for(m.path)) or canonical.same_factorization(actual, expected, close_for("out"))
                elif x is not None and self.case.variant == "backward":
                    ok = canonical.gradients_agree_up_to_ties(x, u, v, close_for(m.path))
                elif x is not None:
                    ok = canonical.same_up_to_ties(x, u, v)
            if not ok:
                kept.append(m)
        return kept

    # --- findings ----------------------------------------------------------------------------

    def report(self, kind: str, reference: str, summary: str, mismatch: Mismatch | None = None, detail: str = "", data: str = "") -> None:
        digest = hashlib.sha256(f"{self.case.id}|{kind}|{reference}".encode()).hexdigest()[:10]
        self.findings.append(
            Finding(
                id=f"f-{digest}", kind=kind, op=self.ev.op or self.case.op, opinfo=self.case.op,
                variant=self.case.variant, dtype=self.case.dtype, device=self.case.device, reference=reference,
                case_id=self.case.id, layouts=self.case.layouts, summary=summary, mismatch=mismatch,
                call=self.ev.call_spec(), detail=detail, data=data,
            )
        )

    # --- words ---------------------------------------------------------------------------------

    @staticmethod
    def short_op(op: str) -> str:
        parts = op.split(".")
        return parts[1] if len(parts) >= 3 and parts[0] == "aten" else op

    def short(self) -> str:
        return self.short_op(self.ev.op or self.case.op)

    def name(self) -> str:
        variant = {"functional": "", "method": " (method)", "backward": " backward", "inplace": " (in-place)", "out": " (out=)"}[self.case.variant]
        return f"{self.short()}{variant} [{self.case.dtype}]"

    def describe(self, path: str) -> str:
        layout = self.case.layout_of(path)
        return ("an " if layout[0] in "aeiou" else "a ") + layout

    def placed(self) -> str:
        return ", ".join(f"{layout} {path}" for path, layout in self.case.layouts) or "contiguous tensors"


def renamed(mismatch: Mismatch, path: str) -> Mismatch:
    return dataclasses.replace(mismatch, path=path)


def same_bytes(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether two snapshots of a storage hold the same bytes, in one comparison (``changed`` makes a row of bytes per
    element first); False where that cannot be asked so (then ``changed`` says)."""
    return (before.dtype == after.dtype and before.device == after.device and before.dim() == after.dim() == 1
            and before.is_contiguous() and after.is_contiguous()
            and torch.equal(before.view(torch.uint8), after.view(torch.uint8)))


def changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per storage element, whether any of its bytes changed."""
    return (cmp.bytes_of(before) != cmp.bytes_of(after)).any(-1)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise, whether ``a`` and ``b`` hold the same bits (NaN payloads included)."""
    a, b = a.cpu(), b.cpu().to(a.dtype)
    if a.numel() == 0:
        return torch.ones(a.shape, dtype=torch.bool)
    return (cmp.bytes_of(a) == cmp.bytes_of(b)).all(-1).reshape(a.shape)
