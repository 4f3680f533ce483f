"""The ``capability`` oracle: the CPU's instruction-set paths agree with each other.

Design note. ATen builds most CPU kernels several times, once per instruction
set (``default``: scalar code and libm; ``avx2`` and ``avx512``: vectors and
SLEEF on x86; ``vsx``, ``zvector``, ``sve256`` elsewhere), and picks one per
process from ``ATEN_CPU_CAPABILITY``. A bug in one build is invisible to every
other reference, which runs the same build. This oracle makes each sample's
contiguous functional call, and its backward, under every selected
capability and compares the results with each other.

* Which: ``TORCHSLEUTH_CPU_CAPABILITIES`` (set by ``--cpu-capabilities``),
  validated on read; by default every capability this CPU supports (the
  ladder up to the one a process picks by itself). The case's oracle name
  carries the list (``capability:default,avx2,avx512``), so a replay from the
  id (the shrinker, ``repro``) compares the same ones.
* Where: the worker's own capability is computed in the worker; every other
  one in a long-lived peer process per capability (peers.py), started by
  the worker on its first case and fed the call's tensors byte for byte.
* Against what: the worker's own capability when it is selected (what users
  run), else the highest one selected.
* Policy: implementations may differ in the last bits (scalar libm against
  SLEEF, another summation order in a vector reduction). A difference is a
  finding only when it exceeds the op's tolerance (the judge's rule, as for
  the layout reference: the table, widened by the op's measured sensitivity,
  twice since both sides round), or changes the class of a value (NaN against
  a number, an infinity against a finite value), or changes an integer or
  bool result at all (up to the declared tie canonicalisers). Smaller bitwise
  differences are counted in the pass outcome's reason ("avx2: 3/25 elements
  differ in their last bits").
* Not judged: random ops (each build draws its own way) and uninitialized
  results; an op that raises under one capability only is noted, not
  reported (it is loud). A peer that dies or hangs on the call, where this
  process returned, is a finding.

A finding carries a ``Detail`` record (detail.py: the capabilities, the
reference, the threads, the ``--import`` modules); the repro script
(script.py) reads it back, runs the call in a child process per capability
(itself, re-run with ``ATEN_CPU_CAPABILITY`` set) and checks the same property.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from functools import cache

import torch

from ...cases import opinfo
from ...cases.records import Case, Unit
from ...dtypes import is_inexact
from ...errors import UsageError
from ...judge import compare as cmp
from ...judge import nearer
from ...judge.context import Context, bits_equal
from ...judge.verdict import one_line
from ...judge.plugin import Oracle, encode_detail
from ...judge.records import Mismatch, Outcome
from ...judge.values import value_classes
from ...run import call
from ...run.evidence import Evidence
from ...run.facts import facts as read_facts
from ...run.facts import of_references as facts_of
from ...run.imports import loaded
from . import peers
from .detail import Detail
from .script import script

DESCRIPTION = "each case under every CPU instruction set (ATEN_CPU_CAPABILITY), compared (--cpu-capabilities)"
KIND, REFERENCE = "capability_mismatch", "capability"
# What ATEN_CPU_CAPABILITY accepts, per architecture, lowest first.
LADDERS = (("default", "avx2", "avx512"), ("default", "vsx"), ("default", "zvector"), ("default", "sve256"))
KNOWN = tuple(dict.fromkeys(name for ladder in LADDERS for name in ladder))


# --- which capabilities ---------------------------------------------------------------------


@cache
def supported() -> tuple[str, ...]:
    """The capabilities this CPU runs, lowest first: the ladder up to what a process picks by itself."""
    native = _native()
    for ladder in LADDERS:
        if native in ladder:
            return ladder[: ladder.index(native) + 1]
    return ("default", native) if native != "default" else ("default",)


def _native() -> str:
    if "ATEN_CPU_CAPABILITY" not in os.environ:
        return peers.current()
    # this process was pinned by the user: ask a process that was not
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    answer = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    return peers.capability_name(answer.stdout.strip())


def resolve(text: str | None) -> tuple[str, ...]:
    """The capabilities ``text`` names ("avx2,avx512", "all", empty: all supported), lowest first."""
    have = supported()
    if text is None or not text.strip() or text.strip() == "all":
        chosen = have
    else:
        chosen = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
        for name in chosen:
            if name not in KNOWN:
                raise UsageError(f"unknown CPU capability {name!r}; known: {', '.join(KNOWN)} (this CPU: {', '.join(have)})")
            if name not in have:
                raise UsageError(f"this CPU does not support the {name} capability; it supports {', '.join(have)}")
    chosen = tuple(name for name in have if name in chosen)
    if len(chosen) < 2:
        raise UsageError(f"the capability oracle compares two capabilities or more; this CPU supports {', '.join(have)}"
                         + (f", and {chosen[0]} alone was chosen" if chosen and len(have) > 1 else ""))
    return chosen


def compared_capabilities(case: Case) -> tuple[str, ...]:
    """The capabilities a case's oracle name lists (``capability:default,avx2``); none listed: every supported one."""
    _, _, listed = case.oracle.partition(":")
    return tuple(listed.split(",")) if listed else resolve(None)


# --- the oracle ---------------------------------------------------------------------------------


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    """One case per functional and backward sample on the CPU, naming the capabilities compared.

    ``option``: the capabilities chosen (``--cpu-capabilities``, carried in
    ``SweepConfig.oracles`` as ``capability:LIST``); none: every one this CPU has.
    """
    if torch.device(unit.device).type != "cpu" or variant not in ("functional", "backward"):
        return []
    return [f"capability:{','.join(resolve(option or None))}"]


def run(subject) -> Outcome:
    case = subject.case
    capabilities = compared_capabilities(case)
    own = peers.current()
    reference = own if own in capabilities else capabilities[-1]
    # what the finding carries for its script; the --import modules this process loaded, the peers load too
    detail = Detail(capabilities=capabilities, reference=reference, worker=own, threads=torch.get_num_threads(), imports=loaded())
    plain = dataclasses.replace(case, oracle="")
    try:
        refs = subject.references(plain)
        functional = None
        if case.variant == "backward":
            forward = subject.references(peers.functional_of(case))
            if not forward.contiguous.ok:
                raise forward.contiguous.error
            functional = forward.contiguous.value
        prepared = peers.make_call(case, subject.function, subject.sample, functional)
    except Exception as e:
        return Outcome(case=case, status="raised", reason="the call could not be made: " + one_line(getattr(e, "error", e)))
    if not refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(refs.contiguous.error))
    facts = facts_of(refs, case.op)
    if case.variant == "backward":  # named after the forward op
        forward = subject.references(peers.functional_of(case))
        named = read_facts(forward.trace, forward.base.tensors, forward.contiguous.value, fallback=case.op)
        facts = dataclasses.replace(facts, op=named.op)
    if facts.random:
        return Outcome(case=case, status="skip", reason="a random op: each instruction set may draw its own numbers")
    if facts.uninitialized:
        return Outcome(case=case, status="skip", reason="the result is uninitialized memory: no values to compare")

    ran = call.Ran(before=call.snapshot(prepared.tensors), meta={p: call.metadata(t) for p, t in prepared.tensors.items()})
    evidence = Evidence(prepared, ran, refs, facts, function_name=opinfo.public_name(subject.entry, case.variant))
    ctx = Context(evidence, subject.override)
    results, notes = _results(prepared, ran, detail, ctx)
    if isinstance(results, Outcome):
        return results
    if reference not in results:
        return Outcome(case=case, status="raised", reason=f"under {reference}: {notes[reference]}")
    ran.result = dict(results[reference])
    expected = results[reference]
    tallies = []
    for capability in capabilities:
        if capability == reference or capability not in results:
            continue
        actual = results[capability]
        found = _differences(ctx, actual, expected)
        if found:
            if evidence.nondeterministic:
                notes[capability] = f"differs from {reference}, but the call is not reproducible even under one capability"
                continue
            _report(ctx, capability, found[0], actual, expected, detail)
            break
        tallies.append(_tally(capability, actual, expected))
    status = "finding" if ctx.findings else "pass"
    reason = f"compared with {reference}: " + "; ".join(tallies + [f"{c}: {n}" for c, n in notes.items()])
    return Outcome(case=case, status=status, reason=reason, findings=tuple(ctx.findings))


def _results(prepared, ran, detail: Detail, ctx):
    """Capability -> the result's leaves; capability -> why it has none. An Outcome instead when done."""
    case = prepared.case
    capabilities, own = detail.capabilities, detail.worker
    results, notes = {}, {}
    data = None
    for capability in capabilities:
        if capability == own:
            try:
                results[capability] = peers.leaves_of(call.compute(prepared, call.rebuilt(ran, prepared)))
            except Exception as e:
                notes[capability] = "raised " + one_line(e)
            continue
        data = data if data is not None else peers.pack(prepared.tensors)
        try:
            peer = peers.peers(tuple(c for c in capabilities if c != own), detail.imports)[capability]
            kind, payload = peer.request(case.id, data)
        except peers.PeerFailed as e:
            return Outcome(case=case, status="error", reason=f"torchsleuth failed: {e}"), notes
        except (peers.PeerDied, peers.PeerHung) as e:
            ctx.report(KIND, REFERENCE, f"{ctx.name()} {_failure(e)} under ATEN_CPU_CAPABILITY={capability}, where {own} returns",
                       Mismatch(path="process", attribute="exit", expected="a result", actual=str(e)),
                       detail=_compared(detail), data=encode_detail(detail))
            return Outcome(case=case, status="finding", findings=tuple(ctx.findings)), notes
        if kind == "error":
            return Outcome(case=case, status="error", reason=payload), notes
        if kind == "raised":
            notes[capability] = "raised " + payload
        else:
            results[capability] = peers.result_of(payload)
    return results, notes


def _failure(error: Exception) -> str:
    return "kills its process" if isinstance(error, peers.PeerDied) else "never returns"


def _compared(detail: Detail) -> str:
    """What was compared, in words, for the finding's ``detail``."""
    text = f"compared under {', '.join(detail.capabilities)} (the worker ran {detail.worker}, {detail.threads} thread(s))"
    return text + (f"; --import {' '.join(detail.imports)}" if detail.imports else "")


# --- judging -----------------------------------------------------------------------------------


def _differences(ctx: Context, actual: list, expected: list) -> list[Mismatch]:
    """Where ``actual`` is not ``expected`` by the policy of the design note; none: they agree."""
    a, e = dict(actual), dict(expected)
    found = []
    if [p for p, _ in actual] != [p for p, _ in expected]:
        return [Mismatch(path="out", attribute="structure", expected=str(list(e)), actual=str(list(a)))]
    for path in e:
        classes = _class_mismatch(path, a[path], e[path])
        if classes is not None:
            found.append(classes)
    inexact = {p for p, v in expected if isinstance(v, torch.Tensor) and is_inexact(v.dtype)}
    exact = [m for m in cmp.compare(actual, expected, tolerance=ctx.tolerance) if m.path not in inexact or m.attribute != "values"]
    found += ctx.canonical(exact, actual, expected, {})
    if any(p in inexact for p in e):
        numbers = [m for m in ctx.differs(a, e, scale=2.0) if m.path in inexact and m.attribute == "values"]
        found += [m for m in numbers if m.path not in {f.path for f in found}]
    return found


def _class_mismatch(path: str, a, e) -> Mismatch | None:
    """The first element (complex: part) whose class (judge.values) ``a`` changes from ``e``; None if none does."""
    if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or a.shape != e.shape:
        return None
    if not (is_inexact(a.dtype) and is_inexact(e.dtype)) or a.layout != torch.strided:
        return None
    ca, ce = value_classes(a), value_classes(e)
    bad = ca != ce
    if not bool(bad.any()):
        return None
    flat = int(bad.reshape(-1).to(torch.uint8).argmax())
    shape = ca.shape
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()
    av, ev = a.detach().cpu(), e.detach().cpu()
    if av.is_complex():
        av, ev = torch.view_as_real(av.resolve_conj()), torch.view_as_real(ev.resolve_conj())
    show = lambda t: f"{float(t.reshape(-1)[flat]):.6g}"  # noqa: E731
    return Mismatch(path=path, attribute="class", expected=f"{show(ev)} at {list(index)}",
                    actual=f"{show(av)} ({int(bad.sum())} of {bad.numel()} elements change class)",
                    mismatched=int(bad.sum()), numel=bad.numel(), worst_index=index)


def _tally(capability: str, actual: list, expected: list) -> str:
    """How many elements differ in their bits (within tolerance), for the pass reason."""
    differ = total = 0
    largest = 0.0
    for (_, a), (_, e) in zip(actual, expected):
        tensors = isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
        if tensors and a.shape == e.shape and a.layout == torch.strided and e.layout == torch.strided:
            same = bits_equal(a, e)
            differ += int((~same).sum())
            total += a.numel()
            if is_inexact(a.dtype) and not bool(same.all()):
                work = torch.complex128 if a.is_complex() else torch.float64
                gap = torch.nan_to_num((a.detach().cpu().to(work) - e.detach().cpu().to(work)).abs(), nan=0.0)
                largest = max(largest, float(gap.max()))
    if not differ:
        return f"{capability} bit-identical"
    return f"{capability} {differ}/{total} elements differ in their last bits (largest {largest:.3g}, within tolerance)"


def _report(ctx: Context, capability, mismatch: Mismatch, actual, expected, detail: Detail) -> None:
    reference = detail.reference
    closer = nearer.clause(ctx.ev.refs, mismatch, mismatch.path, {capability: actual, reference: expected},
                           reference=f"float64 (under {peers.current()})")
    summary = f"{ctx.name()} under ATEN_CPU_CAPABILITY={capability} differs from {reference} beyond tolerance{closer}"
    ctx.report(KIND, REFERENCE, summary, dataclasses.replace(mismatch, path=f"{mismatch.path} under {capability}"),
               detail=f"expected: the result under {reference}; " + _compared(detail), data=encode_detail(detail))


ORACLE = Oracle(name="capability", description=DESCRIPTION, cost="costly", plan=plan, run=run, script=script, on_values=True,
                option=lambda text: ",".join(resolve(text)))
