"""The ``vmap`` oracle: the call under torch.func.vmap gives every sample of the batch its own result.

Design note. Batching rules (functorch's ``FuncTorchBatched`` kernels) are
kernels of their own: given a tensor with a batch dim somewhere, a rule
moves it, reshapes, calls the op on the whole batch, and says where the
batch dim of the result is. A rule that forgets to move the dim, reduces
over the wrong one or mixes samples gives every ``torch.func`` user wrong
numbers and raises nothing: per-sample gradients, model ensembles,
Jacobians (jacrev and jacfwd go through vmap). A case of this oracle makes
a batch of ``BATCH`` samples of one OpInfo sample's call (detail.py): the
call's own tensors, then each tensor redrawn with seeded values of its
dtype in its range (batch.py; copies of the call's own where redrawn values
make the call raise), and judges

* ``vmap:forward``: ``torch.func.vmap`` of the call over the batch against
  the call on each sample alone;
* ``vmap:grad``: the same for the gradient, ``vmap`` of the call's vjp
  against the same seeded cotangents for every sample (the backward
  variant's ``grad_output[i]``, of what it differentiates: OpInfo's
  ``output_process_fn_grad`` of the result, whose finding then has no
  script of its own), for ops that support autograd, in floating dtypes
  (against the input alone where another floating argument has no
  derivative: a loss's class weights);

each under several in_dims (judging.configurations): every tensor batched
at dim 0; each tensor's batch dim last, where a rule must move it (another
path through the rule); and, with several tensors, each one not mapped
over (in_dims None), which sends the rule down its mixed path. Bits are
compared first; a difference beyond the judge's tolerance rule (as for two
rounded results: a batched kernel may sum in another order) and its
canonicalisers (sort's ties, SVD's signs) is a finding: ``mismatch`` for
the forward mode, ``gradient_mismatch`` for the gradient, judged against
the ``vmap`` reference. Smaller differences are counted in the pass
reason. The oracle judges batching rules, not the op's own kernel, so a
difference that float64 lays on the sample alone (a leaf that is zero in
float64 and holds rounding noise; a batched result as near float64 as
rounding allows, where the sample alone is further off) is noted and left
to the precision reference.

Not judged, each with its reason: random ops (vmap draws for the batch at
once), uninitialized results, ops defined by their storage (as_strided),
and calls that raise under vmap (no batching rule, data-dependent control
flow or output shapes): a raise is loud, not a silent bug. Only the
functional variant is planned (in-place variants are not mapped).

The cases are cheap (a few calls of the op), planned on the value search's
special values too (``on_values``: ``Subject.sample`` carries the edit,
the other samples are redrawn from it), and sampled by a whole-catalog run
(``sampled``).

The modules, each importing only those before it: ``detail`` (the modes,
the batch's constants, the ``Detail`` a finding carries), ``batch`` (the
batch and the calls, as code the script copies), ``float64`` (what the
float64 runs say about a disagreement), ``judging`` (the configurations and
the verdict), ``script`` (a finding's repro script) and this one.
"""

from __future__ import annotations

import contextlib
import math

import torch

from ...cases import opinfo
from ...cases.records import Unit
from ...judge.plugin import Oracle, Subject, decode_detail
from ...judge.records import Finding, Outcome
from ...run import probe
from .detail import FORWARD, GRAD, MODES, PREFIX, Detail
from .judging import judge
from .script import script

DESCRIPTION = "torch.func.vmap of each call (and of its gradient) over a batch of samples gives each sample's own result"


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    """``vmap:forward`` for a functional call, and ``vmap:grad`` where the op has a gradient in a floating dtype."""
    if variant != "functional":
        return []
    names = [PREFIX + FORWARD]
    entry = opinfo.get(unit.op)
    dtype = getattr(torch, unit.dtype)
    if dtype.is_floating_point and getattr(entry, "supports_autograd", False) and probe.backward_allowed(
            entry, torch.device(unit.device).type, dtype):
        names.append(PREFIX + GRAD)
    return names


def run(subject: Subject) -> Outcome:
    case = subject.case
    mode = case.oracle.removeprefix(PREFIX)
    if mode not in MODES:
        return Outcome(case=case, status="skip", reason=f"unknown vmap mode {mode!r}; known: {', '.join(MODES)}")
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the vmap oracle maps the functional call on contiguous arguments only")
    with _quiet_fallback():
        return judge(subject, mode)


def handed(finding: Finding) -> tuple[tuple[str, str], ...]:
    """What a finding's batch handed the op per sample beyond its contiguous case: a tensor of more than one element
    batched at a moved dim (every tensor at dim 0 passed first: that configuration is tried first) is, sample by
    sample, a strided slice of the stacked tensor. ``check`` folds such a finding into the op's strided group."""
    detail = decode_detail(Detail, finding)
    if detail is None:
        return ()
    sizes = {t.path: math.prod(t.shape) for t in (finding.call.tensors if finding.call else ())}
    return tuple((path, "strided") for path, dim in zip(detail.paths, detail.in_dims)
                 if dim not in (0, None) and sizes.get(path, 2) > 1)


@contextlib.contextmanager
def _quiet_fallback():
    """An op without a batching rule of its own (a custom op) runs vmap's slow loop fallback, which is what is judged;
    its C++ warning, printed once per call, is left out."""
    functorch = getattr(torch._C, "_functorch", None)
    setter = getattr(functorch, "_set_vmap_fallback_warning_enabled", None)
    if setter is None:
        yield
        return
    setter(False)
    try:
        yield
    finally:
        setter(True)


ORACLE = Oracle(name="vmap", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script, handed=handed,
                on_values=True, sampled=True)
