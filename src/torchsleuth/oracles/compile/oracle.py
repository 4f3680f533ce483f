"""The ``compile`` oracle: torch.compile (inductor) agrees with eager, and leaves eager alone.

Design note. Inductor generates its own kernels (C++ on the CPU, Triton on
GPUs), so eager is a reference for them and they for eager. For the
contiguous functional call of each sample (not every layout: compiling costs
about a second a graph) this oracle

1. reads a fingerprint of global state (``STATE``: flush-denormal mode, by a
   probe, since torch has no getter for it; the default dtype and device;
   threads; deterministic algorithms; grad mode; matmul precision; the
   mkldnn, cuDNN and TF32 flags);
2. runs the call eagerly;
3. runs it through ``torch.compile(backend="inductor", fullgraph=True,
   dynamic=False)``;
4. reads the fingerprint again and runs the call eagerly again.

It judges the compiled result against eager by the judge's tolerance rule
(the table widened by the op's measured sensitivity, twice since both sides
round: inductor reorders and fuses floating point), and eager after against
eager before bit for bit, and the fingerprint for any change: a compile that
changes global state (flags, caches) silently changes later eager results,
which the op's own samples may not show (no OpInfo sample has a subnormal, so
flush-denormal mode changes none of them). A changed flag is set back
afterwards, so that one bad compile does not spill into later cases. Each is
its own finding (``compile_mismatch``), told apart by its ``Detail`` record
(detail.py: the aspect, ``compiled``, ``after`` or ``state``, which its
repro script, script.py, reads back), the mismatch's path (``compiled``,
``eager after compile``, ``global state``) and the summary, which also says
which side float64 agrees with. Random ops (inductor draws
with its own generator) and uninitialized results are compared by metadata
only, compiled against eager; uninitialized results also eager after
against eager before. A compile that raises (a graph break under ``fullgraph``, an
unsupported op) is the case's ``raised`` outcome with the reason, not a
finding.

Costs. One compiled function per op, dtype and device, kept while the
worker's cases stay on it, and inductor's on-disk caches off (compiler.py).

The compiled variant. With the option ``sampled`` (``compile:sampled``: the
default of a pointed run, and what ``--compile`` adds to the above), the
oracle instead picks a bounded sample of the sweep's own cases, every variant
and layout, and judges each compiled by the references and contracts
(variant.py); and it compiles short chains of two to four ops around the
op, judged against eager and float64, shrunk to the fewest ops that still
differ (chains.py, chain_steps.py). With ``catalog`` (``compile:catalog``: what
``--compile`` adds to a whole-catalog run), the same within the catalog's
budget: four compiled cases, one searched case and one chain an op.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable

import torch

from ...cases import opinfo
from ...cases.records import Case, Unit
from ...judge import compare as cmp
from ...judge import nearer
from ...judge.calls import make_call
from ...judge.context import Context
from ...judge.verdict import one_line
from ...judge.plugin import Oracle, encode_detail
from ...judge.records import Mismatch, Outcome
from ...run import call, tree
from ...run.evidence import Evidence
from ...run.facts import of_references as facts_of
from ...run.imports import loaded
from . import chain_script, chain_steps, chains, variant
from .compiler import COMPILER, uncached
from .detail import AFTER, COMPILED, STATE, Detail
from .script import script

DESCRIPTION = "each sample's contiguous call through torch.compile (inductor) against eager, and eager rerun after it (--compile)"
KIND, REFERENCE = "compile_mismatch", "compile"
# Each aspect (detail.ASPECTS) as a finding's Mismatch.path begins ("eager after compile: out") and its id names it.
PATHS = {COMPILED: "compiled", AFTER: "eager after compile", STATE: "global state"}
# A compile case may take this many of the sweep's --timeout: inductor generates and builds its kernels
# (Triton's on a GPU) in the case; on the H200 with 14 workers the last samples of arange, linspace and
# logspace took 34 to 57 s to compile, and were called hangs at 60 s (bench/deep-compile.md).
SLOWER = 5


def plan(unit: Unit, variant_: str, sample: int, option: str = "") -> list[str]:
    """Each sample's contiguous functional call, with --compile (no option); ``sampled`` leaves them to the variant."""
    return ["compile"] if variant_ == "functional" and option not in variant.OPTIONS else []


# --- global state ---------------------------------------------------------------------------------


def _flush_denormal() -> bool:
    """Whether subnormals are flushed: torch has a setter and no getter, so a probe."""
    tiny = torch.tensor([1e-39], dtype=torch.float32)  # a float32 subnormal
    return bool((tiny * torch.tensor([1.0], dtype=torch.float32)).item() == 0.0)


def _attr(owner, name):
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _state_table() -> dict[str, tuple[Callable, Callable]]:
    """Flag -> (read, write). Only what this torch has: the flags moved between releases."""
    found = {
        "flush_denormal": (_flush_denormal, torch.set_flush_denormal),
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "deterministic_algorithms": (
            lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "mkldnn.enabled": _attr(torch.backends.mkldnn, "enabled"),
        "cudnn.enabled": _attr(torch.backends.cudnn, "enabled"),
        "cudnn.benchmark": _attr(torch.backends.cudnn, "benchmark"),
        "cudnn.deterministic": _attr(torch.backends.cudnn, "deterministic"),
        "cudnn.allow_tf32": _attr(torch.backends.cudnn, "allow_tf32"),
        "cuda.matmul.allow_tf32": _attr(torch.backends.cuda.matmul, "allow_tf32"),
        "cuda.matmul.allow_fp16_reduced_precision_reduction": _attr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": _attr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
    }
    if hasattr(torch, "get_default_device"):
        found["default_device"] = (lambda: str(torch.get_default_device()), torch.set_default_device)
    if hasattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction"):
        found["cpu.allow_fp16_reduced_precision_reduction"] = (torch._C._get_cpu_allow_fp16_reduced_precision_reduction,
                                                              torch._C._set_cpu_allow_fp16_reduced_precision_reduction)
    return found


def state() -> dict[str, object]:
    """The fingerprint: flag -> value (a flag this torch cannot read is left out)."""
    found = {}
    for name, (read, _) in _state_table().items():
        try:
            found[name] = read()
        except Exception:
            continue
    return found


def _restore(before: dict, after: dict) -> None:
    table = _state_table()
    for name, value in before.items():
        if after.get(name) != value:
            try:
                table[name][1](value)
            except Exception:
                pass


# --- the oracle ---------------------------------------------------------------------------------------


def run(subject) -> Outcome:
    case = subject.case
    if chain_steps.of_oracle(case.oracle) is not None:  # compile:chain:...: a short program around the op (chains.py)
        return chains.run(subject)
    if case.oracle != "compile":  # compile:static, compile:dynamic: a case of the sweep's, compiled
        return variant.run(subject)
    if case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the compile oracle compiles functional calls only")
    try:
        refs = subject.references(dataclasses.replace(case, oracle=""))
    except Exception as e:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(getattr(e, "error", e)))
    if not refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(refs.contiguous.error))
    facts = facts_of(refs, case.op)
    # the sweep plans the contiguous call; the diagnosis asks for laid-out neighbours too
    prepared = make_call(case, subject.function, subject.sample)
    before_state = state()
    ran = call.Ran(before=call.snapshot(prepared.tensors), meta={p: call.metadata(t) for p, t in prepared.tensors.items()})
    try:
        ran.result = _eager(prepared, call.rebuilt(ran, prepared))
    except Exception as e:
        return Outcome(case=case, status="raised", reason=one_line(e))
    compiled, failure, graphs = None, None, 0
    try:
        compiled, graphs = _compiled(case, subject.function, prepared, call.rebuilt(ran, prepared))
    except Exception as e:
        failure = e
    after_state = state()
    try:
        after = _eager(prepared, call.rebuilt(ran, prepared))
    except Exception as e:
        after, failure = None, failure or e

    ctx = Context(Evidence(prepared, ran, refs, facts, function_name=opinfo.public_name(subject.entry, case.variant)), subject.override)
    changed = {name: (value, after_state.get(name)) for name, value in before_state.items() if after_state.get(name) != value}
    if changed:
        _restore(before_state, after_state)
        name, (was, now) = next(iter(changed.items()))
        others = f" (and {', '.join(list(changed)[1:])})" if len(changed) > 1 else ""
        _report(ctx, Detail(aspect=STATE, imports=loaded()),
                f"compiling {ctx.short()} [{case.dtype}] with torch.compile changed global state: {name} {was} -> {now}{others}",
                Mismatch(path=PATHS[STATE], attribute=name, expected=str(was), actual=str(now)))
    if after is not None:
        moved = cmp.compare(cmp.flatten(after), cmp.flatten(ran.result), tolerance=ctx.tolerance, bitwise=True)
        if facts.uninitialized:  # empty* hands back whatever memory it gets: metadata only
            moved = [m for m in moved if m.attribute != "values"]
        if moved and not ctx.ev.nondeterministic:
            _report(ctx, Detail(aspect=AFTER, imports=loaded()),
                    f"{ctx.name()} gives other results in eager after torch.compile compiled it than before",
                    dataclasses.replace(moved[0], path=f"{PATHS[AFTER]}: {moved[0].path}"))
    if compiled is not None:
        _judge_compiled(ctx, compiled, facts)
    if ctx.findings:
        return Outcome(case=case, status="finding", findings=tuple(ctx.findings))
    if failure is not None:
        inner = getattr(failure, "inner_exception", None)  # BackendCompilerFailed wraps inductor's own error
        return Outcome(case=case, status="raised", reason="torch.compile raised: " + one_line(failure)
                       + (f" ({one_line(inner)})" if inner is not None else ""))
    how = "compiled a new graph" if graphs else "ran a graph compiled for an earlier case (same shapes)"
    return Outcome(case=case, status="pass", reason=f"torch.compile {how}; state unchanged")


def _eager(prepared, tensors):
    result = call.compute(prepared, tensors)
    call.synchronize(prepared.case.device)
    return result


def _compiled(case: Case, function: Callable, prepared, tensors):
    """The compiled call's result, and how many graphs inductor compiled for it (0: one was reused)."""
    compiled = COMPILER.get(case, function)
    graphs = COMPILER.graphs
    args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, tensors)
    call.seed(case.device)
    with uncached():
        result = compiled(args, kwargs)
    call.synchronize(case.device)
    return result, COMPILER.graphs - graphs


def _judge_compiled(ctx: Context, compiled, facts) -> None:
    eager = ctx.ev.ran.result
    values_compared = not (facts.random or facts.uninitialized)
    if not values_compared:
        # inductor draws with its own generator; garbage is garbage: metadata only
        found = [m for m in cmp.compare(cmp.flatten(compiled), cmp.flatten(eager), tolerance=ctx.tolerance) if m.attribute != "values"]
    else:
        found = ctx.differs(compiled, eager, scale=2.0)
    if not found:
        return
    if found[0].attribute == "values" and ctx.ev.nondeterministic:
        ctx.notes.append("compiled differs from eager, but eager itself is not reproducible")
        return
    near = nearer.clause(ctx.ev.refs, found[0], found[0].path, {"compiled": cmp.flatten(compiled), "eager": cmp.flatten(eager)},
                         reference="eager float64")
    summary = f"{ctx.name()} compiled by torch.compile (inductor) differs from eager beyond tolerance{near}"
    _report(ctx, Detail(aspect=COMPILED, values_compared=values_compared, imports=loaded()), summary,
            dataclasses.replace(found[0], path=f"{PATHS[COMPILED]}: {found[0].path}"))


def _report(ctx: Context, detail: Detail, summary: str, mismatch: Mismatch) -> None:
    """A finding whose id names its aspect too: one case can hold all three.

    ``detail.imports``: the --import modules this process loaded; the repro script imports them too.
    """
    words = PATHS[detail.aspect]
    prose = f"{words}; torch.compile(backend='inductor', fullgraph=True, dynamic=False)"
    prose += f"; --import {' '.join(detail.imports)}" if detail.imports else ""
    ctx.report(KIND, REFERENCE, summary, mismatch, detail=prose, data=encode_detail(detail))
    finding = ctx.findings[-1]
    digest = hashlib.sha256(f"{ctx.case.id}|{KIND}|{REFERENCE}|{words}".encode()).hexdigest()[:10]
    ctx.findings[-1] = dataclasses.replace(finding, id=f"f-{digest}")


def _script(finding, torch_version: str) -> str | None:
    """A chain's script (chain_script.py), or the script of any other compile finding (script.py)."""
    if chain_steps.of_oracle(Case.parse(finding.case_id).oracle) is not None:
        return chain_script.script(finding, torch_version)
    return script(finding, torch_version)


def pick(unit: Unit, planned: list[Case], option: str, swept) -> list[Case]:
    """The compiled variant's cases of a sample (variant.py), then its compiled chains (chains.py)."""
    return variant.pick(unit, planned, option, swept) + chains.pick(unit, planned, option, swept)


ORACLE = Oracle(name="compile", description=DESCRIPTION, cost="costly", plan=plan, run=run, script=_script, slower=SLOWER,
                option=variant.option, pick=pick, moves=chains.moves, weight=chains.weight)
