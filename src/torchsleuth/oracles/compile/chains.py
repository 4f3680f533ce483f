"""Compiled chains: short programs around an op, compiled by inductor, judged against eager and float64.

Design note. A chain (chain_steps.py) is two to four ops around the unit's op,
its anchor, on one of the anchor's samples: pre steps on the sample's input,
the anchor with the sample's arguments, post steps on its result. A chain case
is an ordinary case of the anchor's unit (its sample, layouts, dtype and
searched edits) whose oracle name carries the chain
(``sum|functional|bfloat16|cpu|s9|input=transposed|@compile:chain:sin>@>sum``).

Judging. The chain is one Python function of the anchor's call, so the
compiled variant's judging applies unchanged (variant.run on a Subject whose
function is the chain and whose references are the chain's own: eager on
contiguous copies, float64, the nudged float64 runs the tolerance rule reads
its sensitivity from; run.references). The rule is the compile variant's:
twice the table's tolerance widened by the chain's float64 sensitivity, the
square root of its reduction length (the trace of the whole chain: its
steps and its reduction) and a few units of the dtype for each intermediate
rounded to it. A chain's finding is a compiled result that differs from
eager beyond that AND from float64 beyond what the precision reference
allows (variant._rounding): a precision finding alone, where the compiled
chain agrees with eager, is eager's own rounding through the chain, not the
compile's, and is a note. A finding's op is the anchor's name with
"(compiled chain)". A compile that raises is the case's ``raised``
outcome, listed with the compiled variant's; a crash or hang costs the case.

The pick. ``CHAINS`` chains an op, one template each in turn
(chain_steps.TEMPLATES), the ``k``-th in the op's ``k mod d``-th chain dtype
(floating dtypes first: float32, bfloat16, float16, then int64, float64; of
those the sweep covers) on its ``k n div CHAINS``-th of ``n`` swept samples
(spread over them, small to large as OpInfo lists them), laid out by
``LAYOUTS[k mod |LAYOUTS|]`` where the sample's planned cases have it (else
contiguous); a template that does not go through on the sample gives way to
the next. And ``SEARCHED`` more on the op's searched cases that set values
(special values, extremes, negative indices): the value search's cases. So
at most ``CHAINS + SEARCHED`` (12) compiled chains per op; each compiles once
(about a second a graph on the CPU). A catalog run (``compile:catalog``)
compiles one chain an op: its ``k``-th, ``k`` turned by the op's name
(variant.turn), so that the catalog's chains walk every template.

Shrinking. Beyond the shrinker's own moves (smaller samples and sizes,
simpler layouts, dtypes and values), ``moves`` drops one step (the anchor
stays), and ``weight`` (the chain's length) counts before the shrinker's
cost, so a shrunk chain has the fewest ops that still differ.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch

from ...cases import opinfo
from ...cases.records import Case, Unit
from ...judge.plugin import Subject
from ...judge.records import Outcome
from ...run import call
from ...run.references import References, base_case
from ...run.samples import samples_of
from . import chain_steps, variant
from .chain_steps import Chain

CHAINS = 10
SEARCHED = 2
DTYPES = ("float32", "bfloat16", "float16", "int64", "float64")
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "channels_last", "permuted", "expanded")
# The edits of sizes (search.edits.SIZE_VERBS): a searched case that sets values is one without them.
_SIZE_VERBS = ("size:", "dim:", "grow:")


def chain_dtypes(swept) -> tuple[str, ...]:
    return tuple(d for d in DTYPES if d in swept.dtypes)


def pick(unit: Unit, planned: list[Case], option: str, swept) -> list[Case]:
    """The chain cases of one sample (or of the unit's searched cases); none unless the compiled variant is on."""
    if option not in variant.OPTIONS:
        return []
    dtypes = chain_dtypes(swept)
    if unit.dtype not in dtypes:
        return []
    j = dtypes.index(unit.dtype)
    if swept.searched:
        if option == variant.CATALOG:  # the catalog's one chain an op is on a swept sample
            return []
        fits = [c for c in planned if c.variant == "functional" and c.edits and not any(e.startswith(_SIZE_VERBS) for e in c.edits)]
        if not fits:
            return []
        return [case for k in range(CHAINS, CHAINS + SEARCHED) if k % len(dtypes) == j
                for case in _chained(unit, fits[len(fits) * (k - CHAINS + 1) // (SEARCHED + 1)], k, set())]
    chosen: list[Case] = []
    for k in ([variant.turn(unit.op) % CHAINS] if option == variant.CATALOG else range(CHAINS)):
        if k % len(dtypes) != j or k * max(swept.count, 1) // CHAINS != swept.position:
            continue
        base = _laid(planned, LAYOUTS[k % len(LAYOUTS)])
        if base is not None:
            chosen += _chained(unit, base, k, {c.oracle for c in chosen})
    return chosen


def _laid(planned: list[Case], layout: str) -> Case | None:
    """The sample's functional case under ``layout`` (every tensor it fits), else its contiguous one."""
    plain = [c for c in planned if c.variant == "functional" and not c.edits and not c.oracle]
    laid = [c for c in plain if c.layouts and all(name == layout for _, name in c.layouts)]
    if laid:
        return max(laid, key=lambda c: (dict(c.layouts).get("input") == layout, len(c.layouts)))
    return next((c for c in plain if not c.layouts), None)


def _chained(unit: Unit, base: Case, k: int, taken: set[str]) -> list[Case]:
    """``base`` as the op's ``k``-th chain (or the next template that goes through on its sample); [] when none does."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sample = samples_of(unit.op, unit.dtype)[base.sample]
            anchor = opinfo.functions(opinfo.get(unit.op))["functional"]
            args, kwargs = call.sample_call(sample, "cpu")
            for turn in range(len(chain_steps.TEMPLATES)):
                chain = chain_steps.compose(unit.op, unit.dtype, k + turn, anchor, args, kwargs)
                if chain is not None and chain_steps.oracle_name(chain) not in taken:
                    return [dataclasses.replace(base, oracle=chain_steps.oracle_name(chain))]
    except Exception:  # a sample that cannot be made here is the sweep's own case to report
        return []
    return []


# --- judging one chain ------------------------------------------------------------------------------


def run(subject: Subject) -> Outcome:
    case = subject.case
    chain = chain_steps.of_oracle(case.oracle)
    function = chain_steps.chained(chain, subject.function)
    made: dict[Case, References] = {}

    def references(plain: Case) -> References:
        base = base_case(plain)
        if base not in made:
            prepared = call.prepare(base, function, subject.sample, grad_seed=base.sample)
            made[base] = References(prepared, getattr(torch, case.dtype), seed=base.sample)
        return made[base]

    outcome = variant.run(dataclasses.replace(subject, function=function, references=references))
    words = chain.words(opinfo.public_name(subject.entry, "functional").removeprefix("torch."))
    kept = [f for f in outcome.findings if f.reference != "precision"]
    # a compile that raised, listed with the compiled variant's (report.view): named by the chain, not the op alone
    notes = [outcome.reason.replace("torch.compile raised on ", f"torch.compile raised on chain {chain.spec} around ", 1)] if outcome.reason else []
    if len(kept) < len(outcome.findings) and not any(f.reference == "layout" for f in kept):
        notes.append("the compiled chain agrees with eager, whose rounding through the chain float64 does not allow: eager's own")
    findings = tuple(_named(f, case, chain, words) for f in kept)
    status = "finding" if findings else "pass" if outcome.status == "finding" else outcome.status
    return dataclasses.replace(outcome, status=status, findings=findings, reason="; ".join(notes))


def _named(finding, case: Case, chain: Chain, words: str):
    """A chain's finding, named by the chain, its layout, dtype and "compiled"; its op the anchor's catalog name and
    "(compiled chain)", which dropping a step while shrinking leaves as it is, and which a group's headline and its
    diagnosis read ("sum (compiled chain) gives wrong values when ...")."""
    placed = ", ".join(f"{layout} {path}" for path, layout in case.layouts) or "contiguous tensors"
    narrow = case.dtype in ("float32", "float16", "bfloat16")  # where float64 tells rounding apart (variant._rounding)
    what = {"layout": "differs from the eager chain beyond the compile tolerance" + (", and from float64 beyond rounding" if narrow else "")}.get(
        finding.reference, finding.summary.split(": ", 1)[-1])
    summary = f"chain {words} [{case.dtype}] on {placed}, compiled by torch.compile (inductor, static shapes): {what}"
    detail = f"chain {chain.spec} ({chain.length} ops: {words}); {finding.detail}"
    return dataclasses.replace(finding, summary=summary, detail=detail, op=f"{case.op} (compiled chain)")


# --- shrinking -----------------------------------------------------------------------------------------


def moves(case: Case) -> list[Case]:
    """The chain case with one step dropped, each way (none for a case that is no chain)."""
    chain = chain_steps.of_oracle(case.oracle)
    if chain is None:
        return []
    return [dataclasses.replace(case, oracle=chain_steps.oracle_name(shorter)) for shorter in chain.dropped()]


def weight(case: Case) -> int:
    """How many ops the case's chain has (0 for a case that is no chain)."""
    chain = chain_steps.of_oracle(case.oracle)
    return chain.length if chain is not None else 0
