"""The compiled variant: the sweep's own cases (every variant and layout) compiled by inductor, judged as eager ones are.

Design note. Inductor's wrong outputs hide where eager's do: a transposed or
strided input, an in-place write into a view, an ``out=`` tensor, a
half-precision dtype. So the oracle picks some of the cases the engine planned
for a sample (``Oracle.pick``) and runs each through ``torch.compile(fn,
backend="inductor", fullgraph=True)`` on exactly the tensors the eager case
gets (same layouts, dtypes, values, searched values included), then hands the
run to the judge's own verdict (``judge.verdict.judge``, with
``Evidence.compiled``): the contracts (the in-place result written into
self's view, ``out=`` written, nothing outside a view touched, the returned
tensor the written one) and the references (eager on contiguous copies, and,
for the contiguous functional call, float64). A picked case's oracle name
says how it was compiled: ``compile:static`` (``dynamic=False``) or
``compile:dynamic`` (``dynamic=True``; where dynamo or inductor refuses
symbolic shapes for the call, it is compiled static and the outcome says so).

Noise. Inductor fuses, reorders reductions and keeps half-precision
intermediates in float32. Against eager, the judge's rule allows, per
element, what two independent roundings of the call allow (``scale=2``):
the table for the dtype, widened by the op's float64 sensitivity times
``sqrt(n)`` for a reduction over ``n`` elements accumulated in float32 (half
and bfloat16) or the dtype; so a reordered sum is judged by its length and
its dtype. A compiled result that differs from eager beyond that but is
within what the precision reference allows against float64 is no finding:
inductor's is the better rounding there, and eager's own error is the main
sweep's to find. Integer and bool results are exact, and random ops'
values are inductor's own draws: metadata and the draws' support only.

Budget. Compiling costs about a second a graph on the CPU, so the pick is a
fixed sample per op: the first ``ROUNDS`` rounds of an all-pairs cover of
layout x dtype x variant. Round ``r`` gives each of ``LAYOUTS`` once, layout
``i`` with dtype ``j = (i + r) mod |dtypes|`` and variant ``(i + j + r div
|dtypes|) mod |variants|``; where there are at least as many dtypes as
variants, ``|dtypes|`` rounds cover every pair of the three
factors. Round 1 compiles dynamic, the others static. Each unit (one dtype)
takes its tuples, spread over its swept samples; a tuple whose layout does
not apply to its sample (permuted needs 3-D) or whose variant the op lacks
compiles the nearest case the sample has (``_realized``). So at most
``ROUNDS * len(LAYOUTS)`` (24) from the cover.
The op's ``k``-th tuple is compiled on its ``k mod count``-th swept
sample (in its dtype's unit): an op with up to 24 samples has each of them
compiled once or more, in one dtype or another (the negative indices of
``take`` are in its second sample, the non-power-of-two reductions of
``sum`` past its eighth).

Searched values: each of the op's first ``SEARCHED`` dtypes also compiles one
of its searched cases (the value, argument, size searches' edits of a
sample), static, among the sweep's searched cases; these run beside the
searched cases a budget keeps (the pick is its own budget). So at most 28
compiled cases per op.

The catalog's budget. A whole-catalog run with ``--compile`` (``compile:catalog``)
compiles ``CATALOG_COVER`` (4) tuples per op, spread over the cover (every
sixth: different layouts, dtypes and variants, one of them dynamic where the
spread reaches round 1), the spread turned by the op (a stable hash of its name)
so that the catalog as a whole walks the whole cover; the ``i``-th on the op's
``i mod count``-th swept sample. And one searched case, in the op's first dtype.
About a second a case on the CPU: the catalog's compile cost is bounded per op
(2.96 times the catalog's time on 2 cores, bench/compiled-variant.md).
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch

from ...cases import layouts as layout_rules
from ...cases import opinfo
from ...cases.records import VARIANT_WORDS, Case, Unit
from ...dtypes import is_inexact, wide
from ...errors import UsageError
from ...judge import verdict
from ...judge.calls import make_call, plain_oracle, with_tensors
from ...judge.context import Context
from ...judge.records import Outcome
from ...judge.verdict import one_line
from ...run import call
from ...run.evidence import Evidence
from ...run.facts import of_references as facts_of
from .compiler import COMPILER, uncached
from .detail import DYNAMIC, STATIC

# The config entry of a pointed run's default: the picked cases alone, not every sample's contiguous call.
SAMPLED = "sampled"
# The config entry of a catalog run's --compile: the picked cases within the catalog's budget.
CATALOG = "catalog"
OPTIONS = (SAMPLED, CATALOG)
# The layouts the cover walks, in order (contiguous first: its case is also judged against float64); the others
# repeat one of these at an offset, or in 5-D.
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "expanded", "permuted", "channels_last", "empty")
# The variants compiled: the method reaches the functional kernels; backward is the autodiff oracle's.
VARIANTS = ("functional", "inplace", "out")
ROUNDS = 3
# Dtypes of an op (its first, in the sweep's order) that compile one of their searched cases each.
SEARCHED = 4
# A catalog run: tuples of the cover compiled per op, and dtypes compiling a searched case.
CATALOG_COVER = 4
CATALOG_SEARCHED = 1


def option(text: str | None) -> str:
    if text in (None, ""):
        return ""
    if text not in OPTIONS:
        raise UsageError(f"compile takes no option but {SAMPLED!r} (the compiled variant's sample alone) or {CATALOG!r} (its "
                         f"catalog budget); got {text!r}")
    return text


def turn(op: str) -> int:
    """A stable number of the op's name, the same in every process and release: where the catalog's share of a
    spread begins for the op, so that the catalog as a whole walks all of it."""
    return int.from_bytes(hashlib.blake2b(op.encode(), digest_size=4).digest(), "big")


def catalog_share(op: str, tuples: list) -> list:
    """The ``CATALOG_COVER`` tuples a catalog run compiles for ``op``: evenly spread over ``tuples``, turned by the op."""
    if len(tuples) <= CATALOG_COVER:
        return list(tuples)
    step = len(tuples) // CATALOG_COVER
    start = turn(op) % step
    return [tuples[start + i * step] for i in range(CATALOG_COVER)]


def cover(dtypes: tuple[str, ...], layouts: tuple[str, ...], variants: tuple[str, ...], rounds: int = ROUNDS) -> list[tuple[str, str, str, bool]]:
    """(layout, dtype, variant, dynamic) tuples, in the order they are compiled: the first ``rounds`` rounds of the cover."""
    walked = [name for name in LAYOUTS if name in (layout_rules.CONTIGUOUS, *layouts)]
    kinds = [v for v in VARIANTS if v in variants]
    if not walked or not kinds or not dtypes:
        return []
    found: list[tuple[str, str, str, bool]] = []
    for r in range(rounds):
        for i, layout in enumerate(walked):
            j = (i + r) % len(dtypes)
            entry = (layout, dtypes[j], kinds[(i + j + r // len(dtypes)) % len(kinds)], r == 1)
            if not any(entry[:3] == seen[:3] for seen in found):
                found.append(entry)
    return found


def pick(unit: Unit, planned: list[Case], option: str, swept) -> list[Case]:
    """The planned cases of one sample that the cover compiles (``swept``: judge.plugin.Swept); none unless the config
    entry is ``compile:sampled`` (plain ``compile`` is the contiguous call of every sample alone, oracle.py)."""
    if option not in OPTIONS:
        return []
    if swept.searched:
        return _searched(unit, planned, swept, SEARCHED if option == SAMPLED else CATALOG_SEARCHED)
    tuples = cover(swept.dtypes, swept.layouts, swept.variants)
    if option == CATALOG:
        tuples = catalog_share(unit.op, tuples)
    chosen = []
    for k, (layout, dtype, variant, dynamic) in enumerate(tuples):
        if dtype != unit.dtype or k % max(swept.count, 1) != swept.position:  # the op's k-th tuple: its k-th sample, in turn
            continue
        case = _realized(planned, layout, variant, {c.id for c in chosen})
        if case is not None:
            chosen.append(dataclasses.replace(case, oracle=DYNAMIC if dynamic else STATIC))
    return chosen


def _searched(unit: Unit, searched: list[Case], swept, dtypes: int) -> list[Case]:
    """One of the unit's searched cases (edited values, sizes or arguments) compiled, static, in each of the op's
    first ``dtypes`` dtypes: the middle one of its functional, in-place or out= cases, turned by the dtype's place."""
    j = swept.dtypes.index(unit.dtype) if unit.dtype in swept.dtypes else len(swept.dtypes)
    fits = [case for case in searched if case.variant in VARIANTS and case.edits]
    if j >= dtypes or not fits:
        return []
    return [dataclasses.replace(fits[(len(fits) * (2 * j + 1) // (2 * dtypes)) % len(fits)], oracle=STATIC)]


def _realized(planned: list[Case], layout: str, variant: str, taken: set[str]) -> Case | None:
    """The planned case a tuple compiles: its layout on every tensor it fits, in its variant; where the sample has
    none (a 1-D sample transposed, an op without in-place), the nearest it has: the layout in the functional or
    another variant, else the variant contiguous, else the contiguous functional call."""
    for want_layout, want in ((layout, variant), (layout, "functional"), *((layout, v) for v in VARIANTS),
                              (layout_rules.CONTIGUOUS, variant), (layout_rules.CONTIGUOUS, "functional")):
        fits = [case for case in planned if case.variant == want and not case.edits and not case.oracle and case.id not in taken
                and (not case.layouts if want_layout == layout_rules.CONTIGUOUS else all(name == want_layout for _, name in case.layouts))]
        if fits:
            return max(fits, key=lambda case: len(case.layouts))  # every tensor the layout fits at once
    return None


# --- judging one compiled case ------------------------------------------------------------------------


def run(subject) -> Outcome:
    case = subject.case
    plain = plain_oracle(case)
    try:
        refs = subject.references(plain)
        error = None if refs.contiguous.ok else refs.contiguous.error
    except Exception as e:
        refs, error = None, getattr(e, "error", e)
    if error is not None:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(error))
    functional_result = refs.contiguous.value if case.variant == "out" else None
    prepared = make_call(case, subject.function, subject.sample, functional_result)
    ran, prepared, how = _compiled_run(case, subject.function, prepared)
    if ran.error is not None:
        eager = call.execute(make_call(case, subject.function, subject.sample, functional_result))
        if eager.error is not None:  # the op refuses the call eagerly too: the sweep's own case says so
            return Outcome(case=case, status="raised", reason="the eager call raised too: " + one_line(eager.error))
        inner = getattr(ran.error, "inner_exception", None)  # BackendCompilerFailed wraps inductor's own error
        laid = ", ".join(f"{path} {layout}" for path, layout in case.layouts) or "contiguous"
        return Outcome(case=case, status="raised", reason=f"torch.compile raised on {case.op}{VARIANT_WORDS[case.variant]} "
                       f"[{case.dtype}], {laid}, {_words(case)}: {one_line(ran.error)}"
                       + (f" ({one_line(inner)})" if inner is not None else ""))
    facts = facts_of(refs, case.op)
    ev = Evidence(prepared, ran, refs, facts, function_name=opinfo.public_name(subject.entry, case.variant), compiled=True)
    judged = verdict.judge(ev, override=subject.override)
    notes = [how] if how else []
    findings = []
    for finding in judged.findings:
        if _rounding(finding, ev, subject.override):
            notes.append(f"compiled differs from eager at {finding.mismatch.path}, within what float64 calls rounding")
            continue
        findings.append(dataclasses.replace(finding, summary=f"compiled by torch.compile (inductor, {_words(case)}): {finding.summary}",
                                            detail="; ".join(x for x in (_prose(case), finding.detail) if x)))
    reason = "; ".join(x for x in (*notes, judged.reason) if x)
    status = "finding" if findings else "pass" if judged.status == "finding" else judged.status  # all within rounding: a pass
    return Outcome(case=case, status=status, reason=reason, findings=tuple(findings))


def _words(case: Case) -> str:
    return "dynamic shapes" if case.oracle == DYNAMIC else "static shapes"


def _prose(case: Case) -> str:
    return f"torch.compile(backend='inductor', fullgraph=True, dynamic={case.oracle == DYNAMIC})"


def _compiled_run(case: Case, function, prepared: call.Prepared) -> tuple[call.Ran, call.Prepared, str]:
    """The case's call compiled, its run and the prepared call it ran (its tensors written in place); and a note where
    dynamic shapes were refused and the call was compiled static instead, on fresh copies of the same tensors."""
    dynamic = case.oracle == DYNAMIC
    with uncached():
        ran = call.execute(dataclasses.replace(prepared, function=_entry(COMPILER.get(case, function, dynamic=dynamic))))
    if ran.error is None or not dynamic:
        return ran, prepared, ""
    refused = one_line(ran.error)
    fresh = with_tensors(prepared, call.rebuilt(ran, prepared))
    with uncached():
        ran = call.execute(dataclasses.replace(fresh, function=_entry(COMPILER.get(case, function, dynamic=False))))
    return ran, fresh, f"dynamic shapes refused ({refused}); compiled static"


def _entry(compiled):
    """``compiled(args, kwargs)`` as the function a prepared call calls with ``*args, **kwargs``."""
    return lambda *args, **kwargs: compiled(args, kwargs)


def _rounding(finding, ev: Evidence, override) -> bool:
    """Whether a compiled-against-eager value mismatch is within what the precision reference allows against float64
    (inductor's rounding, not a wrong result). Only where float64 can tell: a narrower floating dtype."""
    dtype = getattr(torch, ev.case.dtype)
    if finding.reference != "layout" or finding.kind != "mismatch" or not finding.mismatch or finding.mismatch.attribute != "values":
        return False
    if not is_inexact(dtype) or wide(dtype) == dtype or not ev.refs.float64.ok:
        return False
    if ev.facts.random or ev.facts.uninitialized or ev.facts.storage_defined:
        return False
    written = [ev.prepared.tensors[p] for p in ev.prepared.tensors if p in ev.prepared.written]
    result = ev.ran.result if not written else written[0] if len(written) == 1 else tuple(written)
    base = ev.refs.base
    ran = call.Ran(result=result, before=call.snapshot(base.tensors), meta={p: call.metadata(t) for p, t in base.tensors.items()})
    ctx = Context(Evidence(base, ran, ev.refs, ev.facts, function_name=ev.function_name, compiled=True), override)
    verdict.precision(ctx)
    return not ctx.findings and not any("no reference" in note or "no float64 reference" in note for note in ctx.notes)
