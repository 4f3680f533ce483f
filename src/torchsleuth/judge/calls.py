"""Calls an oracle makes itself, judged with the judge's own tolerance rule.

Design note. The ``sizes`` and ``repeat`` oracles call a case's op on
tensors they make (a tiled length, a batch of rows) or with an argument
changed, and compare what comes back against another call. What the judge
knows about tolerances (judge.tolerance: the table, widened by the op's
measured sensitivity to rounding, k_i, from float64 runs with nudged inputs)
is reached through the same ``Context`` the references use: ``judged``
wraps any call of the op as run.evidence's ``Evidence``, so
``Context.differs`` and ``Context.slack`` work on it unchanged, and the
float64 runs behind the slack are made only when a comparison fails
without it.

Also here: how an oracle makes a case's call as the engine would
(``make_call``, ``functional_of``), a finding in the judge's form (id a stable hash of case id, kind
and reference), how far apart two floats are in units in the last place,
and whether a difference changes the class of a value (NaN against a
number, an infinity against a finite value, the sign of a zero).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import torch

from ..cases.records import Case
from . import compare as cmp
from .context import Context
from .verdict import one_line
from .records import Finding, Mismatch, Outcome
from .values import class_change, ulps  # noqa: F401 (defined in judge.values; re-exported for the oracles)
from ..run import call, tree
from ..run.evidence import Evidence
from ..run.facts import facts as read_facts
from ..run.references import References


def plain(case: Case) -> Case:
    """The case's call as the main sweep makes it: contiguous tensors, no oracle."""
    return dataclasses.replace(case, layouts=(), oracle="")


def base(subject) -> tuple[References | None, Outcome | None]:
    """The case's base references; or None and the case's ``raised`` outcome when its contiguous call raised, or
    its sample's tensors cannot even be made (a sparse layout, say)."""
    try:
        refs = subject.base()
        error = None if refs.contiguous.ok else refs.contiguous.error
    except Exception as e:
        refs, error = None, getattr(e, "error", e)
    if error is None:
        return refs, None
    return None, Outcome(case=subject.case, status="raised", reason="the contiguous reference raised: " + one_line(error))


def with_tensors(prepared: call.Prepared, tensors: tree.Tensors, *, args=None, kwargs=None) -> call.Prepared:
    """``prepared``'s call on other tensors (any shapes), and other scalars where given."""
    args = prepared.args if args is None else args
    kwargs = prepared.kwargs if kwargs is None else kwargs
    args, kwargs = tree.replace_call(args, kwargs, tensors)
    return dataclasses.replace(prepared, args=args, kwargs=kwargs, tensors=dict(tensors))


def run(prepared: call.Prepared, tensors: tree.Tensors | None = None) -> Any:
    """The call, seeded as every call of the engine is; raises what the op raises."""
    result = call.compute(prepared, tensors)
    call.synchronize(prepared.case.device)
    return result


def ran(prepared: call.Prepared) -> call.Ran:
    """A record of ``prepared``'s tensors before a call, for CallSpecs (no call is made)."""
    return call.Ran(before=call.snapshot(prepared.tensors), meta={p: call.metadata(t) for p, t in prepared.tensors.items()})


class Judged:
    """One call of the op on tensors an oracle made, with its references made lazily."""

    def __init__(self, prepared: call.Prepared, result: Any, *, override, function_name: str, op: str):
        self.prepared = prepared
        self.result = result
        self.override = override
        self.function_name = function_name
        self.op = op

    @property
    def context(self) -> Context:
        if not hasattr(self, "_context"):
            dtype = getattr(torch, self.prepared.case.dtype)
            refs = References(self.prepared, dtype, seed=self.prepared.case.sample)
            facts = read_facts(refs.trace, refs.base.tensors, self.result, fallback=self.op)
            evidence = Evidence(self.prepared, ran(self.prepared), refs, facts, function_name=self.function_name)
            evidence.__dict__["op"] = self.op  # known already: no traced rerun for a name
            self._context = Context(evidence, self.override)
        return self._context

    def differs(self, expected: Any, *, scale: float = 2.0) -> list[Mismatch]:
        """Where this result is not ``expected`` within the judge's rule (two rounded results: ``scale`` 2)."""
        return self.context.differs(self.result, expected, scale=scale)


def finding(case: Case, *, kind: str, reference: str, op: str, summary: str, mismatch: Mismatch | None,
            call_spec=None, detail: str = "", data: str = "") -> Finding:
    digest = hashlib.sha256(f"{case.id}|{kind}|{reference}".encode()).hexdigest()[:10]
    return Finding(
        id=f"f-{digest}", kind=kind, op=op or case.op, opinfo=case.op, variant=case.variant, dtype=case.dtype,
        device=case.device, reference=reference, case_id=case.id, layouts=case.layouts, summary=summary,
        mismatch=mismatch, call=call_spec, detail=detail, data=data,
    )


def leaves(value: Any) -> cmp.Leaves:
    return cmp.flatten(value)


def make_call(case: Case, function, sample, functional_result=None) -> call.Prepared:
    """``case``'s call (its layouts applied) on ``sample``, as the engine prepares the same case without oracle.

    The prepared call keeps ``case`` itself, oracle and all: findings take their case id from it.
    """
    prepared = call.prepare(plain_oracle(case), function, sample, reference_result=functional_result, grad_seed=case.sample)
    return dataclasses.replace(prepared, case=case)


def plain_oracle(case: Case) -> Case:
    """The case without its oracle: the same call, judged by the references and contracts."""
    return dataclasses.replace(case, oracle="")


def functional_of(case: Case) -> Case:
    """The functional case whose result shapes a backward case's output gradients."""
    keep = tuple((path, layout) for path, layout in case.layouts if not path.startswith("grad_output"))
    return dataclasses.replace(case, variant="functional", layouts=keep, oracle="")
