"""The ``large`` oracle's element probes: a pointwise call on arguments tiled past 2^31, 2^32 elements or 2^31 bytes.

Design note (the whole of it is large.oracle's, before "Reductions"). The
call's tensor arguments are broadcast, flattened and cut to an odd number
of distinct values, tiled to the probe's length (large.bounds), and the
call is made once; its result is read at ``bounds.positions`` and compared
with the same call on the short tensor of the distinct values, at the value
each position holds. A finding's ``Detail`` (large.detail) is the length,
the values tiled and the positions read: what its script makes again.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...cases import opinfo
from ...cases.records import VARIANT_WORDS
from ...judge import calls
from ...judge import compare as cmp
from ...judge.verdict import one_line
from ...judge.plugin import encode_detail
from ...judge.records import Mismatch, Outcome
from ...judge.tolerance import table
from ...run import call
from ...run.facts import facts as read_facts
from ...run.opclass import computation
from ...run.samples import samples_of
from . import bounds
from .detail import Detail


def run(subject) -> Outcome:
    """An element probe (``large:2^31``, ``large:2^32``, ``large:bytes``) of a pointwise call."""
    case = subject.case
    refs = subject.base()
    if not refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(refs.contiguous.error))
    kind = computation(refs.trace, subject.entry)
    if kind != "pointwise":
        return Outcome(case=case, status="skip", reason=kind if kind != "reduction" else "a reduction: the large probes take pointwise ops")
    op = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=case.op).op
    prepared = _tileable(case, subject)
    if prepared is None:
        return Outcome(case=case, status="skip", reason="no sample of the op has a dimensioned tensor of 3 values or more to tile")
    return _Probe(subject, prepared, op).outcome()


def _tileable(case, subject) -> call.Prepared | None:
    """The case's call, on its own sample or else the op's first with values enough to tile.

    The probes run on the first sample; many ops' first sample is a 0-dim
    tensor, and which values are tiled matters less than that there are some.
    A replay (same id) picks the same sample again.
    """
    candidates = [subject.sample] + ([] if case.edits else samples_of(case.op, case.dtype))
    for sample in candidates:
        prepared = call.prepare(calls.plain(case), subject.function, sample)
        if any(t.dim() > 0 and t.numel() >= 3 for t in prepared.tensors.values()):
            return prepared
    return None


class _Skip(Exception):
    pass


class _Probe:
    def __init__(self, subject, prepared: call.Prepared, op: str):
        self.subject, self.case, self.prepared, self.op = subject, subject.case, prepared, op
        self.function_name = opinfo.public_name(subject.entry, "functional")

    def outcome(self) -> Outcome:
        try:
            return self._judge()
        except _Skip as e:
            return Outcome(case=self.case, status="skip", reason=str(e))

    def _judge(self) -> Outcome:
        tensors = {p: t for p, t in self.prepared.tensors.items() if t.dim() > 0}
        if not tensors:
            raise _Skip("the call has no dimensioned tensor argument to tile")
        try:
            shape = torch.broadcast_shapes(*(t.shape for t in tensors.values()))
        except RuntimeError:
            raise _Skip("its tensor arguments do not broadcast together") from None
        if shape.numel() == 0:
            raise _Skip("its tensor arguments are empty")
        distinct = min(shape.numel(), bounds.DISTINCT)
        distinct -= 1 - distinct % 2  # odd: see bounds.DISTINCT
        if distinct < 3:
            raise _Skip("the sample has too few values: a position read through a wrapped offset would hold the same one")
        values = {p: t.detach().expand(shape).reshape(-1)[:distinct].contiguous() for p, t in tensors.items()}
        short = self._call({**self.prepared.tensors, **values}, "the short call")
        for path, value in short:
            if not isinstance(value, torch.Tensor) or value.shape != (distinct,):
                raise _Skip(f"its result {path} is not shaped like its arguments: not elementwise")
        name = self.case.oracle.split(":", 1)[1]
        itemsize = max(t.element_size() for t in values.values())
        n = bounds.PROBES[name](itemsize)
        need = n * (sum(t.element_size() for t in values.values()) + sum(v.element_size() for _, v in short))
        self._fits(need)
        big = {p: t.repeat(-(-n // distinct))[:n] for p, t in values.items()}
        try:
            actual = self._call({**self.prepared.tensors, **big}, f"the call of {n} elements")
            positions = bounds.positions(n).to(next(iter(big.values())).device)
            picked_actual = [(p, v.reshape(-1)[positions].clone()) for p, v in actual]
        finally:
            del big
        at = positions % distinct
        picked_expected = [(p, v[at]) for p, v in short]
        picked = calls.with_tensors(self.prepared, {**self.prepared.tensors, **{p: t[at] for p, t in values.items()}})
        return self._verdict(name, n, distinct, positions, picked, picked_actual, picked_expected)

    def _call(self, tensors: dict, what: str):
        try:
            return calls.leaves(calls.run(self.prepared, tensors))
        except torch.OutOfMemoryError:
            raise _Skip(f"{what} ran out of memory") from None
        except Exception as e:
            raise _Skip(f"{what} raised where the sample's did not: {one_line(e)}") from None

    def _fits(self, need: int) -> None:
        short = bounds.short_of_memory(self.case.device, need)
        if short:
            raise _Skip(short)

    def _verdict(self, name, n, distinct, positions, picked, actual, expected) -> Outcome:
        tolerance = lambda dtype: table(dtype, self.subject.override)  # noqa: E731
        ulps, hard = 0, None
        for (path, a), (_, e) in zip(actual, expected):
            if cmp.compare_leaf(path, a, e, tolerance=tolerance, bitwise=True) is None:
                continue
            changed = calls.class_change(a, e, signed_zero=True)
            if bool(changed.any()):
                hard = hard or _mismatch(path, a, e, changed, positions, tolerance)
            if a.is_floating_point() or a.is_complex():
                ulps = max(ulps, int(calls.ulps(a, e).max()))
        if hard is None and ulps:
            judged = calls.Judged(picked, dict(actual) if len(actual) > 1 else actual[0][1], override=self.subject.override,
                                  function_name=self.function_name, op=self.op)
            found = judged.differs(dict(expected) if len(expected) > 1 else expected[0][1])
            hard = found[0] if found else None
            if hard is not None and hard.worst_index:
                hard = _at_position(hard, positions)
        if hard is None:
            reason = f"{n} elements, read at {len(positions)} positions"
            if ulps:
                reason += f"; bits differ by up to {ulps} ULP from the short call, within tolerance"
            return Outcome(case=self.case, status="pass", reason=reason)
        short = self.op.split(".")[1] if self.op.startswith("aten.") else self.op
        summary = (f"{short}{VARIANT_WORDS[self.case.variant]} [{self.case.dtype}] on {n} elements ({bounds.boundary(name)}) "
                   f"gives element {list(hard.worst_index)} {hard.actual} where the same value in a short tensor gives {hard.expected}")
        spec = call.call_spec(self.prepared, calls.ran(self.prepared), self.function_name)
        detail = Detail(probe="elements", elements=n, distinct=distinct, positions=tuple(positions.tolist()))
        finding = calls.finding(self.case, kind="large_size", reference="large", op=self.op, summary=summary, mismatch=hard,
                                call_spec=spec, detail=f"{n} elements tiled from {distinct} values; positions read: "
                                                       f"{bounds.span(positions)}", data=encode_detail(detail))
        return Outcome(case=self.case, status="finding", findings=(finding,))


def _mismatch(path, a, e, changed, positions, tolerance) -> Mismatch:
    flat = int(changed.to(torch.uint8).argmax())
    tol = tolerance(a.dtype)
    inexact = a.is_floating_point() or a.is_complex()
    return Mismatch(path=path, attribute="values", expected=_fmt(e[flat]), actual=_fmt(a[flat]), mismatched=int(changed.sum()),
                    numel=a.numel(), worst_index=(int(positions[flat]),), max_abs_err=None,
                    atol=tol.atol if inexact else 0.0, rtol=tol.rtol if inexact else 0.0, allowed=0.0)


def _at_position(m: Mismatch, positions: torch.Tensor) -> Mismatch:
    """A mismatch found among the picked values, its index made the position in the large tensor."""
    return dataclasses.replace(m, worst_index=(int(positions[m.worst_index[0]]),))


def _fmt(x: torch.Tensor) -> str:
    value = x.item()
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
