"""Calls an oracle makes itself, judged with the judge's own tolerance rule.

Design note. The ``sizes`` and ``repeat`` oracles call a case's op on
tensors they make (a tiled length, a batch of rows) or with an argument
changed, and compare what comes back against another call. What the judge
knows about tolerances (judge.tolerance: the table, widened by the op's
measured sensitivity to rounding, k_i, from float64 runs with nudged inputs)
is reached through the same ``Context`` the references use: ``judged``
wraps any call of the op as run.evidence's ``Evidence``, so
``Context.differs`` and ``Context.slack`` work on it unchanged, and the
float64 runs behind the slack are made only when a comparison fails
without it.

Also here: a finding in the judge's form (id a stable hash of case id, kind
and reference), how far apart two floats are in units in the last place,
and whether a difference changes the class of a value (NaN against a
number, an infinity against a finite value, the sign of a zero).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import torch

from ..cases.records import Case
from ..judge import compare as cmp
from ..judge.context import Context
from ..judge.oracles import one_line
from ..judge.records import Finding, Mismatch, Outcome
from ..run import call, tree
from ..run.evidence import Evidence
from ..run.facts import facts as read_facts
from ..run.references import References


def plain(case: Case) -> Case:
    """The case's call as the main sweep makes it: contiguous tensors, no oracle."""
    return dataclasses.replace(case, layouts=(), oracle="")


def base(subject) -> tuple[References | None, Outcome | None]:
    """The case's base references; or None and the case's ``raised`` outcome when its contiguous call raised, or
    its sample's tensors cannot even be made (a sparse layout, say)."""
    try:
        refs = subject.base()
        error = None if refs.contiguous.ok else refs.contiguous.error
    except Exception as e:
        refs, error = None, getattr(e, "error", e)
    if error is None:
        return refs, None
    return None, Outcome(case=subject.case, status="raised", reason="the contiguous reference raised: " + one_line(error))


def with_tensors(prepared: call.Prepared, tensors: tree.Tensors, *, args=None, kwargs=None) -> call.Prepared:
    """``prepared``'s call on other tensors (any shapes), and other scalars where given."""
    args = prepared.args if args is None else args
    kwargs = prepared.kwargs if kwargs is None else kwargs
    args, kwargs = tree.replace_call(args, kwargs, tensors)
    return dataclasses.replace(prepared, args=args, kwargs=kwargs, tensors=dict(tensors))


def run(prepared: call.Prepared, tensors: tree.Tensors | None = None) -> Any:
    """The call, seeded as every call of the engine is; raises what the op raises."""
    result = call.compute(prepared, tensors)
    call.synchronize(prepared.case.device)
    return result


def ran(prepared: call.Prepared) -> call.Ran:
    """A record of ``prepared``'s tensors before a call, for CallSpecs (no call is made)."""
    return call.Ran(before=call.snapshot(prepared.tensors), meta={p: call.metadata(t) for p, t in prepared.tensors.items()})


class Judged:
    """One call of the op on tensors an oracle made, with its references made lazily."""

    def __init__(self, prepared: call.Prepared, result: Any, *, override, function_name: str, op: str):
        self.prepared = prepared
        self.result = result
        self.override = override
        self.function_name = function_name
        self.op = op

    @property
    def context(self) -> Context:
        if not hasattr(self, "_context"):
            dtype = getattr(torch, self.prepared.case.dtype)
            refs = References(self.prepared, dtype, seed=self.prepared.case.sample)
            facts = read_facts(refs.trace, refs.base.tensors, self.result, fallback=self.op)
            evidence = Evidence(self.prepared, ran(self.prepared), refs, facts, function_name=self.function_name)
            evidence.__dict__["op"] = self.op  # known already: no traced rerun for a name
            self._context = Context(evidence, self.override)
        return self._context

    def differs(self, expected: Any, *, scale: float = 2.0) -> list[Mismatch]:
        """Where this result is not ``expected`` within the judge's rule (two rounded results: ``scale`` 2)."""
        return self.context.differs(self.result, expected, scale=scale)


def finding(case: Case, *, kind: str, reference: str, op: str, summary: str, mismatch: Mismatch | None,
            call_spec=None, detail: str = "") -> Finding:
    digest = hashlib.sha256(f"{case.id}|{kind}|{reference}".encode()).hexdigest()[:10]
    return Finding(
        id=f"f-{digest}", kind=kind, op=op or case.op, opinfo=case.op, variant=case.variant, dtype=case.dtype,
        device=case.device, reference=reference, case_id=case.id, layouts=case.layouts, summary=summary,
        mismatch=mismatch, call=call_spec, detail=detail,
    )


# --- bits -------------------------------------------------------------------------------------------


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place of ``a``'s dtype (floats; complex: the larger part).

    NaNs and infinities are 0 against a value of their own class and are
    not measured otherwise (class changes are told apart by ``class_change``).
    """
    a, b = a.detach().cpu(), b.detach().cpu().to(a.dtype)
    if a.is_complex():
        return torch.maximum(ulps(a.real, b.real), ulps(a.imag, b.imag))
    if not a.is_floating_point():
        return (a.to(torch.int64) - b.to(torch.int64)).abs()
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    ia, ib = _ordered(a.contiguous().view(bits).to(torch.int64), bits), _ordered(b.contiguous().view(bits).to(torch.int64), bits)
    distance = (ia - ib).abs()
    finite = torch.isfinite(a) & torch.isfinite(b)
    return torch.where(finite, distance, torch.zeros_like(distance))


def _ordered(i: torch.Tensor, bits: torch.dtype) -> torch.Tensor:
    """Sign-magnitude integers as ordered ones: -0 and +0 both 0, and adjacent floats 1 apart."""
    width = torch.iinfo(bits).bits
    magnitude = i & ((1 << (width - 1)) - 1)
    return torch.where(i < 0, 0 - magnitude, magnitude)


def class_change(a: torch.Tensor, e: torch.Tensor, *, signed_zero: bool = True) -> torch.Tensor:
    """Elementwise: a NaN against a number, an infinity against anything else, or (``signed_zero``) +0 against -0."""
    a, e = a.detach().cpu(), e.detach().cpu().to(a.dtype)
    if a.is_complex():
        return class_change(a.real, e.real, signed_zero=signed_zero) | class_change(a.imag, e.imag, signed_zero=signed_zero)
    if not a.is_floating_point():
        return a != e
    changed = (torch.isnan(a) != torch.isnan(e)) | (torch.isinf(a) & (a != e)) | (torch.isinf(e) & (a != e))
    if signed_zero:
        changed |= (a == 0) & (e == 0) & (torch.signbit(a) != torch.signbit(e))
    return changed


def leaves(value: Any) -> cmp.Leaves:
    return cmp.flatten(value)
