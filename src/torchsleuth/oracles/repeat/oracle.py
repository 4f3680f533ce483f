"""The ``repeat`` oracle: a changed argument between two calls must not be ignored.

Design note. Kernels and backends cache: oneDNN primitives, cuDNN and
cuBLASLt plans, MPS graphs, a custom op's memo. A cache whose key leaves out
an argument returns the stale result of an earlier call. A case of this
oracle takes one Python number (or bool) of a sample's arguments (alpha,
exponent, min, negative_slope, dim, keepdim ...) and makes, on the same
tensors (a fresh copy of ``self`` for an in-place call),

* A: the call with the sample's arguments;
* B: the same call with that number changed (``changed``: ints one step
  toward zero or away from it, floats halved, bools flipped; the new value is
  in the case's oracle name, ``repeat:alpha=0.5``, so a replay needs only
  the id);
* A again;

and judges two things:

1. the second A gives the bits of the first (when A without B in between
   does so twice: an op that is nondeterministic by itself is noted, not
   reported);
2. B's result is B's: where B disagrees with a reference for B that no
   cache can hold, is bit for bit A's result there, and A's own such
   reference disagrees with B's there too (the number matters at that
   element), B was served A's result. A disagreement that is not A's result
   is noted, not reported: it is a question for the precision reference.

A reference no cache can hold is one computed from inputs no other call
has used. A cache keyed on the tensors' identity, storage or values would
serve any call on A's values, the main sweep's own float64 reference
included. So B's reference is B in float64 (complex128) on the CPU, in
fresh storages, with every floating input nudged by up to one unit of
roundoff of the case's dtype (of float32 for float64 and complex128 cases:
a nudge of float64's own roundoff leaves a value as it is), judged with the
precision reference's rule (float64 cases included); other, independent
nudges measure the op's sensitivity (judge.tolerance's k_i): one, and three
before a disagreement is believed. The nudges
are seeded by the case's id and the call's role, so that A's reference and
B's, or two cases' references, never share inputs.
An op that reads some floating input as exact (a target of +-1, a mask)
sees nudged values as other values: its two references then agree with
each other and nothing is reported. Integer cases are judged exactly
against B on the CPU in another integer dtype (int32 for int64, int64 for
the others), integer and bool cases off the CPU against B on the CPU. A bool
case on the CPU has no such reference, a random op none at all (other
inputs draw other numbers), and an op defined by its storage (as_strided)
none in fresh storages: for those only the first check is made, and the
outcome says so; uninitialized results (empty*) are not judged.

An op may write an argument by contract (batch norm's running statistics,
embedding's weight under max_norm): whatever a call writes is put back in
the same tensors after it, so each call sees what the first one saw.

Another dtype in between (``repeat:dtype=float64``): B is the same call with
every tensor of the case's dtype in another (``OTHER_DTYPE``), on the same
device, for a cache whose key leaves the dtype out. Judged: A again, as
above, and B's result has the dtypes the op gives for B's inputs (read off
the same call on the meta device, which no kernel cache serves).

Planned for the functional and in-place variants of every sample with such
numbers (one case each), and one dtype case per sample whose dtype has an
``OTHER_DTYPE``, with every argument contiguous.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import math
from typing import Any

import torch

from ..cases import layouts
from ..cases.records import VARIANT_WORDS
from ..dtypes import is_inexact, unit_roundoff
from ..judge import compare as cmp
from ..judge.context import Context
from ..judge.oracles import one_line
from ..judge.records import Mismatch, Outcome
from ..judge.tolerance import PRECISION_MARGIN, Tolerance, table
from ..run import call, tree
from ..run.evidence import Evidence
from ..run.facts import STORAGE_DEFINED
from ..run.facts import facts as read_facts
from ..run.references import Reference, References
from . import calls

DESCRIPTION = "a number argument changed between two calls is not ignored (a stale cached result)"

VARIANTS = ("functional", "inplace")
# The dtype B is made in, for the dtype case.
OTHER_DTYPE = {"float32": "float64", "float64": "float32", "float16": "float32", "bfloat16": "float32",
               "complex64": "complex128", "int64": "int32"}


def plan(unit, variant: str, sample: int) -> list[str]:
    if variant not in VARIANTS:
        return []
    from ..engine import samples_of  # cached: the engine has just made them

    s = samples_of(unit.op, unit.dtype)[sample]
    names = [f"repeat:{path}={_literal(changed(value))}" for path, value in numbers(s.args, s.kwargs)]
    return names + ([f"repeat:dtype={OTHER_DTYPE[unit.dtype]}"] if unit.dtype in OTHER_DTYPE else [])


def numbers(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The Python numbers and bools among a sample's arguments after the input, by path."""
    found = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [(path, value) for path, value in found if type(value) in (bool, int, float, complex)]


def changed(value):
    """The value B takes instead: near enough to stay valid, far enough to change the result."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value - 1 if value > 0 else value + 1
    if isinstance(value, float):
        if math.isnan(value):
            return 0.0
        if math.isinf(value):
            return math.copysign(1.0, value)
        return value / 2 if value else 0.5
    return value / 2 if value else complex(0.5, 0.5)


def _literal(value) -> str:
    text = repr(value)
    return text.replace(" ", "")


def parse(oracle: str) -> tuple[str, Any]:
    """``"repeat:alpha=0.5"`` -> ``("alpha", 0.5)``."""
    path, _, text = oracle.removeprefix("repeat:").rpartition("=")
    specials = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
    return path, specials[text] if text in specials else ast.literal_eval(text)


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts:
        return Outcome(case=case, status="skip", reason="the repeat oracle calls with contiguous arguments only")
    if case.oracle.startswith("repeat:dtype="):
        return _another_dtype(subject, case.oracle.split("=", 1)[1])
    path, new = parse(case.oracle)
    try:
        prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    except Exception as e:  # the sample's tensors cannot even be made (a sparse layout, say)
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(getattr(e, "error", e)))
    old = _get(prepared, path)
    if type(old) not in (bool, int, float, complex):
        return Outcome(case=case, status="skip", reason=f"this sample has no number argument {path}")
    if type(old) is not type(new) or old == new or (isinstance(old, float) and math.isnan(old) and math.isnan(new)):
        return Outcome(case=case, status="skip", reason=f"{path} is {old!r} in this sample, so changing it to {new!r} changes nothing")
    try:
        return _Repeat(subject, prepared, path, old, new).judge()
    except _Skip as e:
        return Outcome(case=case, status=e.status, reason=str(e))


def _another_dtype(subject, other: str) -> Outcome:
    """A, then B with every tensor of the case's dtype in ``other``, then A again (see the design note)."""
    case = subject.case
    try:
        prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    except Exception as e:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(getattr(e, "error", e)))
    dtype = getattr(torch, case.dtype)
    if not any(t.dtype == dtype for t in prepared.tensors.values()):
        return Outcome(case=case, status="skip", reason=f"no tensor of this sample is {case.dtype}")
    try:
        check = _Repeat(subject, prepared, "dtype", case.dtype, other)
        check.b = _retyped(prepared, dtype, getattr(torch, other), device=case.device)
        first = check.once(check.a)
        try:
            b = check.once(check.b)
        except Exception as e:
            raise _Skip(f"the call in {other} raises: {one_line(e)}") from None
        second = check.once(check.a)
    except _Skip as e:
        return Outcome(case=case, status=e.status, reason=str(e))
    except Exception as e:
        return Outcome(case=case, status="raised", reason=one_line(e))
    notes: list[str] = []
    found = check.again(first, second, notes) or _wrong_dtype(check, b, other, notes)
    if found is not None:
        return Outcome(case=case, status="finding", findings=(found,))
    return Outcome(case=case, status="pass", reason="; ".join(notes))


def _wrong_dtype(check: "_Repeat", b, other: str, notes: list[str]):
    """A finding when B's result has other dtypes than the op gives for B's inputs (the meta device says which)."""
    meta = _retyped(check.a, getattr(torch, check.case.dtype), getattr(torch, other), device="meta")
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
            summary = (f"{check.name()} returns a {str(value.dtype).removeprefix('torch.')} {path} for {other} inputs "
                       f"after a call in {check.case.dtype}, where the op gives {str(want.dtype).removeprefix('torch.')}")
            return check.finding(summary, m, check="dtype")
    return None


class _Skip(Exception):
    def __init__(self, reason: str, status: str = "skip"):
        super().__init__(reason)
        self.status = status


def _get(prepared: call.Prepared, path: str):
    if path.startswith("args["):
        index = int(path[5:-1]) + 1  # the call's first argument is the input
        return prepared.args[index] if index < len(prepared.args) else None
    return prepared.kwargs.get(path)


def _set(prepared: call.Prepared, path: str, value) -> call.Prepared:
    if path.startswith("args["):
        index = int(path[5:-1]) + 1
        args = prepared.args[:index] + (value,) + prepared.args[index + 1:]
        return dataclasses.replace(prepared, args=args)
    return dataclasses.replace(prepared, kwargs={**prepared.kwargs, path: value})


def _snapshot(value):
    """A copy of a result's tensors, taken right away: a cache may hand the same tensor out again."""
    return tree.map_values(value, lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v)


class _Repeat:
    def __init__(self, subject, prepared: call.Prepared, path: str, old, new):
        self.subject = subject
        self.case = subject.case
        self.a = prepared
        self.b = _set(prepared, path, new)
        self.path, self.old, self.new = path, old, new
        self.dtype = getattr(torch, self.case.dtype)
        try:
            refs = subject.base()
        except Exception as e:
            raise _Skip("the contiguous reference raised: " + one_line(getattr(e, "error", e)), "raised") from None
        if not refs.contiguous.ok:
            raise _Skip("the contiguous reference raised: " + one_line(refs.contiguous.error), "raised")
        self.facts = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=self.case.op)
        self.function_name = _public_name(subject)

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
        return f"{self.path}={value!r}"

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

    def judge(self) -> Outcome:
        if self.facts.uninitialized:
            raise _Skip("the result is uninitialized memory (an empty* factory): its values say nothing")
        try:
            first = self.once(self.a)
        except Exception as e:
            raise _Skip(one_line(e), "raised") from None
        try:
            b = self.once(self.b)
        except Exception as e:
            raise _Skip(f"the call with {self.setting(self.new)} raises: {one_line(e)}") from None
        second = self.once(self.a)
        notes: list[str] = []
        found = self.again(first, second, notes)
        if found is None:
            found = self.served(first, b, notes)
        if found is not None:
            return Outcome(case=self.case, status="finding", findings=(found,))
        return Outcome(case=self.case, status="pass", reason="; ".join(notes))

    # --- 1. A again ---------------------------------------------------------------------------

    def again(self, first, second, notes: list[str]):
        differs = cmp.compare(cmp.flatten(second), cmp.flatten(first), tolerance=table, bitwise=True)
        if not differs:
            return None
        third, fourth = self.once(self.a), self.once(self.a)
        if cmp.compare(cmp.flatten(fourth), cmp.flatten(third), tolerance=table, bitwise=True):
            notes.append(f"{self.name()} gives other bits for the same call without any change in between: nondeterministic, not judged")
            return None
        m = differs[0]
        summary = (f"{self.name()} gives other bits for {self.setting(self.old)} after a call with "
                   f"{self.setting(self.new)} than before it: {_where(m)} was {m.expected}, then {m.actual}")
        return self.finding(summary, m, check="again")

    # --- 2. B is B's --------------------------------------------------------------------------------

    def served(self, first, b, notes: list[str]):
        if self.facts.random:
            notes.append("a random op has no reference that draws the same numbers from other inputs: only A again was judged")
            return None
        if self.case.op.split(".")[0] in STORAGE_DEFINED:
            notes.append("the op's result is defined by its storage, which another dtype's copy does not have: only A again was judged")
            return None
        way = _way(self.dtype, self.case.device)
        if way is None:
            notes.append(f"no cache-free reference for {self.case.dtype} on the CPU: only A again was judged")
            return None
        mismatch = self.against_reference(b, way)
        if mismatch is None:
            return None
        a_leaf, b_leaf = dict(cmp.flatten(first)).get(mismatch.path), dict(cmp.flatten(b)).get(mismatch.path)
        if not _same_bits(a_leaf, b_leaf):
            notes.append(f"with {self.setting(self.new)} {mismatch.path} disagrees with its {way} reference "
                         f"({mismatch.describe()}) but is not A's result: not a stale result")
            return None
        if way == NUDGED and not self.matters(mismatch.path):
            notes.append(f"{self.setting(self.new)} and {self.setting(self.old)} have the same reference at {mismatch.path}: "
                         f"B may be A's result")
            return None
        summary = (f"{self.name()} returns the result of {self.setting(self.old)} when called again with "
                   f"{self.setting(self.new)}: {_where(mismatch)} is {mismatch.actual}, its {way} reference says {mismatch.expected}")
        return self.finding(summary, mismatch, check=way)

    def against_reference(self, result, way: str) -> Mismatch | None:
        """Where B's ``result`` disagrees with B's cache-free reference (see the design note)."""
        if way == NUDGED:
            # two nudges first; a disagreement is checked again with four, whose spread measures
            # the op's sensitivity more surely (two nudges may land close together by chance)
            for count in (2, 4):
                ctx = self.nudged_context(result, nudges=count)
                mismatch = None if ctx is None else _beyond_precision(ctx, result)
                if mismatch is None:
                    return None
            return mismatch
        other = _retyped(self.b, self.dtype, _OTHER_INTEGER.get(self.dtype, torch.int64)) if way == INT else _retyped(self.b, self.dtype, self.dtype)
        try:
            value = _cast_like(calls.run(other), result)
        except Exception as e:
            raise _Skip(f"the {way} reference raised: {one_line(e)}") from None
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
        seed = _seed(f"{self.case.id}|{role}")
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

    def finding(self, summary: str, mismatch: Mismatch, *, check: str):
        spec = call.call_spec(self.a, calls.ran(self.a), self.function_name)
        detail = (f"A: {self.setting(self.old)}, then B: {self.setting(self.new)}, then A again; "
                  f"{'A again differs from A' if check == 'again' else f'B judged against its {check} reference'}")
        return calls.finding(self.case, kind="stale_result", reference="repeat", op=self.op, summary=summary,
                             mismatch=mismatch, call_spec=spec, detail=detail)


def _beyond_precision(ctx: Context, result, *, only: str | None = None) -> Mismatch | None:
    """The precision reference's rule (judge.oracles.precision), for every dtype float64 included.

    ``result`` against ``ctx``'s float64 reference rounded to its dtypes, with
    the declared canonicalisers (the signs of singular vectors, ties) applied;
    ``only``: that leaf alone.
    """
    actual = cmp.flatten(result)
    dtypes = {p: v.dtype for p, v in actual if isinstance(v, torch.Tensor)}
    expected = [(p, v.detach().cpu().to(dtypes[p]) if isinstance(v, torch.Tensor) and p in dtypes else v)
                for p, v in cmp.flatten(ctx.ev.refs.float64.value) if only is None or p == only]
    tolerance = lambda d: Tolerance(atol=PRECISION_MARGIN * ctx.tolerance(d).atol, rtol=PRECISION_MARGIN * ctx.tolerance(d).rtol)
    found = cmp.compare(actual, expected, tolerance=tolerance)
    for jumps in (False, True):  # the slack's float64 runs only if needed, as the judge does
        if found:
            slack = {p: PRECISION_MARGIN * v for p, v in (ctx.slack(1.0, jumps=jumps) or {}).items()}
            found = ctx.canonical(cmp.compare(actual, expected, tolerance=tolerance, slack=slack), actual, expected, slack)
    return found[0] if found else None


# How B's reference is made (see the design note).
NUDGED, INT, CPU = "nudged float64", "int", "CPU"


def _seed(text: str) -> int:
    """A nudge seed of its own for each case and role: no two cases' references share their inputs
    (a cache keyed on values would serve one case's reference to another)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
_OTHER_INTEGER = {torch.int64: torch.int32}


def _way(dtype: torch.dtype, device: str) -> str | None:
    """How B's cache-free reference is made; None: it cannot be."""
    if is_inexact(dtype):
        return NUDGED
    if torch.device(device).type != "cpu":
        return CPU
    return None if dtype == torch.bool else INT


def _retyped(prepared: call.Prepared, dtype: torch.dtype, other: torch.dtype, *, device: str = "cpu") -> call.Prepared:
    """``prepared`` on ``device`` with every tensor and dtype argument of ``dtype`` in ``other``, in fresh storages."""
    tensors = {p: layouts.apply("contiguous", t.detach().to(device).to(other) if t.dtype == dtype else t.detach().to(device))
               for p, t in prepared.tensors.items()}
    move = lambda v: other if isinstance(v, torch.dtype) and v == dtype else (torch.device(device) if isinstance(v, torch.device) else v)
    case = dataclasses.replace(prepared.case, device=device)
    moved = dataclasses.replace(prepared, case=case, args=tree.map_values(prepared.args, move), kwargs=tree.map_values(prepared.kwargs, move))
    return calls.with_tensors(moved, tensors)


def _cast_like(value, like):
    """``value``'s leaves, tensors in the dtypes of ``like``'s matching ones."""
    kinds = dict(cmp.flatten(like))
    found = {}
    for path, v in cmp.flatten(value):
        target = kinds.get(path)
        found[path] = v.to(target.dtype) if isinstance(v, torch.Tensor) and isinstance(target, torch.Tensor) else v
    return found


def _same_bits(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and cmp.compare_leaf("x", a, b, tolerance=table, bitwise=True) is None
    return type(a) is type(b) and a == b


def _where(m: Mismatch) -> str:
    return f"{m.path} {list(m.worst_index)}" if m.worst_index else m.path


def _public_name(subject) -> str:
    from ..cases import opinfo

    return opinfo.public_name(subject.entry, subject.case.variant)


def repro(finding, torch_version: str) -> str | None:
    from .repeat_repro import script

    return script(finding, torch_version)
