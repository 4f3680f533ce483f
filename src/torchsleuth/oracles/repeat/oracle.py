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

The modules, each importing only those before it: ``detail`` (the
``Change`` a case's oracle name says, the ``Detail`` a finding carries),
``plan`` (which argument a case changes, and to what), ``repetition`` (the
three calls and the first check), ``number_form`` and ``dtype_form`` (each
form's second check), ``script`` (a finding's repro script, with the
script's own helpers in ``helpers``), and this one.
"""

from __future__ import annotations

import math

from ...judge import calls
from ...judge.verdict import one_line
from ...judge.plugin import Oracle, Subject
from ...judge.records import Outcome
from ...run import call
from . import dtype_form
from .detail import Change
from .number_form import NumberRepetition
from .plan import NUMBER_TYPES, number_at, plan, with_number
from .repetition import Skip
from .script import script

DESCRIPTION = "a number argument changed between two calls is not ignored (a stale cached result)"


def run(subject: Subject) -> Outcome:
    case = subject.case
    if case.layouts:
        return Outcome(case=case, status="skip", reason="the repeat oracle calls with contiguous arguments only")
    change = Change.parse(case.oracle)
    if change.dtype:
        return dtype_form.judge(subject, change)
    argument, new = change.argument, change.number
    try:
        prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    except Exception as e:  # the sample's tensors cannot even be made (a sparse layout, say)
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(getattr(e, "error", e)))
    old = number_at(prepared, argument)
    if type(old) not in NUMBER_TYPES:
        return Outcome(case=case, status="skip", reason=f"this sample has no number argument {argument}")
    if type(old) is not type(new) or old == new or (isinstance(old, float) and math.isnan(old) and math.isnan(new)):
        return Outcome(case=case, status="skip", reason=f"{argument} is {old!r} in this sample, so changing it to {new!r} changes nothing")
    try:
        return NumberRepetition(subject, prepared, with_number(prepared, argument, new), change, old).judge()
    except Skip as e:
        return Outcome(case=case, status=e.status, reason=str(e))


ORACLE = Oracle(name="repeat", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script)
