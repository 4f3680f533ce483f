"""The dtype form (``repeat:dtype=float64``): A, then B with every tensor of the case's dtype in another, then A again.

Design note. For a cache whose key leaves the dtype out. Judged: A again
(repetition.Repetition.again), and B's result has the dtypes the op gives
for B's inputs, read off the same call on the meta device, which no kernel
cache serves. An op without a meta kernel gets the first check only.
"""

from __future__ import annotations

import torch

from ...judge import calls
from ...judge import compare as cmp
from ...judge.verdict import one_line
from ...judge.records import Finding, Mismatch, Outcome
from ...run import call, tree
from .detail import DTYPES, Change, Detail
from .repetition import Repetition, Skip, retyped


def judge(subject, change: Change) -> Outcome:
    """The dtype case's outcome (``change.dtype``: B's dtype)."""
    case = subject.case
    try:
        prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    except Exception as e:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(getattr(e, "error", e)))
    dtype = getattr(torch, case.dtype)
    if not any(t.dtype == dtype for t in prepared.tensors.values()):
        return Outcome(case=case, status="skip", reason=f"no tensor of this sample is {case.dtype}")
    try:
        repetition = DtypeRepetition(subject, prepared, change)
        first, b, second = repetition.calls()
    except Skip as e:
        return Outcome(case=case, status=e.status, reason=str(e))
    except Exception as e:
        return Outcome(case=case, status="raised", reason=one_line(e))
    return repetition.verdict(first, b, second)


class DtypeRepetition(Repetition):
    """A, B in another dtype on the case's device, A again."""

    def __init__(self, subject, a: call.Prepared, change: Change):
        super().__init__(subject, a, a, change, subject.case.dtype)
        self.b = retyped(a, self.dtype, getattr(torch, change.dtype), device=self.case.device)

    def judge(self) -> Outcome:
        return self.verdict(*self.calls())

    def calls(self) -> tuple:
        """A, B, A again: their results (a call of A that raises raises; B's is a Skip)."""
        first = self.once(self.a)
        try:
            b = self.once(self.b)
        except Exception as e:
            raise Skip(f"the call in {self.change.dtype} raises: {one_line(e)}") from None
        return first, b, self.once(self.a)

    def verdict(self, first, b, second) -> Outcome:
        notes: list[str] = []
        found = self.again(first, second, notes) or self.wrong_dtype(b, notes)
        if found is not None:
            return Outcome(case=self.case, status="finding", findings=(found,))
        return Outcome(case=self.case, status="pass", reason="; ".join(notes))

    def detail(self, check: str) -> Detail:
        return Detail(check=check, b_dtype=self.change.dtype)

    def wrong_dtype(self, b, notes: list[str]) -> Finding | None:
        """A finding when B's result has other dtypes than the op gives for B's inputs (the meta device says which)."""
        other = self.change.dtype
        meta = retyped(self.a, self.dtype, getattr(torch, other), device="meta")
        try:  # the call itself: the meta device has no generator to seed and nothing to synchronise
            args, kwargs = tree.replace_call(meta.args, meta.kwargs, meta.tensors)
            expected = dict(cmp.flatten(meta.function(*args, **kwargs)))
        except Exception:
            notes.append("the op has no meta kernel to say B's dtypes: only A again was judged")
            return None
        for path, value in cmp.flatten(b):
            want = expected.get(path)
            if isinstance(value, torch.Tensor) and isinstance(want, torch.Tensor) and value.dtype != want.dtype:
                m = Mismatch(path=path, attribute="dtype", expected=str(want.dtype), actual=str(value.dtype))
                summary = (f"{self.name()} returns a {str(value.dtype).removeprefix('torch.')} {path} for {other} inputs "
                           f"after a call in {self.case.dtype}, where the op gives {str(want.dtype).removeprefix('torch.')}")
                return self.finding(summary, m, check=DTYPES)
        return None
