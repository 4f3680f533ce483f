"""The ``exact`` oracle: float64 results of elementwise special functions against an arbitrary-precision reference.

Design note. A sweep's precision reference is the same call in float64, so
a float64 result has nothing above it: a special function wrong in a tail,
past an overflow threshold or where its kernel switches approximation, in
float64 (and in every dtype whose float64 reference is as wrong) passes
every reference. This oracle evaluates the op's mathematical function with
mpmath (run.exact_functions: the ops it knows; run.exact evaluates them) at the points the case's float64
call was made, and judges each result against the exact value rounded
(exact.judging: the rule, and the function-led grid of points over the
dtype's whole range on a log scale, both signs).

It plans one case per sample of a float64 unit of an op it knows, in the
functional variant, contiguous; on the value search's special values too
(``on_values``: the edited sample's own elements, no grid). The call is made
on the case's device with the points as one-dimensional tensors in place of
the sample's tensors, the other arguments as the sample has them. A finding
is a ``mismatch`` against the ``arbitrary-precision`` reference, naming the
worst point; its ``Detail`` carries every wrong point (up to eight) and the
exact values, so the repro script needs only torch.

The other dtypes keep the float64 reference (and the rule that judges them
against it); where this oracle finds float64 wrong at a point, a lower
dtype's finding there may be float64's error, not the dtype's, which the
finding's exact value tells.
"""

from __future__ import annotations

import torch

from ...cases import opinfo
from ...cases.records import Unit
from ...judge import calls
from ...judge.calls import finding
from ...judge.plugin import Oracle, Subject, encode_detail
from ...judge.records import Mismatch, Outcome
from ...run import tree
from ...run.exact_functions import FUNCTIONS
from ...run.facts import facts as read_facts
from .detail import Detail
from .judging import MOST, grid, judge
from .script import script, snippet

DESCRIPTION = "float64 results of elementwise special functions against mpmath, at the samples' values and over the whole range"
# Wrong points a finding's Detail (and its script) carries at most.
SHOWN = 8


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    return ["exact"] if variant == "functional" and unit.dtype == "float64" and unit.op in FUNCTIONS else []


def run(subject: Subject) -> Outcome:
    case = subject.case
    entry = FUNCTIONS.get(case.op)
    if entry is None or case.layouts or case.variant != "functional" or case.dtype != "float64":
        return Outcome(case=case, status="skip", reason="the exact oracle judges float64 functional calls of the functions it knows, contiguous")
    variables = [p for p, t in tree.sample_tensors(subject.sample).items() if t.is_floating_point()][: entry.arity]
    if len(variables) != entry.arity:
        return Outcome(case=case, status="skip", reason=f"{case.op}'s sample has {len(variables)} floating tensors; its function takes {entry.arity}")
    numbers = tuple(a for a in subject.sample.args if isinstance(a, (int, float)) and not isinstance(a, bool))
    points = _own_points(subject.sample, variables) + ([] if case.edits else grid(entry.arity))  # the sample's own first
    points = list(dict.fromkeys(points))[:MOST]
    columns = {path: torch.tensor([p[i] for p in points], dtype=torch.float64, device=case.device) for i, path in enumerate(variables)}
    edited = tree.map_sample_tensors(subject.sample, lambda path, t: columns.get(path, t.to(case.device)))
    try:
        with torch.no_grad():
            result = subject.function(edited.input, *edited.args, **edited.kwargs)
    except Exception as e:
        return Outcome(case=case, status="raised", reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    got = result.detach().to("cpu", torch.float64).reshape(-1).tolist()
    if len(got) != len(points):
        return Outcome(case=case, status="skip", reason=f"{len(got)} results for {len(points)} points: not an elementwise call")
    bad, judged = judge(entry, points, got, numbers, torch.float64)
    if not bad:
        return Outcome(case=case, status="pass" if judged else "skip",
                       reason="" if judged else "no point has a finite exact value")
    worst = max(bad, key=lambda b: b.error / b.allowed if b.allowed else float("inf"))
    name = opinfo.public_name(subject.entry, "functional") or case.op
    at = ", ".join(repr(v) for v in worst.inputs)
    detail = Detail(call=name, numbers=numbers, points=tuple(tuple(float.hex(v) for v in b.inputs) for b in bad[:SHOWN]),
                    expected=tuple(b.expected for b in bad[:SHOWN]), allowed=tuple(b.allowed for b in bad[:SHOWN]), source=entry.source)
    mismatch = Mismatch(path="out", attribute="values", expected=worst.expected, actual=repr(worst.got), mismatched=len(bad), numel=judged,
                        worst_index=(worst.index,), max_abs_err=worst.error, atol=0.0, rtol=0.0, allowed=worst.allowed)
    summary = f"{name}({at}) in float64 gives {worst.got!r}; the exact value is {worst.expected} ({len(bad)} of {judged} points wrong)"
    refs, _ = calls.base(subject)  # the aten overload the call reached, as every finding names it
    op = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=case.op).op if refs is not None else case.op
    found = finding(case, kind="mismatch", reference="arbitrary-precision", op=op, summary=summary, mismatch=mismatch,
                    detail=f"judged against {entry.source} at {judged} points by mpmath", data=encode_detail(detail))
    return Outcome(case=case, status="finding", findings=(found,))


def _own_points(sample, variables: list[str]) -> list[tuple[float, ...]]:
    """The sample's own elements, broadcast together, as points (finite or not: the judge leaves non-finite ones out)."""
    tensors = tree.sample_tensors(sample)
    try:
        columns = torch.broadcast_tensors(*(tensors[p].detach().to("cpu", torch.float64) for p in variables))
    except RuntimeError:
        return []
    flat = [c.reshape(-1).tolist() for c in columns]
    return list(zip(*flat))


ORACLE = Oracle(name="exact", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script, snippet=snippet,
                on_values=True)
