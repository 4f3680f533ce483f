"""The number form (``repeat:alpha=0.5``): A again, and B's result is B's, judged against a reference no cache can hold.

Design note. See oracle.py's design note for why B's reference is made
from inputs no other call has used: nudged float64 (complex128) copies for
a floating case, judged with the precision reference's rule and the op's
measured sensitivity; another integer dtype, or the CPU, for an integer or
bool case, judged exactly. B is stale at an element where it disagrees with
that reference, holds A's bits, and (for a nudged reference) A's reference
disagrees with B's there too.
"""

from __future__ import annotations

import functools
import hashlib

import torch

from ...dtypes import is_inexact, unit_roundoff, wide
from ...dtypes import name as dtype_name
from ...judge import calls
from ...judge import compare as cmp
from ...judge.context import Context
from ...judge.verdict import one_line
from ...judge.records import Finding, Mismatch, Outcome
from ...judge.tolerance import PRECISION_MARGIN, Tolerance, table
from ...run import call
from ...run.evidence import Evidence
from ...run.facts import STORAGE_DEFINED
from ...run.references import Reference, References
from .detail import CPU, INTEGER, NUDGED, STALE, Detail, source_literal
from .repetition import Repetition, Skip, retyped, where

# The integer dtype an integer case's reference computes in: another than the case's.
OTHER_INTEGER = {torch.int64: torch.int32}


class NumberRepetition(Repetition):
    """A, B with one number argument changed, A again."""

    def judge(self) -> Outcome:
        if self.facts.uninitialized:
            raise Skip("the result is uninitialized memory (an empty* factory): its values say nothing")
        try:
            first = self.once(self.a)
        except Exception as e:
            raise Skip(one_line(e), "raised") from None
        try:
            b = self.once(self.b)
        except Exception as e:
            raise Skip(f"the call with {self.setting(self.new)} raises: {one_line(e)}") from None
        second = self.once(self.a)
        notes: list[str] = []
        found = self.again(first, second, notes)
        if found is None:
            found = self.stale(first, b, notes)
        if found is not None:
            return Outcome(case=self.case, status="finding", findings=(found,))
        return Outcome(case=self.case, status="pass", reason="; ".join(notes))

    @functools.cached_property
    def b_reference(self) -> str:
        """How B's cache-free reference is made; "" when B has none (a random op, one defined by its storage, a bool on the CPU)."""
        if self.facts.random or self.defined_by_storage:
            return ""
        return b_reference_for(self.dtype, self.case.device)

    @property
    def defined_by_storage(self) -> bool:
        """Whether the op's result is defined by its storage (as_strided): fresh storages give another."""
        return self.case.op.split(".")[0] in STORAGE_DEFINED

    def detail(self, check: str) -> Detail:
        reference_dtype = reference_dtype_for(self.b_reference, self.dtype)
        return Detail(check=check, argument=self.change.argument, a_number=source_literal(self.old), b_number=source_literal(self.new),
                      b_reference=self.b_reference, reference_dtype="" if reference_dtype is None else dtype_name(reference_dtype))

    # --- 2. B is B's --------------------------------------------------------------------------------

    def stale(self, first, b, notes: list[str]) -> Finding | None:
        """A finding when B holds A's result where B's reference says otherwise (and the number matters there)."""
        if self.facts.random:
            notes.append("a random op has no reference that draws the same numbers from other inputs: only A again was judged")
            return None
        if self.defined_by_storage:
            notes.append("the op's result is defined by its storage, which another dtype's copy does not have: only A again was judged")
            return None
        reference = self.b_reference
        if not reference:
            notes.append(f"no cache-free reference for {self.case.dtype} on the CPU: only A again was judged")
            return None
        mismatch = self.against_reference(b)
        if mismatch is None:
            return None
        a_leaf, b_leaf = dict(cmp.flatten(first)).get(mismatch.path), dict(cmp.flatten(b)).get(mismatch.path)
        if not _same_bits(a_leaf, b_leaf):
            notes.append(f"with {self.setting(self.new)} {mismatch.path} disagrees with its {reference} reference "
                         f"({mismatch.describe()}) but is not A's result: not a stale result")
            return None
        if reference == NUDGED and not self.matters(mismatch.path):
            notes.append(f"{self.setting(self.new)} and {self.setting(self.old)} have the same reference at {mismatch.path}: "
                         f"B may be A's result")
            return None
        summary = (f"{self.name()} returns the result of {self.setting(self.old)} when called again with "
                   f"{self.setting(self.new)}: {where(mismatch)} is {mismatch.actual}, its {reference} reference says {mismatch.expected}")
        return self.finding(summary, mismatch, check=STALE)

    def against_reference(self, result) -> Mismatch | None:
        """Where B's ``result`` disagrees with B's cache-free reference (see the design note)."""
        if self.b_reference == NUDGED:
            # two nudges first; a disagreement is checked again with four, whose spread measures
            # the op's sensitivity more surely (two nudges may land close together by chance)
            for count in (2, 4):
                ctx = self.nudged_context(result, nudges=count)
                mismatch = None if ctx is None else _beyond_precision(ctx, result)
                if mismatch is None:
                    return None
            return mismatch
        reference_dtype = reference_dtype_for(self.b_reference, self.dtype)
        other = retyped(self.b, self.dtype, self.dtype if reference_dtype is None else reference_dtype)
        try:
            value = _cast_like(calls.run(other), result)
        except Exception as e:
            raise Skip(f"the {self.b_reference} reference raised: {one_line(e)}") from None
        found = cmp.compare(cmp.flatten(result), cmp.flatten(value), tolerance=lambda d: Tolerance(atol=0.0, rtol=0.0))
        return found[0] if found else None

    def matters(self, path: str) -> bool:
        """Whether A's and B's nudged references differ at ``path`` beyond the precision rule.

        A's reference starts from other nudges than B's, so that the two never
        share input values, and so never a cache entry.
        """
        b = self.nudged_context(None, self.b, role="B", nudges=4)
        a = self.nudged_context(None, self.a, role="A", nudges=4)
        if a is None or b is None:
            return True
        a_value, b_value = dict(cmp.flatten(a.ev.refs.float64.value)).get(path), dict(cmp.flatten(b.ev.refs.float64.value)).get(path)
        if not isinstance(a_value, torch.Tensor) or not isinstance(b_value, torch.Tensor) or a_value.shape != b_value.shape:
            return True
        return _beyond_precision(b, {path: a_value.to(self.dtype)}, only=path) is not None

    def nudged_context(self, result, prepared: call.Prepared | None = None, *, role: str = "B", nudges: int = 2) -> Context | None:
        """A precision-reference context for the call (B's by default) whose float64 runs all start from nudged inputs.

        The reference is B in float64 (complex128) on the CPU with every floating
        input nudged by up to one unit of roundoff of the case's dtype (of
        float32, for float64 cases, so that the values do change): values no
        other call has used, in fresh storages, so no cache, however keyed,
        holds it. The other, independent nudges measure the op's sensitivity
        (the k_i of judge.tolerance) against the first.
        """
        prepared = self.b if prepared is None else prepared
        seed = _nudge_seed(f"{self.case.id}|{role}")
        refs = References(prepared, self.dtype, seed=seed)  # its jump probe draws from the seed too
        refs.__dict__["float64"] = Reference(value=None)  # only its being there is asked for: the unnudged run is never made
        # a nudge of float64's own roundoff would leave a float64 value as it is: at least float32's
        scale = max(1.0, unit_roundoff(torch.float32) / unit_roundoff(self.dtype))
        nudged = refs._nudged((scale,) * nudges, seeds=tuple(seed + 3 + i for i in range(nudges)))
        if len(nudged) < nudges:
            return None
        refs.__dict__["float64"], refs.__dict__["perturbed"] = nudged[0], nudged[1:]
        evidence = Evidence(prepared, calls.ran(prepared), refs, self.facts, function_name=self.function_name)
        evidence.__dict__["op"] = self.op
        evidence.ran.result = result
        return Context(evidence, self.subject.override)


def b_reference_for(dtype: torch.dtype, device: str) -> str:
    """How B's cache-free reference is made for a case of ``dtype`` on ``device``; "" when it cannot be."""
    if is_inexact(dtype):
        return NUDGED
    if torch.device(device).type != "cpu":
        return CPU
    return "" if dtype == torch.bool else INTEGER


def reference_dtype_for(b_reference: str, dtype: torch.dtype) -> torch.dtype | None:
    """The dtype B's reference computes in; None for the case's own."""
    if b_reference == NUDGED:
        return wide(dtype)
    if b_reference == INTEGER:
        return OTHER_INTEGER.get(dtype, torch.int64)
    return None


def _beyond_precision(ctx: Context, result, *, only: str | None = None) -> Mismatch | None:
    """The precision reference's rule (judge.verdict.precision), for every dtype float64 included.

    ``result`` against ``ctx``'s float64 reference rounded to its dtypes, with
    the declared canonicalisers (the signs of singular vectors, ties) applied;
    ``only``: that leaf alone.
    """
    actual = cmp.flatten(result)
    dtypes = {p: v.dtype for p, v in actual if isinstance(v, torch.Tensor)}
    expected = [(p, v.detach().cpu().to(dtypes[p]) if isinstance(v, torch.Tensor) and p in dtypes else v)
                for p, v in cmp.flatten(ctx.ev.refs.float64.value) if only is None or p == only]

    def tolerance(dtype: torch.dtype) -> Tolerance:
        table_tolerance = ctx.tolerance(dtype)
        return Tolerance(atol=PRECISION_MARGIN * table_tolerance.atol, rtol=PRECISION_MARGIN * table_tolerance.rtol)

    found = cmp.compare(actual, expected, tolerance=tolerance)
    for jumps in (False, True):  # the slack's float64 runs only if needed, as the judge does
        if found:
            slack = {p: PRECISION_MARGIN * v for p, v in (ctx.slack(1.0, jumps=jumps) or {}).items()}
            found = ctx.canonical(cmp.compare(actual, expected, tolerance=tolerance, slack=slack), actual, expected, slack)
    return found[0] if found else None


def _nudge_seed(text: str) -> int:
    """A nudge seed of its own for each case and role: no two cases' references share their inputs
    (a cache keyed on values would serve one case's reference to another)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def _cast_like(value, like):
    """``value``'s leaves, tensors in the dtypes of ``like``'s matching ones."""
    targets = dict(cmp.flatten(like))
    found = {}
    for path, v in cmp.flatten(value):
        target = targets.get(path)
        found[path] = v.to(target.dtype) if isinstance(v, torch.Tensor) and isinstance(target, torch.Tensor) else v
    return found


def _same_bits(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and cmp.compare_leaf("x", a, b, tolerance=table, bitwise=True) is None
    return type(a) is type(b) and a == b
