"""Judging a shard case: the sharded answer against the single-device one, findings as records.

Design note. The oracle: on every rank, ``full_tensor()`` of each output (and
each gradient, for ``backward``) equals the plain op's result on the full
tensors. ``full_tensor()`` reconstructs through the placements the sharding
rule claimed, so one comparison checks both that the values are right and
that the claimed placement reconstructs them; comparing every rank, not
one, catches a rule that claims Replicate where ranks hold different
values. A wrong output is a ``sharding_mismatch`` (reference ``sharding``);
so is a result whose values are right but whose spec does not describe it (run.py's ``spec``: an
in-place op that changed the shape and left the spec as it was), and a
Python number the ranks read differently (each rank returns its own share:
the summary says so, with each rank's number).

Tolerance. A sharded op reduces in another order than the plain one (local
sums, then a collective), and Partial inputs carry their shares' rounding.
Element ``i`` of a result in dtype ``d`` may differ by

    allowed_i = atol + rtol*|e_i| + F(d, n) * k_i + SCALE_ULPS * u_d * max|e|

with judge.tolerance's table and constants (tolerance.py computes it): ``k_i`` is how far the float64
result moves when every floating input is nudged by up to one unit of
roundoff of ``d`` (and, when an input is Partial, by ``u_d * (|x| + 1)``, the
size of a share's rounding), ``F`` is judge.tolerance's slack factor for
reduction length ``n`` (input elements per output element). Integer results
must be equal except where a nudge moves the float64 result (an argmax at a
near-tie). The allowance is computed only when the table alone fails: most
cases pay for no float64 runs. A wrong rule is off by the values
themselves, orders of magnitude beyond it.

Two more finding kinds are never the op's: ``roundtrip_mismatch`` (an
argument does not come back from distribute -> ``full_tensor()``, so the op
was not judged on that placement) and ``simulator_mismatch`` (gloo.py:
LocalTensorMode and real process groups disagree). A simulated case that
LocalTensorMode cannot judge (a round trip that fails, a result it cannot
gather) is, in a sweep, rerun on real gloo ranks (``recheck``: its
simulated outcome a skip that says so, with no finding yet), and the round
trip's finding says whose bug it is (``roundtrip_finding``): the
simulator's, when the real round trip succeeds; DTensor's own
(distribute_tensor/full_tensor on real process groups) when it fails there
too; "not rechecked" when the case was only simulated. A case that left its
real ranks with no answer (``Ran.status`` "hang") is a ``hang`` finding,
as a worker that hangs is in the ops sweep; "error" is torchsleuth's own
failure on a rank.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import torch

from ..cases import opinfo
from ..cases.records import Case, VARIANT_WORDS
from ..judge import compare as cmp
from ..judge.isolation import isolation_outcome
from ..judge.records import Finding, Mismatch, Outcome
from ..judge.tolerance import table
from ..run import tree
from ..run.records import CallSpec, TensorSpec
from . import cases as shard_cases, composites, placements as placing, randomness, surface, tolerance
from .run import Ran, _compute

# In the reason of a simulated case LocalTensorMode could not judge, which the sweep reruns on real gloo ranks.
RECHECK = "rerun on real gloo ranks"


def outcome(case: Case, ran: Ran, *, blame=None, seconds: float = 0.0, backend: str = "", recheck: bool = False) -> Outcome:
    """The case's outcome from what it gave; ``blame()`` reruns it naming the wrong rule (only on a finding).

    ``backend``: the real process groups ``ran`` came from ("gloo", "nccl"),
    "" when simulated. ``recheck``: a case the simulator cannot judge is left
    to the sweep's rerun on real ranks (see the design note).
    """
    if ran.status == "skip":
        again = recheck and ran.facts.get("simulator_failure")
        return Outcome(case=case, status="skip", reason=_named(case, ran.reason) + (f"; {RECHECK}" if again else ""),
                       seconds=seconds)
    if ran.status == "unsupported":
        return Outcome(case=case, status="skip", reason=f"unsupported: {_named(case, _unsupported_words(ran))}", seconds=seconds)
    if ran.status in ("raised", "error"):
        return Outcome(case=case, status=ran.status, reason=_named(case, ran.reason), seconds=seconds)
    if ran.status == "hang":
        return dataclasses.replace(isolation_outcome(case, "hang", ran.reason), seconds=seconds)
    if ran.status == "roundtrip" and recheck and not backend:
        return Outcome(case=case, status="skip", reason=f"not judged under LocalTensorMode ({RECHECK}): {ran.reason}",
                       seconds=seconds)
    if ran.status == "roundtrip":
        finding = roundtrip_finding(case, ran, backend=backend)
        return Outcome(case=case, status="skip", reason=f"not judged: {finding.summary} ({finding.id})", findings=(finding,),
                       seconds=seconds)
    if ran.status == "claim":
        path = ran.reason.split(":", 1)[0]
        wrong = [([], Mismatch(path=path, attribute="placement", expected=f"local values {placing.words(ran.claimed.get(path, ''))} describes",
                               actual=ran.reason.split(": ", 1)[1][:300]))]
    elif surface.is_random(case.op):  # values drawn under one seed: what DTensor promises (randomness.py)
        wrong = randomness.mismatches(case.op.removeprefix(surface.PREFIX), ran, shard_cases.sample_of(case).input,
                                      placed={p for p, _ in case.layouts}, ranks=shard_cases.mesh_of(case).ranks)
    else:
        wrong = mismatches(case, ran)
    if not wrong and ran.facts.get("spec"):  # right values, a spec that does not describe them (run.spec_words)
        path, how = ran.facts["spec"].split(": ", 1)
        wrong = [([], Mismatch(path=path, attribute="spec", expected="a spec that describes the tensor", actual=how[:300]))]
    if not wrong:
        return Outcome(case=case, status="pass", seconds=seconds)
    steps = ran.steps
    if blame is not None and not surface.is_random(case.op):  # a rerun would draw other values
        try:
            again = blame()
            steps = again.steps or steps
        except Exception:  # naming the rule is a courtesy; the finding stands without it
            pass
    return Outcome(case=case, status="finding", findings=(sharding_finding(case, ran, wrong, steps),), seconds=seconds)


def mismatches(case: Case, ran: Ran) -> list[tuple[list[int], Mismatch]]:
    """For each result path that is wrong: the ranks it is wrong on and the worst rank's mismatch."""
    found = []
    allowance = None
    for path, expected in ran.expected.items():
        values = ran.actual.get(path)
        if values is None:
            found.append(([], Mismatch(path=path, attribute="structure", expected="a result", actual="none")))
            continue
        bad, worst = [], None
        for rank, value in enumerate(values):
            if ran.facts.get("uninitialized") and isinstance(expected, torch.Tensor) and isinstance(value, torch.Tensor):
                # empty*: the values are whatever memory held; shape and dtype are the result
                wrong = cmp.compare_leaf(path, torch.zeros_like(value), torch.zeros_like(expected), tolerance=table)
            else:
                wrong = cmp.compare_leaf(path, value, expected, tolerance=table)
            if wrong is not None and wrong.attribute == "values" and isinstance(expected, torch.Tensor):
                if allowance is None:
                    allowance = _allowance(case, ran)
                wrong = cmp.compare_leaf(path, value, expected, tolerance=table, slack=allowance.get(path))
            if wrong is not None:
                bad.append(rank)
                if worst is None or (wrong.max_abs_err or 0) > (worst.max_abs_err or 0):
                    worst = wrong
        if bad:
            found.append((bad, worst))
    extra = sorted(set(ran.actual) - set(ran.expected))
    for path in extra:
        found.append(([], Mismatch(path=path, attribute="structure", expected="no such result", actual="a result")))
    return found


def _allowance(case: Case, ran: Ran) -> dict[str, torch.Tensor]:
    """Per result path, the slack beyond the table (see the design note: tolerance.allowance), as float64 tensors."""
    sample = shard_cases.sample_of(case)
    function = shard_cases.function(case.op)
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    tensors = tree.call_leaves(args, kwargs)
    grad_paths = [p for p, t in tensors.items() if t.is_floating_point() or t.is_complex()] if case.variant == "backward" else []
    return tolerance.allowance(lambda given: _compute(function, sample, args, kwargs, given, grad_paths, "cpu"), tensors, ran.expected,
                               getattr(torch, case.dtype), reduction=ran.facts.get("reduction", 1), partial=ran.facts.get("partial", False),
                               partial_ranks=_partial_ranks(case))


def _partial_ranks(case: Case) -> int:
    """How many ranks the shares of the case's Partial inputs are split over (the most of any argument)."""
    shape = shard_cases.mesh_of(case).shape
    return max((math.prod(shape[d] for d, part in enumerate(pl.split(".")) if part.startswith("P")) for _, pl in case.layouts),
               default=1) or 1


# --- findings ---------------------------------------------------------------------------


def sharding_finding(case: Case, ran: Ran, wrong, steps) -> Finding:
    mesh = shard_cases.mesh_of(case)
    ranks, worst = max(wrong, key=lambda w: (w[1].max_abs_err or 0) if w[1].max_abs_err is not None else float("inf"))
    path = worst.path
    # the first op whose own output is wrong; failing that, the first whose output cannot be gathered
    blamed = next((s for s in steps if s.wrong and not s.wrong.startswith("output")), None) or next((s for s in steps if s.wrong), None)
    dtensor_ops = list(dict.fromkeys(s.op for s in steps))
    op = blamed.op if blamed else (dtensor_ops[0] if len(dtensor_ops) == 1 else case.op)
    where = placed_words(case)
    claimed = ran.claimed.get(path)
    claim = f" (the rule claims {placing.words(claimed)})" if claimed else ""
    on = _ranks_words(ranks, mesh.ranks)
    if worst.attribute == "placement":
        summary = (f"{_op_words(case)} on a {mesh.name} mesh with {where}: the rule claims {placing.words(claimed or '')} for "
                   f"{path}, but the local values do not reconstruct through it: full_tensor() raises ({worst.actual}).")
        if blamed:
            summary += f" First wrong rule: {blamed.words()}."
        return _sharding(case, ran, wrong, steps, op, summary, worst)
    if worst.attribute == "spec":
        summary = (f"{_op_words(case)} on a {mesh.name} mesh with {where}: after the call, the DTensor spec of {path} "
                   f"({placing.words(claimed or '')}) no longer describes it: {worst.actual}. Its values gather right today; "
                   "every later redistribution reads the spec.")
        if blamed:
            summary += f" First wrong rule: {blamed.words()}."
        return _sharding(case, ran, wrong, steps, op, summary, worst)
    shares = _shares(ran, path)
    if shares:
        summary = (f"{_op_words(case)} on a {mesh.name} mesh with {where}: ranks read different Python numbers from the "
                   f"DTensor, each rank returns its own share ({shares}) where the single-device value is "
                   f"{_scalar(ran.expected.get(path))}.")
        return _sharding(case, ran, wrong, steps, op, summary, worst)
    if worst.attribute == "values":
        how = (f"{worst.mismatched} of {worst.numel} elements beyond tolerance, off by up to "
               f"{worst.max_abs_err:.3g} (allowed {worst.allowed:.3g} at the worst)")
    else:
        how = f"{worst.attribute}: expected {worst.expected}, got {worst.actual}"
    what = "the gradient " + path.removeprefix("grad[").rstrip("]") if path.startswith("grad[") else path
    summary = (f"{_op_words(case)} on a {mesh.name} mesh with {where}: full_tensor() of {what}{claim} differs from "
               f"the single-device result {on}: {how}.")
    if blamed:
        summary += f" First wrong rule: {blamed.words()}."
    return _sharding(case, ran, wrong, steps, op, summary, worst)


def _shares(ran: Ran, path: str) -> str:
    """Each rank's number, where ``path`` is a Python number the ranks read differently ("" otherwise)."""
    values = ran.actual.get(path) or []
    if path not in ran.facts.get("numbers", ()) or len(values) < 2:
        return ""
    numbers = [_scalar(v) for v in values]
    if len(set(numbers)) < 2:
        return ""
    return ", ".join(f"rank {r} {n}" for r, n in enumerate(numbers[:6])) + (", ..." if len(numbers) > 6 else "")


def _scalar(value) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return repr(value.item()) if value.dtype in (torch.bool, torch.int64, torch.int32) else f"{value.item():.6g}"
    return repr(value)


def _sharding(case: Case, ran: Ran, wrong, steps, op: str, summary: str, worst: Mismatch) -> Finding:
    detail = "\n".join([m.describe() + (f" (ranks {r})" if r else "") for r, m in wrong]
                       + ["sharding trace:"] + [f"  {s.words()}" + (f"  WRONG: {s.wrong}" if s.wrong else "") for s in steps])
    return Finding(
        id=_id(case.id, "sharding_mismatch"), kind="sharding_mismatch", op=op, opinfo=case.op, variant=case.variant,
        dtype=case.dtype, device=case.device, reference="sharding", case_id=case.id, layouts=case.layouts,
        summary=summary, mismatch=worst, call=call_spec(case), detail=detail,
    )


def roundtrip_finding(case: Case, ran: Ran, *, backend: str = "", confirmed: bool = False) -> Finding:
    """An argument that did not come back from distribute -> full_tensor(), and whose bug that is.

    ``backend`` ("gloo", "nccl"): ``ran`` is from real process groups, so
    DTensor itself fails. Else ``ran`` is simulated: with ``confirmed`` the
    same round trip succeeded on real gloo ranks (the simulator's bug);
    without, it was not rechecked.
    """
    path, placement, wrong = ran.roundtrip
    mesh = shard_cases.mesh_of(case)
    sample = shard_cases.sample_of(case)
    t = tree.call_leaves((sample.input, *sample.args), sample.kwargs)[path]
    key = f"roundtrip|{mesh.name}|{placement}|{case.dtype}|{list(t.shape)}|{case.device}" + (f"|{backend}" if backend else "")
    tensor = f"a {case.dtype} tensor of shape {list(t.shape)} placed {placing.words(placement)} on a {mesh.name} mesh"
    if backend:
        summary = (f"DTensor's distribute_tensor -> full_tensor() does not give back {tensor} on real {backend} process groups: "
                   f"{wrong.describe()}. A bug in DTensor itself, not in the simulator; the op was not judged on that placement.")
    elif confirmed:
        summary = (f"LocalTensorMode (PyTorch's simulator) does not give back {tensor} through distribute -> full_tensor(): "
                   f"{wrong.describe()}. On real gloo process groups it comes back: a bug in the simulator, not in DTensor "
                   f"(the op was judged on gloo ranks instead).")
    else:
        summary = (f"{tensor} does not come back from distribute -> full_tensor() under LocalTensorMode: {wrong.describe()} "
                   "(not rechecked on real process groups: the simulator or DTensor is in question).")
    return Finding(
        id=_id(key, "roundtrip_mismatch"), kind="roundtrip_mismatch", op="distribute_tensor", opinfo=case.op, variant=case.variant,
        dtype=case.dtype, device=case.device, reference=backend or "roundtrip", case_id=case.id, layouts=((path, placement),),
        summary=summary, mismatch=wrong, call=call_spec(case), detail=ran.reason,
    )


def simulator_finding(case: Case, backend: str, path: str, rank: int, wrong: Mismatch) -> Finding:
    mesh = shard_cases.mesh_of(case)
    summary = (f"{_op_words(case)} on a {mesh.name} mesh with {placed_words(case)}: LocalTensorMode's {path} on rank {rank} "
               f"differs from real {backend} process groups': {wrong.describe()}. The simulator, not the op, is in question.")
    return Finding(
        id=_id(case.id, f"simulator_mismatch|{backend}"), kind="simulator_mismatch", op=case.op, opinfo=case.op,
        variant=case.variant, dtype=case.dtype, device=case.device, reference=backend, case_id=case.id, layouts=case.layouts,
        summary=summary, mismatch=wrong, call=call_spec(case),
    )


def placed_words(case: Case) -> str:
    if not case.layouts:
        return "every argument replicated"
    return ", ".join(f"{path} placed {placing.words(pl)}" for path, pl in case.layouts) + (
        "" if len(case.layouts) > 1 else "")


def _op_words(case: Case) -> str:
    return f"{case.op}{VARIANT_WORDS.get(case.variant, '')}"


def _ranks_words(ranks: list[int], total: int) -> str:
    if not ranks:
        return "(no result to compare)"
    if len(ranks) == total and total > 1:
        return "on every rank"
    return f"on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of {total}"


def _named(case: Case, reason: str) -> str:
    return f"{case.op}: {reason}"


def _unsupported_words(ran: Ran) -> str:
    text = ran.reason
    if "sharding strategy" in text:
        import re

        m = re.search(r"(aten\.[\w.]+)", text)
        if m:
            return f"DTensor has no sharding rule for {m.group(1)}"
    return text


def _id(key: str, kind: str) -> str:
    return "f-" + hashlib.sha256(f"{key}|{kind}".encode()).hexdigest()[:10]


def call_spec(case: Case) -> CallSpec:
    """The call as the findings file and the repro script show it; each tensor's layout is its placement."""
    sample = shard_cases.sample_of(case)
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    placed = dict(case.layouts)
    mesh = shard_cases.mesh_of(case)
    tensors = []
    for path, t in tree.call_leaves(args, kwargs).items():
        tensors.append(TensorSpec(path=path, shape=tuple(t.shape), stride=tuple(t.stride()), storage_offset=0, storage_numel=t.numel(),
                                  dtype=str(t.dtype).removeprefix("torch."), device=case.device,
                                  layout=placed.get(path, ".".join("R" * len(mesh.shape)))))
    try:
        args_src, kwargs_src = tree.call_source(args, kwargs)
    except tree.Unrepresentable as e:
        args_src, kwargs_src, why = "", "", f"an argument has no Python source ({e})"
    else:
        why = ""
    if composites.is_composite(case.op):
        name = composites.source(case.op)
    elif surface.is_surface(case.op):
        name = surface.source(case.op)
    else:
        name = opinfo.public_name(opinfo.get(case.op), "functional")
        if not name and not why:
            why = f"{case.op}'s OpInfo calls it through a lambda; the repro script calls that lambda's source"
    return CallSpec(function=name, args_src=args_src, kwargs_src=kwargs_src, tensors=tuple(tensors), variant=case.variant,
                    grad_paths=tuple(p for p, t in tree.call_leaves(args, kwargs).items() if t.is_floating_point()) if case.variant == "backward" else (),
                    why_not=why)
