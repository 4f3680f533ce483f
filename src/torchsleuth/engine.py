"""One unit of work inside a worker: cases -> run -> judge, one outcome per case.

Design note. A unit is every case of one op and dtype on one device. The
worker makes the op's samples once (on the CPU, seeded), picks
``config.samples`` of them spread over the list, and for each sample plans
its cases (cases.plan), runs each (run.call), and judges it (judge.verdict).
References are shared by the cases of a sample that see the same values.

It yields ``("begin", case_id)`` before each case and ``("outcome",
Outcome)`` after, so that the process running it can tell which case was in
flight if the worker dies or stops answering. A part of a unit split among
workers (workers.parts: ``skip`` says which) runs its own cases of the
unit, or of its stage; past the run's deadline, only the samples' own
(run.deadline).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from .cases import opinfo, reach
from .devices import works as device_works
from .cases.plan import cases_for
from .cases.records import Case, Unit
from .config import SweepConfig
from .judge.isolation import isolation_outcome
from .judge.calls import functional_of as _functional
from .judge.verdict import judge, one_line
from .judge.plugin import BUILTIN, Registry, Subject, Swept
from .judge.records import Outcome
from .run import call, deadline, probe, tree
from . import search
from .search import edits
from .run.samples import chosen_samples, samples_of
from .run.evidence import Evidence
from .run.facts import of_references as facts_of
from .run.facts import facts as read_facts
from .workers.pool import DeviceLost
from .run.references import References, Refused, base_case

Event = tuple[str, object]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Unit:
    """What every case of one unit shares, made once: the OpInfo entry, its variants as callables, those swept, the
    tolerance override, the cases to leave out (``skip``) or the one to run (``only``), the oracles."""

    unit: Unit
    config: SweepConfig
    entry: Any
    functions: dict[str, Callable]
    variants: tuple[str, ...]
    override: tuple[float, float] | None
    skip: frozenset[str]
    only: str | None
    oracles: Registry
    clock: deadline.Clock  # the run's time target: which oracle and searched cases still run (run.deadline)
    stage: str | None  # a staged part's (workers.parts): which of the unit's cases it runs (run.deadline.in_stage)


def run_unit(unit: Unit, config: SweepConfig, skip: frozenset[str] = frozenset(), *, only: str | None = None,
             oracles: Registry = BUILTIN) -> Iterator[Event]:
    """Every case of ``unit`` not in ``skip`` (only the case ``only``, when given); ``oracles`` plans and judges the
    cases of the oracle plug-ins ``config.oracles`` names."""
    entry = opinfo.get(unit.op)
    dtype = getattr(torch, unit.dtype)
    functions = opinfo.functions(entry)
    backward_ok = probe.backward_allowed(entry, torch.device(unit.device).type, dtype)  # a probed dtype's once its probe passed
    variants = tuple(v for v in config.variants if v in functions and (v != "backward" or backward_ok))
    this = _Unit(unit=unit, config=config, entry=entry, functions=functions, variants=variants, skip=skip, only=only, oracles=oracles,
                 override=opinfo.tolerance_override(entry, torch.device(unit.device).type, dtype),
                 clock=deadline.Clock(deadline=0.0 if only is not None else deadline.earliest(config.deadline, getattr(skip, "until", 0.0)),
                                      end=0.0 if only is not None else config.deadline),
                 stage=getattr(skip, "stage", None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = samples_of(unit.op, unit.dtype)  # cached: the shrink stage asks again in this worker
        chosen = chosen_samples(samples, config.samples)
        # a dtype OpInfo does not declare (SweepConfig.probe_dtypes): swept only if the kernel takes it (run.probe)
        refused = None if probe.declared(entry, unit) else (yield from probe.probe(unit, functions["functional"], samples, chosen, skip, only))
        if refused:
            yield from _skipped(unit, "functional", chosen[0], refused, skip, only)
            return
        searched: list[Case] = []
        declared = opinfo.dtypes(entry, torch.device(unit.device).type)
        swept = Swept(dtypes=tuple(d for d in config.dtypes if getattr(torch, d) in declared) or (unit.dtype,), layouts=config.layouts,
                      variants=variants, position=0, count=len(chosen))
        for position, index in enumerate(chosen):
            if only is not None and Case.parse(only).sample != index:
                continue
            if this.stage != "searched" and (only is None or not Case.parse(only).edits):
                yield from _run_sample(this, samples[index], index, dataclasses.replace(swept, position=position, count=len(chosen)))
            if this.stage == "base":
                continue
            planned: dict[tuple[str, ...], list[str]] = {}  # edits -> the variants they were planned for, in order
            for variant in variants:
                for edits in search.plan(config.search, unit.op, variant, unit.dtype, samples[index], unit.device):
                    planned.setdefault(edits, []).append(variant)
            covered = search.compose.baseline(unit.op, list(variants), samples[index], config.layouts) if planned else set()
            for edits, planned_for in planned.items():  # each crossed with the layouts and its variants (search.compose)
                searched += [Case(op=unit.op, variant=variant, dtype=unit.dtype, device=unit.device, sample=index, layouts=laid, edits=edits)
                             for variant, laid in search.composed(unit.op, edits, planned_for, samples[index], config.layouts, covered)]
                if search.judged_by_oracles(edits):  # the same special values, judged by each oracle's property
                    for variant in planned_for:
                        searched += oracles.cases_for(config.oracles, unit, variant, index, edits)
            for variant in variants:
                searched += oracles.cases_for(config.sampled, unit, variant, index)  # a catalog run's sample of these oracles
        # the searched cases an oracle judges its own way too (Oracle.pick: the compiled variant on searched values): its
        # pick is its own budget, so they run beside the searched cases the sweep's budget keeps
        picked = oracles.picked(config.oracles, unit, [c for c in searched if not c.oracle], dataclasses.replace(swept, searched=True))
        yield from _run_search(this, searched, picked)
        if this.clock.note():
            yield "note", this.clock.note()


# A worker's exit status when torchsleuth failed on a case (see run_unit).
TAINTED = 3

def _reference_maker(functions: dict, sample, dtype: str, entry=None, own=None, refuse: bool = True):
    """``references(case)``: the references of a sample's cases, each base case made once (float64 through the
    entry's own ``reference`` implementation, where it has one: run.references). ``own``: the sample before its
    edits, for an edited ``sample`` (whether the CPU takes the sample's own values: ``References.refused``);
    ``refuse=False``: every case's values are sent to the device (a case replayed alone, and its description)."""
    shared: dict[Case, References] = {}
    before = _reference_maker(functions, own, dtype, entry) if own is not None and refuse else None

    def original(base: Case):
        """The CPU reference of ``base``'s values as OpInfo made them; None where torchsleuth changed none."""
        if not refuse:
            return None
        if base.layouts:  # value-changing layouts: the sample's own values under the same call
            return lambda: references(dataclasses.replace(base, layouts=())).cpu
        return (lambda: before(base).cpu) if before is not None else None

    def references(case: Case) -> References:
        base = base_case(case)
        if base not in shared:
            try:
                result = None
                if base.variant == "backward":
                    forward = references(_functional(base)).contiguous
                    if isinstance(forward.error, Refused):
                        raise forward.error
                    result = forward.value
                prepared = call.prepare(base, functions["functional"], sample, reference_result=result, grad_seed=base.sample)
                shared[base] = References(prepared, getattr(torch, dtype), seed=base.sample, reference=getattr(entry, "reference", None),
                                          original=original(base))
            except Exception as e:
                raise _NoReference(e) from None
        return shared[base]

    return references


def _run_sample(this: _Unit, sample, index: int, swept: Swept) -> Iterator[Event]:
    """The sample's cases: each variant's layout assignments and oracle cases, then the planned cases an oracle picks
    to judge its own way (``Oracle.pick``; ``swept``: what the sweep covers of the op, the sample's place in the unit)."""
    unit, config, skip, only = this.unit, this.config, this.skip, this.only
    references = _reference_maker(this.functions, sample, unit.dtype, this.entry, refuse=only is None)
    inputs = tree.call_leaves(*call.sample_call(sample, "cpu"))
    planned_here: list[Case] = []
    for variant in this.variants:
        try:
            tensors, written = _planned_tensors(variant, inputs, references, unit, index)
        except _NoReference as e:
            yield from _skipped(unit, variant, index, "the contiguous reference raised: " + one_line(e.error), skip, only, status="raised")
            continue
        if tensors is None:
            yield from _skipped(unit, variant, index, written, skip, only)
            continue
        planned = cases_for(op=unit.op, variant=variant, dtype=unit.dtype, device=unit.device, sample=index, tensors=tensors,
                            layouts=config.layouts, written=written)
        planned_here += planned
        yield from _run_cases(this, [*planned, *this.oracles.cases_for(config.oracles, unit, variant, index)], sample, references)
    yield from _run_cases(this, this.oracles.picked(config.oracles, unit, planned_here, swept), sample, references)


def _run_cases(this: _Unit, cases: list[Case], sample, references) -> Iterator[Event]:
    for case in cases:
        if case.id in this.skip or (this.only is not None and case.id != this.only) or not _staged(this, case, searched=False):
            continue
        yield from _judged(case, lambda case=case: _run_case(
            case, this.entry, this.functions[case.variant], sample, references, this.override, this.oracles), this.config, this.only, this.clock)


def _judged(case: Case, run, config: SweepConfig, only: str | None, clock: deadline.Clock | None = None) -> Iterator[Event]:
    """``begin``, then the outcome of ``run()`` for ``case``, as the pool expects them; for a case replayed alone, its
    ``call`` between them, so that a replay that dies or hangs is reported without another worker to describe it.
    ``clock``: the unit's, which an oracle asks between the costly calls of one case (run.deadline.passed)."""
    yield "begin", case.id
    if case.id == only:
        try:
            yield "call", describe(None, config, case.id)
        except Exception:  # the pool asks another worker, as it does where this one dies first
            pass
    try:
        with deadline.running(clock, case):
            outcome = run()
    except Exception as e:  # a bug in torchsleuth, not in the op: shown apart
        outcome = Outcome(case=case, status="error", reason=f"torchsleuth failed: {one_line(e)} ({_where(e)})")
        if config.workers > 0 and only is None:
            # it may be the aftermath of an earlier case that corrupted this process's
            # heap (tril's out= does): end the worker before it says so; the pool
            # replays the case alone in a fresh one, where a real failure shows again
            os._exit(TAINTED)
    lost = outcome.status in ("raised", "error") and not device_works(case.device)
    if lost and not outcome.reason.startswith("the contiguous reference raised"):
        # the op left the device unusable (a device-side assert, a misaligned address)
        # where the same values laid out contiguously did not: a crash
        outcome = isolation_outcome(case, "crash", f"leaves {case.device} unusable: {outcome.reason}")
    yield "outcome", outcome
    if lost:
        raise DeviceLost(outcome.reason)


def _run_search(this: _Unit, planned: list[Case], picked: list[Case] = ()) -> Iterator[Event]:
    """The unit's searched cases (search), within the sweep's budget, then ``picked`` (an oracle's own pick of them,
    bounded by the oracle); each judged from scratch, as a replay is.

    When the budget leaves cases out, or its seconds run out, a ``("note", "search RAN/PLANNED")`` event says how
    many of the planned ones ran.
    """
    config, skip, only, oracles = this.config, this.skip, this.only, this.oracles
    if only is not None:  # a replay of a case the whole unit's plan chose: ``planned`` holds only its sample's cases
        for case in [*planned, *picked]:
            if case.id == only:
                yield from _judged(case, lambda case=case: run_case(case, oracles, refuse=False), config, only)
        return
    chosen = search.within(planned, config.budget)
    if this.clock.deadline:  # any share of them that runs is spread over the plan (run.deadline)
        chosen = deadline.spread(chosen)
    started, ran = time.monotonic(), 0
    for case in chosen:
        if config.budget_seconds and time.monotonic() - started > config.budget_seconds:
            break
        ran += 1
        if case.id in skip or not _staged(this, case, searched=True):
            continue
        yield from _judged(case, lambda case=case: run_case(case, oracles), config, only, this.clock)
    for case in picked:
        if case.id not in skip and _staged(this, case, searched=True):
            yield from _judged(case, lambda case=case: run_case(case, oracles), config, only, this.clock)
    if ran < len(planned) and this.stage in (None, "searched"):
        yield "note", f"search {ran}/{len(planned)}"


def _staged(this: _Unit, case: Case, *, searched: bool) -> bool:
    """Whether ``case`` (run by the search, or with its sample) is this part's stage's, and its time is not up."""
    return (this.stage is None or deadline.in_stage(this.stage, slow=this.oracles.slower(case.id) > 1, searched=searched)) and this.clock.runs(case)


def describe(unit: Unit | None, config: SweepConfig, case_id: str):
    """The call a case makes, as a CallSpec, without making it (for cases that killed a worker; ``unit`` unused)."""
    case = Case.parse(case_id)
    entry = opinfo.get(case.op)
    functions = opinfo.functions(entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sample = edits.sample_of(case)
        references = _reference_maker(functions, sample, case.dtype, entry, refuse=False)

        # the case's own references are not needed, and may be what crashes: only the
        # functional result, which shapes out= tensors and output gradients
        result = references(_functional(case)).contiguous.value if case.variant in ("out", "backward") else None
        prepared = call.prepare(case, functions[case.variant], sample, reference_result=result, grad_seed=case.sample)
        ran = call.Ran(before=call.snapshot(prepared.tensors), meta={p: call.metadata(t) for p, t in prepared.tensors.items()})
        return call.call_spec(prepared, ran, opinfo.public_name(entry, case.variant))


def run_case(case: Case, oracles: Registry = BUILTIN, *, refuse: bool = True) -> Outcome:
    """One case, whatever its layouts and edits: the shrinker's and the diagnosis's replays.

    Made from scratch (its own references), so a replay shares nothing with
    the run that found the case. ``refuse=False``: its values are sent to the
    device even where the CPU refuses them (``References.refused``).
    """
    entry = opinfo.get(case.op)
    functions = reach.calls(entry, opinfo.functions(entry), case.edits)  # an overload the edits call by name (search.overloads)
    dtype = getattr(torch, case.dtype)
    device_type = torch.device(case.device).type
    # an undeclared dtype is called all the same (a probed unit's findings replay; a refusal is ``raised``)
    if case.variant not in functions or (case.variant == "backward" and not probe.backward_allowed(entry, device_type, dtype)):
        return Outcome(case=case, status="skip", reason=f"{case.op} has no {case.variant} variant in {case.dtype} on {device_type}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = samples_of(case.op, case.dtype)
        if case.sample >= len(samples):
            return Outcome(case=case, status="skip", reason=f"{case.op} has {len(samples)} samples in {case.dtype}")
        try:
            sample = edits.apply(samples[case.sample], case.edits, op=case.op)
            own = samples[case.sample] if case.edits else None
            return _run_case(case, entry, functions[case.variant], sample, _reference_maker(functions, sample, case.dtype, entry, own, refuse),
                             opinfo.tolerance_override(entry, device_type, dtype), oracles)
        except Exception as e:
            return Outcome(case=case, status="error", reason=f"torchsleuth failed: {one_line(e)} ({_where(e)})")


def _where(error: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if "torchsleuth" in f.filename] or frames
    last = ours[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


class _NoReference(Exception):
    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def _planned_tensors(variant, inputs, references, unit, index):
    """The tensors a variant lays out, and which it writes; (None, reason) when it has none."""
    if variant in ("functional", "method"):
        return inputs, frozenset()
    if variant == "inplace":
        return inputs, frozenset(p for p in inputs if p == "input" or p.startswith("input["))
    base = Case(op=unit.op, variant="functional", dtype=unit.dtype, device=unit.device, sample=index)
    reference = references(base).contiguous
    if not reference.ok:
        raise _NoReference(reference.error)
    if variant == "out":
        outs = {p: v for p, v in tree.output_leaves(reference.value) if isinstance(v, torch.Tensor)}
        if len(outs) != len(tree.output_leaves(reference.value)):
            return None, "the result is not made of tensors, so out= has nothing to take"
        return outs, frozenset(outs)
    backward = references(Case(op=unit.op, variant="backward", dtype=unit.dtype, device=unit.device, sample=index))
    grads = {p: t for p, t in backward.base.tensors.items() if p.startswith("grad_output")}
    if not grads:
        return None, "no differentiable output"
    return {**{p: t for p, t in inputs.items() if call.differentiable(t)}, **grads}, frozenset()


def _skipped(unit, variant, index, reason, skip, only, status="skip") -> Iterator[Event]:
    case = Case(op=unit.op, variant=variant, dtype=unit.dtype, device=unit.device, sample=index)
    if case.id not in skip and (only is None or case.id == only):
        yield "begin", case.id
        yield "outcome", Outcome(case=case, status=status, reason=reason)


def _prepare(case: Case, function, sample, references) -> tuple[call.Prepared, References]:
    refs = references(case)
    if not refs.contiguous.ok:
        raise _NoReference(refs.contiguous.error)
    reference_result = (refs.contiguous.value if case.variant == "out"
                        else references(_functional(case)).contiguous.value if case.variant == "backward" else None)
    return call.prepare(case, function, sample, reference_result=reference_result, grad_seed=case.sample), refs


def _run_case(case: Case, entry, function, sample, references, override, oracles: Registry) -> Outcome:
    start = time.perf_counter()
    if case.oracle:
        subject = Subject(case=case, entry=entry, function=function, sample=sample, references=references, override=override,
                          replay=functools.partial(run_case, oracles=oracles))
        return dataclasses.replace(oracles.run(subject), seconds=time.perf_counter() - start)
    try:
        prepared, refs = _prepare(case, function, sample, references)
    except _NoReference as e:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(e.error))
    facts = facts_of(refs, case.op)
    if case.variant == "backward":  # named after the forward op
        forward = references(_functional(case))
        facts = dataclasses.replace(facts, op=read_facts(forward.trace, forward.base.tensors, forward.contiguous.value, fallback=case.op).op)
    second, prefill = None, ()
    if case.variant == "inplace" and facts.random_fill:
        prepared, ran, second, prefill = _prefilled_runs(case, function, sample)
    else:
        ran = call.execute(prepared)
    evidence = Evidence(prepared, ran, refs, facts, function_name=reach.name_of(function) or opinfo.public_name(entry, case.variant),
                        second=second, prefill=prefill)
    outcome = judge(evidence, override=override)
    reached = reach.reached(refs.trace.ops, function, evidence.op if case.variant in ("inplace", "out") else "")
    return Outcome(case=case, status=outcome.status, reason=outcome.reason, findings=outcome.findings, seconds=time.perf_counter() - start,
                   reached=reached)


def _prefilled_runs(case, function, sample):
    """Two runs of a random in-place case, self filled with a different value before each.

    Returns the first run's call and result, the second's result, and the fills.
    """
    runs = []
    dtype = getattr(torch, case.dtype)
    fills = call.prefills(dtype)  # what self is filled with before each run (run.call.PREFILLS)
    for fill in fills:
        prepared = call.prepare(case, function, sample)
        with torch.no_grad():
            for path in prepared.written:
                prepared.tensors[path].fill_(fill)
                prepared.host.pop(path, None)  # no longer what the tensor holds
        runs.append((prepared, call.execute(prepared)))
    (prepared, first), (_, second) = runs
    return prepared, first, second, fills
