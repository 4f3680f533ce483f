"""A, B, A again on one case's tensors, and the check both forms make: the second A gives the first's bits.

Design note. ``Repetition`` holds the two prepared calls (A as the sample
makes it, B with the change), makes each call as the oracle makes every one
(``once``), judges the second A (``again``) and writes a finding with its
``Detail``. What B is checked against is each form's own: a number changed
(number_form.NumberRepetition) or another dtype (dtype_form.DtypeRepetition);
each defines ``judge`` and the ``Detail`` of its findings.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ...cases import layouts, opinfo
from ...cases.records import VARIANT_WORDS
from ...judge import calls
from ...judge import compare as cmp
from ...judge.verdict import one_line
from ...judge.plugin import encode_detail
from ...judge.records import Finding, Mismatch, Outcome
from ...judge.tolerance import table
from ...run import call, tree
from ...run.facts import facts as read_facts
from .detail import AGAIN, DTYPES, STALE, Change, Detail


class Skip(Exception):
    """The case cannot be judged: the outcome is ``status`` ("skip" or "raised") with the message as its reason."""

    def __init__(self, reason: str, status: str = "skip"):
        super().__init__(reason)
        self.status = status


class Repetition:
    """One case's A and B, and what both forms judge; a form adds ``judge`` and ``detail``."""

    b_reference = ""  # how B's cache-free reference is made (detail.B_REFERENCES); "" when B has none

    def __init__(self, subject, a: call.Prepared, b: call.Prepared, change: Change, old):
        self.subject = subject
        self.case = subject.case
        self.a, self.b = a, b
        self.change = change
        self.argument = change.argument or "dtype"  # what the words call the change
        self.old, self.new = old, (change.dtype or change.number)
        self.dtype = getattr(torch, self.case.dtype)
        try:
            refs = subject.base()
        except Exception as e:
            raise Skip("the contiguous reference raised: " + one_line(getattr(e, "error", e)), "raised") from None
        if not refs.contiguous.ok:
            raise Skip("the contiguous reference raised: " + one_line(refs.contiguous.error), "raised")
        self.facts = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=self.case.op)
        self.function_name = opinfo.public_name(subject.entry, self.case.variant)

    def judge(self) -> Outcome:
        raise NotImplementedError

    def detail(self, check: str) -> Detail:
        """The ``Detail`` of a finding of ``check`` (one of detail.CHECKS)."""
        raise NotImplementedError

    @functools.cached_property
    def op(self) -> str:
        """The aten overload the call computes with (traced for an in-place call: the base is functional)."""
        if self.case.variant == "functional":
            return self.facts.op
        tensors = {p: layouts.apply("contiguous", t.detach()) for p, t in self.a.tensors.items()}
        return call.traced(self.a, tensors)[0].primary() or self.facts.op

    # --- words ---------------------------------------------------------------------------

    def name(self) -> str:
        short = self.op.split(".")[1] if self.op.startswith("aten.") else self.op
        return f"{short}{VARIANT_WORDS[self.case.variant]} [{self.case.dtype}]"

    def setting(self, value) -> str:
        return f"{self.argument}={value!r}"

    # --- the calls ------------------------------------------------------------------------------

    def once(self, prepared: call.Prepared):
        """One call on the case's tensors (a fresh self for an in-place call), its result copied.

        An op may write an argument by contract (batch norm's running statistics
        in training mode): whatever a call wrote is put back, in the same
        tensors, so every call sees the values the first one saw.
        """
        tensors = dict(prepared.tensors)
        for path in prepared.written:
            tensors[path] = layouts.apply("contiguous", tensors[path].detach())
        before = call.snapshot(prepared.tensors)
        try:
            return _snapshot(calls.run(prepared, tensors))
        finally:
            with torch.no_grad():
                for path, t in prepared.tensors.items():
                    storage = call.storage_of(t)
                    if not torch.equal(cmp.bytes_of(storage), cmp.bytes_of(before[path])):
                        storage.copy_(before[path])

    # --- 1. A again ---------------------------------------------------------------------------

    def again(self, first, second, notes: list[str]) -> Finding | None:
        """A finding when the second A's bits differ from the first's, and A alone gives the same bits twice."""
        differs = cmp.compare(cmp.flatten(second), cmp.flatten(first), tolerance=table, bitwise=True)
        if not differs:
            return None
        third, fourth = self.once(self.a), self.once(self.a)
        if cmp.compare(cmp.flatten(fourth), cmp.flatten(third), tolerance=table, bitwise=True):
            notes.append(f"{self.name()} gives other bits for the same call without any change in between: nondeterministic, not judged")
            return None
        m = differs[0]
        summary = (f"{self.name()} gives other bits for {self.setting(self.old)} after a call with "
                   f"{self.setting(self.new)} than before it: {where(m)} was {m.expected}, then {m.actual}")
        return self.finding(summary, m, check=AGAIN)

    # --- the finding ------------------------------------------------------------------------------

    def finding(self, summary: str, mismatch: Mismatch, *, check: str) -> Finding:
        spec = call.call_spec(self.a, calls.ran(self.a), self.function_name)
        judged = {AGAIN: "A again differs from A", STALE: f"B judged against its {self.b_reference} reference",
                  DTYPES: "B judged against its dtype reference"}[check]
        sentence = f"A: {self.setting(self.old)}, then B: {self.setting(self.new)}, then A again; {judged}"
        return calls.finding(self.case, kind="stale_result", reference="repeat", op=self.op, summary=summary,
                             mismatch=mismatch, call_spec=spec, detail=sentence, data=encode_detail(self.detail(check)))


def retyped(prepared: call.Prepared, dtype: torch.dtype, other: torch.dtype, *, device: str = "cpu") -> call.Prepared:
    """``prepared`` on ``device`` with every tensor and dtype argument of ``dtype`` in ``other``, in fresh storages."""
    tensors = {p: layouts.apply("contiguous", t.detach().to(device).to(other) if t.dtype == dtype else t.detach().to(device))
               for p, t in prepared.tensors.items()}

    def move(value):
        if isinstance(value, torch.dtype) and value == dtype:
            return other
        return torch.device(device) if isinstance(value, torch.device) else value

    case = dataclasses.replace(prepared.case, device=device)
    moved = dataclasses.replace(prepared, case=case, args=tree.map_values(prepared.args, move),
                                kwargs=tree.map_values(prepared.kwargs, move))
    return calls.with_tensors(moved, tensors)


def where(m: Mismatch) -> str:
    """The leaf and index of a mismatch, as a summary says it: ``out [0, 1]``."""
    return f"{m.path} {list(m.worst_index)}" if m.worst_index else m.path


def _snapshot(value):
    """A copy of a result's tensors, taken right away: a cache may hand the same tensor out again."""
    return tree.map_values(value, lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v)
