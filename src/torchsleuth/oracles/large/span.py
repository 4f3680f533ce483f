"""The ``large`` oracle's span form: a dim just past 2^23 and 2^24 entries, where float32 index arithmetic goes wrong.

Design note. A kernel that computes an index, an offset or a scale in
float32 (an interpolation's source position, a pooling window's start, a
scan's or a sort's position, a normalisation's count) is exact while the
integers it holds are: up to 2^24, and up to 2^23 where it adds a half. One
entry past, ``float(i)`` rounds to a neighbour, and the element read or
written is another, silently. The probes ``large:span=L``, L in ``LENGTHS``
(2^23 + 3, 2^24 + 3: the indices 2^23 + 1 and 2^24 + 1 among them), take the case's own call with a dim of its input
tiled to L (each of its ``MAX_DIMS`` longest in turn, until one gives a
finding: which dim the op works along, its arguments say in their own ways) (search.edits' ``dim:input@D>L``, entry i holding entry i mod
its size, so a neighbour holds another value) and judge it as the ops
engine judges any case, as the reductions' lengths are (large.stretched):
against the same call on the CPU (the device reference, off the CPU) and
against float64 (the precision reference); past the run's time target's
deadline no further dim is tried (run.deadline.passed). Both are one call on a tensor of
L entries: the cheap reference, no 2^31-element copy. Off the CPU, float64
and the tolerance rule's nudged float64 runs of such a call are made on the
device under test (run.references.WIDE_ON_DEVICE): on the CPU they were 10
to 25 s a probe on an H100's host (bench/cuda-pointed.md), and the CPU's
float32 call, one call, stays the reference the device's kernel is checked
against.

Which ops: every op that is not a ufunc (those have the element probes)
and whose call's trace computes something that is neither pointwise nor
random nor a view (large.stretched's rows say the same): reductions, scans,
softmax and the normalisations, sorts, flips and rolls, pooling,
interpolation, gathers. A tensor whose other dims hold more than one entry
would make ``L`` times as many elements; past ``MAX_ELEMENTS`` those dims are
narrowed to one entry first (``dim:input@d>1``); a call that then raises
(an argument tied to a narrowed dim) is loud, not a finding. The results
are bounded too: two small calls, the dim at its own size and at twice it,
say how many result elements each entry adds (bicubic interpolation to a
3 x 3 image adds nine for each entry of its channel dim, none for one of
its spatial dims), and a dim whose results would pass ``MAX_ELEMENTS`` is
skipped, saying so: its float64 runs took most of a minute on an H100
(bench/time-target.md) and test a batch index the element probes test.

One dtype: float32 (``DTYPE``). An index is computed the same way in a
kernel's every dtype, and each probe costs seconds on the CPU, so the other
dtypes are left to the other probes; an op without float32 gets no span
probe.

Memory: the input, its result, the CPU's copy and the float64 ones (eight
bytes an element, ``WIDE_COPIES`` of them) must fit where each is made (large.bounds'
``short_of_memory``, on the device and on the CPU); else the probe is a skip
saying how much it needs. Tests move ``LENGTHS`` down (2^11 + 3, where a
float16 index goes wrong): everything here reads it when called.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from ...judge import calls
from ...judge.records import Outcome
from ...run import call, deadline
from ...search import edits
from . import bounds, stretched

# Just past where float32 stops holding every integer (2^24 + 1 is the first it rounds) and every half-integer (2^23 + 0.5).
LENGTHS = ((1 << 23) + 3, (1 << 24) + 3)
# The most elements a span probe's input may hold (2^26 float32: 256 MiB); past it the other dims are narrowed to one.
MAX_ELEMENTS = 1 << 26
# The one dtype span probes are planned in (see the design note).
DTYPE = "float32"
# The input's dims tried, longest first (which dim the op works along, the call's arguments say in their own ways).
MAX_DIMS = 3
# Bytes per element of the input's dtype that a probe holds at once, besides the float64 reference's eight on the CPU:
# the input, its result, and the CPU's copy of both.
COPIES = 4
# float64 copies (eight bytes an element) a probe may hold at once where its float64 runs are made: the input, the result,
# the nudged runs' results (run.references); on the device under test off the CPU.
WIDE_COPIES = 5


def span(case, subject, length: int) -> Outcome:
    """The case with a dim of its input tiled to ``length`` entries (each of its MAX_DIMS longest in turn, until one gives a
    finding), judged as any case (see the design note)."""
    passed_over = stretched.passed_over_for(case, subject, "span")
    if passed_over is not None:
        return passed_over
    x = edits.tensors(subject.sample).get("input")
    if x is None or x.dim() == 0 or x.numel() <= 1:
        return Outcome(case=case, status="skip", reason="the sample has no input with a dim to stretch")
    judged, untried = [], ""
    dims = sorted((d for d in range(x.dim()) if x.shape[d] > 1), key=lambda d: -x.shape[d])[:MAX_DIMS]
    last = 0.0  # the seconds the last dim took: the next one, as long, must end by the run's deadline
    for position, dim in enumerate(dims):
        if judged and deadline.passed(last):  # the run's time target: the dims left are said, not tried (run.deadline)
            untried = f"; dims {', '.join(map(str, dims[position:]))} left untried: the time target ran out"
            break
        began = time.monotonic()
        outcome = _along(case, subject, x, dim, length)
        last = time.monotonic() - began
        if outcome.findings:
            return outcome
        judged.append(outcome)
    if not judged:
        return Outcome(case=case, status="skip", reason="the sample's input has no dim of two entries or more to stretch")
    passed = [o for o in judged if o.status == "pass"]
    return Outcome(case=case, status="pass" if passed else judged[0].status, reason="; ".join(o.reason for o in judged) + untried)


def _along(case, subject, x, dim: int, length: int) -> Outcome:
    """The case with dim ``dim`` of its input tiled to ``length`` (the other dims narrowed to one past MAX_ELEMENTS)."""
    per_entry = x.numel() // x.shape[dim]
    narrowed = ()
    if per_entry * length > MAX_ELEMENTS:
        narrowed = tuple(edits.stretch("input", d, 1) for d in range(x.dim()) if d != dim and x.shape[d] > 1)
        per_entry = 1
    elements = per_entry * length
    results = _results(case, subject, narrowed, dim, x.shape[dim], length)
    if results > MAX_ELEMENTS:
        return Outcome(case=case, status="skip",
                       reason=f"its input {list(x.shape)} with dim {dim} tiled to {length}: its results would hold about {results} "
                              f"elements, past {MAX_ELEMENTS}")
    elements = max(elements, results)
    wide = elements * 8 * WIDE_COPIES
    short = (bounds.short_of_memory(case.device, elements * x.element_size() * COPIES + (wide if case.device != "cpu" else 0))
             or bounds.short_of_memory("cpu", elements * x.element_size() * 2 + (wide if case.device == "cpu" else 0)))
    if short:
        return Outcome(case=case, status="skip", reason=f"its input {list(x.shape)} with dim {dim} tiled to {length} {short}")
    longer = dataclasses.replace(case, oracle="", edits=case.edits + narrowed + (edits.stretch("input", dim, length),))
    judged = subject.replay(longer)
    reason = f"{longer.id}: {judged.reason}" if judged.reason else f"judged as {longer.id}"
    return Outcome(case=case, status=judged.status, reason=reason, findings=judged.findings)


def _results(case, subject, narrowed: tuple[str, ...], dim: int, size: int, length: int) -> int:
    """About how many elements the call's results hold with dim ``dim`` of its input tiled to ``length`` (the other dims
    ``narrowed``): the call with the dim at ``size`` entries and at twice that says how many each entry adds. 0 where
    either call raises (the probe's own call then says how)."""
    counts = []
    for entries in (size, 2 * size):
        sample = edits.apply(subject.sample, narrowed + (edits.stretch("input", dim, entries),))
        try:
            found = calls.leaves(calls.run(call.prepare(calls.plain(case), subject.function, sample)))
        except Exception:
            return 0
        counts.append(sum(value.numel() for _, value in found if isinstance(value, torch.Tensor)))
    return max(0, counts[0] + (counts[1] - counts[0]) * (length - size) // size)
