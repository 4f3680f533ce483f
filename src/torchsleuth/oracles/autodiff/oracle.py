"""The ``autodiff`` oracle: an op's derivatives agree across autodiff modes and with float64 finite differences.

Design note. PyTorch computes a derivative in several ways: reverse mode
(backward formulas, ``derivatives.yaml``), forward mode (the jvp formulas,
written separately and tested less), and second order as reverse over
reverse (double backward) or forward over reverse. Each is its own code; a
wrong formula in one returns wrong numbers and raises nothing. A case of
this oracle differentiates the case's call with respect to each of its
floating and complex tensors in turn (``x``), along a seeded tangent ``v``
with seeded cotangents ``u`` (autodiff.helpers says how they are drawn),
first with every tensor widened to float64 (complex128), then in the case's
own dtype.

``autodiff:forward`` (entries with ``supports_forward_ad``) judges J v:

* forward mode's J v (the outputs' tangents) and reverse mode's (reverse
  mode twice: the gradient of ``<u^T J, v>`` with respect to ``u``) each
  against float64 central differences of the outputs along ``v``;
* the contraction ``u . (J v)`` against ``(u^T J) . v``, which needs
  reverse mode once only (for ops whose backward cannot be differentiated);
* in float64, a mode off finite differences is found wrong (named, with
  what finite differences say); two modes off each other with neither off
  finite differences are judged by the judge's rule for two rounded
  results; both agreeing but off finite differences is a finding too. In the
  case's dtype the two modes are compared by the rule only; finite
  differences say which side they are on.

``autodiff:second`` (entries with ``supports_gradgrad``) judges H v, the
derivative of the gradient ``u^T J`` along ``v``, by double backward, by
forward over reverse (entries with ``supports_fwgrad_bwgrad``) and by
float64 central differences of the gradient. NaN or an infinity from a mode
where finite differences are finite is off them, like any other value.

Kinks. Before any comparison, float64 finite differences decide where the
function is differentiable along ``v`` (helpers.finite_differences: both
one-sided quotients agree, the central quotient is stable from one step to
the next, and it stays put at a few points near x): abs and relu at 0,
ties of max and sort, a jump of floor, and elements whose differences are
not finite are left out, and the outcome says how many (``at a kink:
...``, ``not finite: ...``); a case with no element left is a skip.
Cotangents are zero at such outputs, so a kink does not reach a contraction
either. A finding is made again with many more points near x before it is
reported: the median of a tie has one-sided quotients that agree, and a few
points can all break the tie towards the same element by chance.

Rounding. Two modes in the case's dtype, or in float64 where neither is off
finite differences, are compared by the judge's rule for two rounded
results, with the table's atol grown by the size of the tangent (and
cotangents), plus how far each mode moves when its inputs move by a few
units in the last place (autodiff.derivatives.noise): a derivative that is
the small difference of large intermediates is rounding and nothing else.

Layouts. Each case judges the sample's tensors as they are, then once more
with every differentiated tensor laid out ``transposed`` (or ``strided``
where that does not fit) and its tangent alike: a forward-mode formula that
is wrong only on strided tensors is found there. A finding on the laid-out
configuration is a case with those layouts (its id says so), which judges
that configuration alone when replayed.

Skipped, with the reason: random ops (an op tagged
``nondeterministic_seeded`` ran), calls without a floating or complex
tensor argument or output, uninitialized results, and an argument whose
derivative raises in a mode (loud: not this oracle's class).

Planned for the functional variant of floating and complex units whose
backward is swept, one case per form the entry supports, per sample with a
floating or complex tensor. Cheap; planned on the value search's special
values too (``on_values``), of which it judges the sets the search judges
backward on (``nonfinite``: values exact in every dtype; the ``extreme``,
``overflow`` and ``rounding`` sets make derivative formulas overflow or step
across jumps where the function is fine, and are skipped with that reason),
and every set of the thresholds search, element by element: no verdict
where the exact derivative (mpmath), or a product of it with the tangent or
cotangent a mode takes on the way, lies outside the dtype's normal range, or
where a mode's float64 value does (ranges.py; the case's note says how many),
and none where finite differences find the function not smooth within their
step (a rounding op's jump). A gradient at a conditioned matrix of the
matrices search may be off by perturbation theory's second order too
(judge.conditioning). Sampled by whole-catalog runs. Where a tensor holds NaN or an infinity,
no element that depends on it is judged (helpers.tainted): a derivative
there is a limit at best. A linear algebra op (search.matrices) is not
judged at the ``nonfinite`` set at all: its derivative formulas solve with
the whole matrix's factors, so an output whose value ignores the NaN
(``lu_factor``'s first row) still has none.

The modules: ``detail`` (the case's form, the finding's record),
``helpers`` (the derivatives as plain torch code, which scripts copy),
``derivatives`` (the call and its derivatives as calls the judge's rule
measures), ``judging`` (one argument's verdict), ``findings`` (its
finding's words and record), ``script`` and this one.
"""

from __future__ import annotations

import dataclasses

import torch

from ...cases import layouts, opinfo, reach
from ...cases.records import Case, Unit
from ...judge import calls
from ...judge.plugin import Oracle, Subject
from ...judge.records import Outcome
from ...judge.verdict import one_line
from ...run import probe, tree
from ...run.facts import of_references as facts_of
from ...run.samples import samples_of
from ...search import matrices as matrix_search, values as value_search
from . import helpers
from .detail import FORWARD, PREFIX, SECOND, form
from .judging import Argument, Skip
from .script import script

DESCRIPTION = "derivatives agree across forward mode, reverse mode, double backward and float64 finite differences"

# The layouts tried for the laid-out configuration, first that fits.
LAYOUTS = ("transposed", "strided")


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    """``autodiff:forward`` and ``autodiff:second`` as the entry supports them, for the functional variant."""
    dtype = getattr(torch, unit.dtype)
    if variant != "functional" or not (dtype.is_floating_point or dtype.is_complex):
        return []
    entry = opinfo.get(unit.op)
    if reach.random(entry) or not probe.backward_allowed(entry, torch.device(unit.device).type, dtype):
        return []
    s = samples_of(unit.op, unit.dtype)[sample]  # cached: the engine has just made them
    if not any(helpers.inexact(t) and t.numel() for t in tree.sample_tensors(s).values()):
        return []
    forms = [(FORWARD, "supports_forward_ad"), (SECOND, "supports_gradgrad")]
    return [PREFIX + name for name, flag in forms if getattr(entry, flag, False)]


def run(subject: Subject) -> Outcome:
    case = subject.case
    if case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the autodiff oracle differentiates the functional call only")
    unfair = unfair_sets(case.edits)
    if unfair:
        return Outcome(case=case, status="skip", reason=f"special values ({', '.join(unfair)}): derivative formulas square and multiply values "
                       "near the dtype's limits, overflowing where the function does not; as for backward, only exact sets are judged")
    if matrix_search.linear_algebra(case.op) and "nonfinite" in _value_sets(case.edits):
        return Outcome(case=case, status="skip", reason="a matrix holding NaN or an infinity: a factorisation's derivative solves with its "
                       "factors, coupling every element, so none is defined there even where an output's value ignores the non-finite "
                       "one (torch.linalg.lu's docs: gradients at full-rank matrices only)")
    refs, raised = calls.base(subject)
    if raised is not None:
        return raised
    facts = facts_of(refs, case.op)
    if facts.random:
        return Outcome(case=case, status="skip", reason="the op draws random numbers: its derivatives are not a function of its inputs")
    if facts.uninitialized:
        return Outcome(case=case, status="skip", reason="the result is uninitialized memory: nothing to differentiate")
    if facts.storage_defined and case.layouts:  # as_strided of a strided view reads its storage; x + h v is a fresh one
        return Outcome(case=case, status="skip", reason="the op is defined by its input's storage: finite differences of a "
                       "laid-out input move other storage, so only the sample's own layout is judged")
    function_name = opinfo.public_name(subject.entry, "functional")
    notes: list[str] = []
    judged = 0
    configurations = [case]
    while configurations:
        config = configurations.pop(0)
        try:
            prepared = calls.make_call(config, differentiated(subject), subject.sample)
        except Exception as e:
            return Outcome(case=case, status="raised", reason="the call could not be made: " + one_line(getattr(e, "error", e)))
        paths = [p for p, t in prepared.tensors.items() if helpers.inexact(t) and t.numel()]
        if not paths:
            return Outcome(case=case, status="skip", reason="no floating or complex tensor argument to differentiate")
        if config is case and not case.layouts and not facts.storage_defined:
            configurations += laid_out(case, prepared, paths)
        where = f" ({', '.join(f'{p} {layout}' for p, layout in config.layouts)})" if config.layouts else ""
        for index, path in enumerate(paths):
            argument = Argument(subject, config, prepared, path, index, facts.op, function_name)
            try:
                found = argument.first() if form(case.oracle) == FORWARD else argument.second()
            except Skip as e:
                notes.append(f"{path}{where}: {e}")
                continue
            judged += 1
            notes += [note + where for note in argument.notes]
            if found is not None:
                return Outcome(case=case, status="finding", findings=(found,))
    reason = "; ".join(dict.fromkeys(notes))
    return Outcome(case=case, status="pass" if judged else "skip", reason=reason)


def differentiated(subject: Subject):
    """What OpInfo's own gradcheck differentiates: the op through the entry's ``gradcheck_wrapper`` (cholesky's input
    made hermitian, a triangular solve's made triangular: a finite difference along any other tangent leaves the
    op's domain) and its result through the sample's ``output_process_fn_grad`` (batch norm's saved statistics are
    no output a derivative is defined for)."""
    wrapper = getattr(subject.entry, "gradcheck_wrapper", None) or (lambda op, *args, **kwargs: op(*args, **kwargs))
    process = getattr(subject.sample, "output_process_fn_grad", None) or (lambda out: out)
    function = subject.function

    def call(*args, **kwargs):
        return process(wrapper(function, *args, **kwargs))

    return call


def _value_sets(edits: tuple[str, ...]) -> set[str]:
    return {e.rpartition("=")[2].partition("@")[0] for e in edits if e.startswith(value_search.VERB + ":")}


def unfair_sets(edits: tuple[str, ...]) -> list[str]:
    """The values search's sets among ``edits`` that gradients are not judged on (search.values: only its ANY_OP sets).
    The thresholds search's sets are all judged: where the exact derivative leaves the dtype's range there is no
    verdict, element by element (ranges.py)."""
    found = []
    for edit in edits:
        if edit.startswith(value_search.VERB + ":"):
            name = edit.rpartition("=")[2].partition("@")[0]
            if name not in value_search.ANY_OP:
                found.append(name)
    return list(dict.fromkeys(found))


def laid_out(case: Case, prepared, paths: list[str]) -> list[Case]:
    """The case with every differentiated tensor transposed (or strided, where that does not fit); none when none fits."""
    chosen = []
    for path in paths:
        layout = next((name for name in LAYOUTS if layouts.applies(name, prepared.tensors[path])), None)
        if layout is not None:
            chosen.append((path, layout))
    return [dataclasses.replace(case, layouts=tuple(sorted(chosen)))] if chosen else []


ORACLE = Oracle(name="autodiff", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script, on_values=True, sampled=True)
