"""The oracles: what "wrong" means for one case, as findings.

Design note. ``judge`` looks at a case's evidence (run.evidence) and applies,
in order:

1. the storage contracts, to every variant: nothing outside a view changes
   (``out_of_view_write``), and a tensor the call may only read keeps its
   values (``input_mutated``) unless the op's schema declares it written;
2. the variant's contract: an in-place result lands in ``self``
   (``dropped_write``), an ``out=`` result lands in ``out`` with its strides
   kept (``out_ignored``), every element of a random in-place op is written
   (``random_coverage``) with values the distribution can produce;
3. the layout reference, for functional, method and backward cases: the same
   call with every tensor contiguous on the same device; for the all-
   contiguous case that is the same call twice, so it is compared bit for bit
   (``nondeterministic``, unless PyTorch says the op has no deterministic
   implementation, which is noted and not reported);
4. on the all-contiguous functional and backward cases only: the precision
   reference (float64 on the CPU) and, off the CPU, the device reference.
   Layout cases are tied to these through the layout reference.

Tolerances come from judge.tolerance. A comparison is first made with the
table alone; only if that fails is the float64 sensitivity computed and the
comparison made again with the widened tolerance, so a clean case pays for
no float64 runs.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import torch

from ..cases import layouts
from ..dtypes import is_inexact, wide
from ..run.evidence import Evidence
from . import compare as cmp
from . import random as random_oracle
from .canonical import TIE_INDEX_OPS, same_up_to_ties
from .records import Finding, Mismatch, Outcome
from .tolerance import DEVICE_FACTOR, Tolerance, slack_factor, table


def judge(ev: Evidence, *, override: tuple[float, float] | None = None, seconds: float = 0.0) -> Outcome:
    case = ev.case
    if ev.ran.error is not None:
        return Outcome(case=case, status="raised", reason=one_line(ev.ran.error), seconds=seconds)
    if not ev.refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(ev.refs.contiguous.error), seconds=seconds)
    judge_ = _Judge(ev, override)
    judge_.storage_contracts()
    if case.variant == "inplace":
        judge_.inplace()
    elif case.variant == "out":
        judge_.out()
    else:
        judge_.layout()
        if not case.layouts:
            judge_.precision()
            judge_.device()
    findings = tuple(judge_.findings)
    status = "finding" if findings else "pass"
    reason = "; ".join(judge_.notes)
    return Outcome(case=case, status=status, reason=reason, findings=findings, seconds=seconds)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}"


class _Judge:
    def __init__(self, ev: Evidence, override):
        self.ev = ev
        self.case = ev.case
        self.override = override
        self.findings: list[Finding] = []
        self.notes: list[str] = []

    # --- helpers -------------------------------------------------------------------

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return table(dtype, self.override)

    def report(self, kind: str, reference: str, summary: str, mismatch: Mismatch | None = None, detail: str = "") -> None:
        digest = hashlib.sha256(f"{self.case.id}|{kind}|{reference}".encode()).hexdigest()[:10]
        self.findings.append(
            Finding(
                id=f"f-{digest}", kind=kind, op=self.ev.facts.op or self.case.op, opinfo=self.case.op,
                variant=self.case.variant, dtype=self.case.dtype, device=self.case.device, reference=reference,
                case_id=self.case.id, layouts=self.case.layouts, summary=summary, mismatch=mismatch,
                call=self.ev.call_spec(), detail=detail,
            )
        )

    def sensitivity(self) -> dict[str, torch.Tensor] | None:
        """Per output leaf, how far float64 moves when the inputs are nudged (k_i of the rule)."""
        refs = self.ev.refs
        if not refs.float64.ok or not refs.perturbed:
            return None
        exact = dict(cmp.flatten(refs.float64.value))
        found: dict[str, torch.Tensor] = {}
        for nudged in refs.perturbed:
            for path, value in cmp.flatten(nudged.value):
                base = exact.get(path)
                if not isinstance(value, torch.Tensor) or not isinstance(base, torch.Tensor) or value.shape != base.shape:
                    continue
                work = torch.complex128 if value.is_complex() or base.is_complex() else torch.float64
                move = (value.detach().cpu().to(work) - base.detach().cpu().to(work)).abs()
                move = torch.nan_to_num(move, nan=0.0, posinf=torch.finfo(torch.float64).max)
                found[path] = torch.maximum(found[path], move) if path in found else move
        return found

    def slack(self, scale: float) -> dict[str, torch.Tensor] | None:
        k = self.sensitivity()
        if k is None:
            return None
        factor = scale * slack_factor(getattr(torch, self.case.dtype), self.ev.facts.reduction_length)
        return {path: factor * value for path, value in k.items()}

    def differs(self, actual, expected, *, scale: float, extra: dict | None = None, check_dtype: bool = True) -> list[Mismatch]:
        """Compare with the table; if that fails, again with the rule's slack added."""
        a, e = cmp.flatten(actual), cmp.flatten(expected)
        found = self._untied(cmp.compare(a, e, tolerance=self.tolerance, check_dtype=check_dtype), a, e)
        if not found:
            return []
        slack = self.slack(scale) or {}
        for path, more in (extra or {}).items():
            slack[path] = slack[path] + more if path in slack else more
        if not slack:
            return found
        return self._untied(cmp.compare(a, e, tolerance=self.tolerance, slack=slack, check_dtype=check_dtype), a, e)

    def _untied(self, found: list[Mismatch], actual: cmp.Leaves, expected: cmp.Leaves) -> list[Mismatch]:
        """``found`` less the index mismatches that only pick another of equal elements."""
        x = self.ev.prepared.tensors.get("input")
        if not found or x is None or self._short() not in TIE_INDEX_OPS:
            return found
        a, e = dict(actual), dict(expected)
        return [m for m in found if not (m.attribute == "values" and same_up_to_ties(x, a[m.path], e[m.path]))]

    # --- 1. storage contracts ------------------------------------------------------------

    def storage_contracts(self) -> None:
        ran = self.ev.ran
        for path in self.ev.prepared.tensors:
            before, after = ran.before[path], ran.after[path]
            if before.numel() != after.numel():
                continue  # the storage was swapped (set_, resize_): judged by values
            changed = _changed(before, after)
            if not bool(changed.any()):
                continue
            inside = self.ev.view_mask(path)
            outside = changed & ~inside
            if bool(outside.any()):
                where = int(outside.nonzero()[0])
                shape, stride, offset = ran.meta[path]
                self.report(
                    "out_of_view_write", "contract",
                    f"{self._name()} writes outside the view of {path} ({self._describe(path)}): "
                    f"{int(outside.sum())} storage element(s) changed, first at storage index {where}",
                    Mismatch(path=path, attribute="storage", expected="unchanged guard values", actual=f"{int(outside.sum())} changed", mismatched=int(outside.sum()), numel=int((~inside).sum())),
                )
            written = path in self.ev.prepared.written or self.ev.written_by_schema(path)
            if not written and bool((changed & inside).any()):
                self.report(
                    "input_mutated", "contract",
                    f"{self._name()} changes its input {path} ({self._describe(path)}), which it should only read",
                    Mismatch(path=path, attribute="values", expected="unchanged", actual=f"{int((changed & inside).sum())} element(s) changed", mismatched=int((changed & inside).sum()), numel=int(inside.sum())),
                )

    # --- 2. variant contracts ---------------------------------------------------------------

    def inplace(self) -> None:
        ev = self.ev
        targets = sorted(ev.prepared.written)
        written = [ev.prepared.tensors[p] for p in targets]
        expected_leaves = cmp.flatten(ev.refs.contiguous.value)
        if len(expected_leaves) != len(written):
            self.notes.append("in-place result does not match self's structure")
            return
        if ev.facts.random:
            return self._random_inplace(targets, written)
        if ev.facts.uninitialized:
            return
        if ev.facts.storage_defined:
            return self._same_layout()
        for path, t, (_, expected) in zip(targets, written, expected_leaves):
            if not isinstance(expected, torch.Tensor):
                continue
            if expected.shape != t.shape or tuple(t.shape) != ev.ran.meta[path][0]:
                self.notes.append(f"in-place result shape {list(expected.shape)} is not self's {list(t.shape)}")
                continue
            found = self.differs(t.detach(), expected.detach().to(t.dtype), scale=2.0, check_dtype=False)
            if not found:
                continue
            mismatch = _renamed(found[0], path)
            before = ev.before_view(path)
            after = t.detach().cpu()
            stale = _bits_equal(after, before)
            expected_cpu = expected.detach().cpu().to(t.dtype)
            should_change = ~_bits_equal(expected_cpu, before)
            missed = stale & should_change
            if bool(missed.any()):
                self.report(
                    "dropped_write", "layout",
                    f"in-place {self._short()} on {self._describe(path)} self leaves {int(missed.sum())} of "
                    f"{t.numel()} element(s) of self unchanged",
                    mismatch,
                )
            else:
                self.report("mismatch", "layout", f"in-place {self._short()} writes wrong values into {self._describe(path)} self", mismatch)
        self._check_returned_is(targets, written, "in-place", "mismatch")

    def _random_inplace(self, targets, written) -> None:
        ev = self.ev
        for path, t in zip(targets, written):
            values = t.detach().cpu()
            if ev.second is not None:
                other = ev.second.after[path].cpu().as_strided(*ev.second.meta[path])
                first_fill, second_fill = ev.prefill
                unwritten = _bits_equal(values, torch.full_like(values, first_fill)) & _bits_equal(other, torch.full_like(other, second_fill))
                if bool(unwritten.any()):
                    self.report(
                        "random_coverage", "contract",
                        f"random in-place {self._short()} on {self._describe(path)} self leaves "
                        f"{int(unwritten.sum())} of {values.numel()} element(s) unwritten",
                        Mismatch(path=path, attribute="values", expected="every element drawn", actual=f"{int(unwritten.sum())} kept their old value", mismatched=int(unwritten.sum()), numel=values.numel()),
                    )
                    continue
                if not bool(_bits_equal(values, other).all()):
                    self._nondeterministic(path, values, other, seeded=True)
                    continue
            problem = random_oracle.implausible(ev.facts.op, values, ev.prepared.args, ev.prepared.kwargs)
            if problem:
                self.report("random_coverage", "contract", f"random in-place {self._short()} on {self._describe(path)} self draws {problem}")

    def out(self) -> None:
        ev = self.ev
        out_paths = sorted(ev.prepared.written)
        expected = cmp.flatten(ev.refs.contiguous.value)
        returned = cmp.flatten(ev.ran.result)
        for path in out_paths:
            t = ev.prepared.tensors[path]
            shape, stride, offset = ev.ran.meta[path]
            if (tuple(t.shape), tuple(t.stride()), t.storage_offset()) != (shape, stride, offset):
                self.report(
                    "out_ignored", "contract",
                    f"{self._short()}(out=) restrides {self._describe(path)} {path}: strides {list(stride)} became {list(t.stride())}",
                    Mismatch(path=path, attribute="stride", expected=str(list(stride)), actual=str(list(t.stride()))),
                )
                return
        if ev.facts.uninitialized or ev.facts.random:
            return
        actual = [(p, ev.prepared.tensors[p].detach()) for p, _ in expected if p in ev.prepared.tensors]
        if len(actual) != len(expected):
            return
        found = self.differs(dict(actual), dict(expected), scale=2.0)
        for mismatch in found:
            path = mismatch.path
            t = ev.prepared.tensors[path].detach().cpu()
            unwritten = torch.isnan(t) if is_inexact(t.dtype) else t == layouts.poison(t.dtype)
            if mismatch.attribute == "values" and bool(unwritten.any()):
                self.report("out_ignored", "layout", f"{self._short()}(out=) leaves {int(unwritten.sum())} of {t.numel()} element(s) of {self._describe(path)} {path} unwritten", mismatch)
            else:
                self.report("mismatch", "layout", f"{self._short()}(out=) writes wrong values into {self._describe(path)} {path}", mismatch)
        if not found:
            self._check_returned_is(out_paths, [ev.prepared.tensors[p] for p in out_paths], "out=", "out_ignored", returned)

    def _check_returned_is(self, paths, tensors, what, kind, returned=None) -> None:
        returned = cmp.flatten(self.ev.ran.result) if returned is None else returned
        values = [v for _, v in returned if isinstance(v, torch.Tensor)]
        if len(values) != len(tensors):
            return
        for path, t, r in zip(paths, tensors, values):
            if r.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():
                self.report(kind, "contract", f"{what} {self._short()} returns a new tensor instead of {path}",
                            Mismatch(path=path, attribute="identity", expected=f"the tensor passed as {path}", actual="a different tensor"))

    # --- 3. layout reference --------------------------------------------------------------

    def layout(self) -> None:
        ev = self.ev
        kind = "gradient_mismatch" if self.case.variant == "backward" else "mismatch"
        actual, expected = ev.ran.result, ev.refs.contiguous.value
        if ev.facts.storage_defined:
            return self._same_layout()
        if ev.facts.random or ev.facts.uninitialized:
            found = cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=self.tolerance, bitwise=not self.case.layouts and not ev.facts.uninitialized, check_dtype=True)
            found = [m for m in found if m.attribute != "values" or not self.case.layouts]
        elif not self.case.layouts:
            found = cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=self.tolerance, bitwise=True)
        else:
            found = self.differs(actual, expected, scale=2.0)
        if not found:
            return
        mismatch = found[0]
        if not self.case.layouts and mismatch.attribute == "values":
            if ev.known_nondeterministic:
                self.notes.append(f"{self._short()} is nondeterministic by PyTorch's own account")
                return
            self.report(
                "nondeterministic", "determinism",
                f"{self._name()} gives different results for the same call twice, and PyTorch does not declare it nondeterministic",
                mismatch,
            )
            return
        self.report(kind, "layout", f"{self._name()} on {self._layouts()} differs from the contiguous call", mismatch)

    def _same_layout(self) -> None:
        """Storage-defined ops: the call again on the same storage layout, bit for bit."""
        reference = self.ev.same_layout
        if not reference.ok:
            return
        found = cmp.compare(cmp.flatten(self.ev.ran.result), cmp.flatten(reference.value), tolerance=self.tolerance, bitwise=True)
        if found:
            self.report("nondeterministic", "determinism", f"{self._name()} on {self._layouts() or 'contiguous tensors'} gives a different result on a copy of the same storage", found[0])

    def _nondeterministic(self, path, first, second, *, seeded: bool) -> None:
        mismatch = cmp.compare_leaf(path, first, second, tolerance=self.tolerance, bitwise=True)
        self.report("nondeterministic", "determinism", f"{self._name()} draws different values from the same seed on {self._describe(path)} {path}", mismatch)

    # --- 4. precision and device references -------------------------------------------------

    def precision(self) -> None:
        ev = self.ev
        dtype = getattr(torch, self.case.dtype)
        if dtype == wide(dtype) or not is_inexact(dtype) or ev.facts.random or ev.facts.uninitialized or ev.facts.storage_defined:
            return
        reference = ev.refs.float64
        if not reference.ok:
            self.notes.append("no float64 reference: " + one_line(reference.error))
            return
        actual = cmp.flatten(ev.ran.result)
        expected = _rounded_like(cmp.flatten(reference.value), actual)
        found = cmp.compare(actual, expected, tolerance=self.tolerance, slack=self.slack(1.0))
        if found:
            kind = "gradient_mismatch" if self.case.variant == "backward" else "mismatch"
            self.report(kind, "precision", f"{self._name()} in {self.case.dtype} is further from the float64 result than rounding allows", found[0])

    def device(self) -> None:
        ev = self.ev
        if self.case.device == "cpu" or ev.facts.random or ev.facts.uninitialized:
            return
        reference = ev.same_layout if ev.facts.storage_defined else ev.refs.cpu
        if not reference.ok:
            self.notes.append("no CPU reference: " + one_line(reference.error))
            return
        extra = {}
        if ev.refs.float64.ok:
            exact = dict(_rounded_like(cmp.flatten(ev.refs.float64.value), cmp.flatten(reference.value)))
            for path, value in cmp.flatten(reference.value):
                base = exact.get(path)
                if isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor) and value.shape == base.shape and is_inexact(value.dtype):
                    work = torch.complex128 if value.is_complex() else torch.float64
                    extra[path] = DEVICE_FACTOR * torch.nan_to_num((value.detach().cpu().to(work) - base.cpu().to(work)).abs(), nan=0.0)
        found = self.differs(ev.ran.result, reference.value, scale=2.0, extra=extra)
        if found:
            kind = "gradient_mismatch" if self.case.variant == "backward" else "mismatch"
            self.report(kind, "device", f"{self._name()} on {self.case.device} differs from the CPU beyond how far the CPU is from float64", found[0])

    # --- words ---------------------------------------------------------------------------------

    def _short(self) -> str:
        op = self.ev.facts.op or self.case.op
        parts = op.split(".")
        return parts[1] if len(parts) >= 3 and parts[0] == "aten" else op

    def _name(self) -> str:
        variant = {"functional": "", "method": " (method)", "backward": " backward", "inplace": " (in-place)", "out": " (out=)"}[self.case.variant]
        return f"{self._short()}{variant} [{self.case.dtype}]"

    def _describe(self, path: str) -> str:
        layout = self.case.layout_of(path)
        return "a contiguous" if layout == "contiguous" else f"a {layout}"

    def _layouts(self) -> str:
        return ", ".join(f"{layout} {path}" for path, layout in self.case.layouts)


def _changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per storage element, whether any of its bytes changed."""
    return (cmp.bytes_of(before) != cmp.bytes_of(after)).any(-1)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.cpu().contiguous(), b.cpu().contiguous().to(a.dtype)
    if a.dtype == torch.bool or a.numel() == 0:
        return a == b
    return (cmp.bytes_of(a) == cmp.bytes_of(b)).all(-1).reshape(a.shape)


def _renamed(mismatch: Mismatch, path: str) -> Mismatch:
    import dataclasses

    return dataclasses.replace(mismatch, path=path)


def _rounded_like(expected: cmp.Leaves, actual: cmp.Leaves) -> cmp.Leaves:
    """Each float64 expected leaf rounded to the dtype of the matching actual leaf."""
    dtypes: dict[str, Callable] = {p: v.dtype for p, v in actual if isinstance(v, torch.Tensor)}
    found = []
    for path, value in expected:
        if isinstance(value, torch.Tensor) and path in dtypes:
            value = value.detach().cpu().to(dtypes[path])
        found.append((path, value))
    return found
