"""The ``sizes`` oracle: an element's result must not depend on the tensor around it.

Design note. For a pointwise op on one device, the result at an element is
a function of the arguments at that element alone: not of the tensor's
length, the element's position, the batch it sits in or where the storage
starts. CPU kernels have a vectorised body and a scalar tail, GPU kernels
block boundaries; a kernel whose body and tail disagree gives an element
another value in another tensor. A case of this oracle takes a sample's
values (run.lengths: broadcast, flattened, tiled) and computes

* each distinct value alone, as a length-1 tensor: the reference;
* every length of ``lengths.lengths(device)`` (1, 7, 8, 9, ... 257 on the
  CPU; up to 65537 on a GPU), each in a fresh storage;
* the longest length at a storage offset that breaks vector alignment;
* every length but 1 again in each layout form (run.lengths, laid out by
  cases.layouts as the main sweep lays out its ``strided`` and
  ``transposed`` cases, gaps poisoned): strided, every other element of a
  buffer twice as long; transposed, an ``n x 2`` grid in column-major
  order, so the op walks columns of ``n``; and, when the call has several
  tiled arguments, the same grid with only the first one transposed;
* the sample's own call, flattened;

and compares every element with the same value alone, bit for bit.

Layout. Issue 6 asks that an element's result not depend on its layout
either. A CPU kernel given a strided operand leaves the vectorised loop for
a scalar or gathered one with a tail of its own; a CUDA kernel leaves its
vectorised loads for an offset calculator. The forms are configurations of
the one ``sizes`` case, not cases of their own: they share its most
expensive part, each distinct value computed alone, so the case count per
op stays one per sample, and a finding's summary names the form and the
lengths ("wrong at strided lengths 7, 9, ... (every other element)"). Every
operand transposed alike is what TensorIterator reorders back into one
contiguous run (on the CPU it behaves as length ``2n``); operands with
different strides (``transposed-first``) are what reach the strided inner
loop, so both are there. A form the op refuses (it raises) is left out and
named in the outcome's reason: a loud error is not this oracle's class.

Policy. PyTorch computes the body and the tail of some kernels differently
on purpose: on the CPU, sigmoid, sinh, cosh, exp2, gelu, silu, mish and
softplus take SLEEF's vectorised functions in the body and libm in the tail,
about one unit in the last place (ULP) apart in float32 and float64. So a
bitwise difference is a finding only when

* it exceeds the op's tolerance (judge.tolerance: the table, widened by the
  op's measured sensitivity to rounding, as the layout reference does for
  two rounded results; the sensitivity is measured once, on the sample's own
  call, and indexed by value, so a value gets one verdict wherever it sits),
  or
* it changes the class of the value: NaN against a number, an infinity
  against anything else, +0 against -0 (pointwise ops only: IEEE defines the
  sign of every zero an arithmetic op returns, so the two paths owe the same
  one; not for an op that picks one of its arguments by comparison, clamp
  or maximum, where -0 and +0 tie and either is the result:
  judge.canonical.ZERO_TIE_OPS), or any difference at all in an integer or
  bool result.

A bitwise difference within tolerance is not a finding; the pass outcome's
reason says "bits differ by up to N ULP between length L and length 1 (the
element alone)", and whether NaNs differ in their sign or payload bits
(NaN on both sides is the same class), which bench/deep-sizes.md tallies.

Reductions get the same treatment where the contract allows: a batch of
independent rows (run.lengths.rows) must give each row what the row gives
alone, within the reduction's tolerance (summation order may differ, so
the rule's reduction-length term applies), NaN and infinity matching, and
integer results (argmax, count_nonzero) exactly. This needs the dims the
kernel reduces over, read off the call as the kernel receives it: a call
that reduces every element, or one whose dims mix signs, has no batch that
keeps its meaning, and is skipped with that reason; so is one whose kernel,
once the batch dim is there, reduces other dims than it should (Python
code that normalises ``dim`` before the kernel sees it).

Which ops are which is PyTorch's own word: pointwise when every op that
computes something in the call's trace is tagged ``torch.Tag.pointwise``,
or the OpInfo entry is a unary or binary ufunc (PyTorch's own tests call it
elementwise; ``rsub`` and ``floor_divide`` lack the tag), and no op is
``nondeterministic_seeded``; a reduction when one is tagged
``torch.Tag.reduction``. Planning is cheaper and looser (the OpInfo entry
is a ufunc or reduction class, or its aten name carries one of those tags);
a planned case the trace rules out is a skip with its reason.

Only the functional variant is planned, and only with every argument
contiguous: the oracle lays out its own tensors (above), so a shrunk or
diagnosed case that asks for a layout is skipped.

Where it is. This module plans and runs a case; sizes.probes makes the
configurations, sizes.judging judges them and words the outcome, and
sizes.script writes a finding's repro script from its ``Detail``
(sizes.detail).
"""

from __future__ import annotations

from ...judge import calls
from ...judge.canonical import ZERO_TIE_OPS
from ...judge.context import Context
from ...judge.plugin import Oracle
from ...judge.records import Outcome
from ...run import call
from ...search import edits
from ...run.facts import facts as read_facts
from ...run.opclass import computation, may_be_pointwise_or_reduction
from ...run.samples import samples_of
from . import probes, script
from .judging import Check, Skip

DESCRIPTION = "an element's result does not depend on the tensor's length, offset, layout or batch (pointwise ops, reductions)"


def plan(unit, variant: str, sample: int, option: str = "") -> list[str]:
    if variant != "functional" or not may_be_pointwise_or_reduction(unit.op):
        return []
    tensors = edits.tensors(samples_of(unit.op, unit.dtype)[sample])  # cached: the engine has just made them
    return ["sizes"] if any(t.numel() for t in tensors.values()) else []


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the sizes oracle lays out its own tensors (functional, contiguous cases only)")
    refs, raised = calls.base(subject)
    if raised is not None:
        return raised
    prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    kind = computation(refs.trace, subject.entry)
    if kind not in ("pointwise", "reduction"):
        return Outcome(case=case, status="skip", reason=kind)
    facts = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=case.op)
    check = Check(subject, prepared, facts.op)
    check.signed_zero = not ({*facts.names, Context.short_op(facts.op)} & ZERO_TIE_OPS)
    try:
        return probes.pointwise(check) if kind == "pointwise" else probes.reduction(check)
    except Skip as e:
        return Outcome(case=case, status="skip", reason=str(e))


ORACLE = Oracle(name="sizes", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script.script, on_values=True)
