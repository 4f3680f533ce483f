"""Contracts: what an optimizer step must do whatever the reference says, where the math gives it.

Design note. A reference compares implementations with each other; a
contract needs none, so it also catches a bug every implementation shares
(a broken formula in code they all call). Three, each where the math of
the update makes it hold:

* ``lr_zero``: a setting with lr=0 (a number or a 0-dim tensor) changes no
  parameter, bit for bit, and leaves the state finite wherever the float64
  run, rounded to the dtype at every op (``core.Rounded``), keeps it finite.
  Every update of torch.optim is a product with lr, and a weight decay
  applied as ``p * (1 - lr * wd)`` is a product with 1. Excluded by design
  (``EXCLUDED``): Rprop, whose lr is only its first step size: each step
  size is clamped to at least ``step_sizes[0]``, so it moves at lr=0.
* ``zero_gradient``: with every gradient zero and no decay (each of
  ``DECAYS`` at 0: a weight decay, ASGD's ``lambd``, shrinks the parameter
  whatever the gradient), a step changes no parameter, bit for bit, and
  leaves the state finite. The update is then 0 times a finite factor
  (0/(sqrt(0) + eps), a zero momentum, a zero Newton-Schulz input) only
  while every ``eps`` is nonzero in the dtype: eps=0, or eps=1e-8 in
  float16 (where it rounds to 0), makes it 0/0, NaN by the math. Those
  settings and dtypes are not run with zero gradients (a note names the
  optimizers whose defaults are among them).
* ``tensor_form``: a hyperparameter given as a 0-dim tensor gives what the
  same number gives: the for-loop run of a tensor setting against the
  for-loop run of its number form (edges.number_form), same dtype, same
  layout allowance as the layout reference. A tensor path every
  implementation shares and gets wrong is caught here, not by comparing
  the implementations with each other.

A broken contract is a finding of kind ``invariant`` (``mismatch`` for the
tensor form), reference ``contract``, naming the optimizer, the
implementation, the setting and the contract.
"""

from __future__ import annotations

import inspect

import torch

from ..judge.records import Finding, Mismatch
from . import core
from .edges import number_form
from .judge import finding, findings
from .matrix import Configuration, Option, OptimSpec

CONTRACTS = {
    "lr_zero": "a step with lr=0 changes no parameter, bit for bit, and leaves the state finite",
    "zero_gradient": "with no weight decay, a step with every gradient zero changes no parameter, bit for bit, "
                     "and leaves the state finite",
    "tensor_form": "a hyperparameter given as a 0-dim tensor gives what the same number gives",
}
# (contract, optimizer) -> why the contract does not hold for it by design.
EXCLUDED = {
    ("lr_zero", "Rprop"): "Rprop's lr is only its first step size: every step size is clamped to at least step_sizes[0] "
                          "(1e-6 by default), so it moves at lr=0 by design",
}
# Hyperparameters that shrink the parameter whatever the gradient: the zero-gradient contract needs each at 0.
DECAYS = ("weight_decay", "lambd")


def _value(option: Option, spec: OptimSpec, name: str):
    chosen = dict(option.kwargs)
    if name in chosen:
        value = chosen[name]
    else:
        parameter = inspect.signature(spec.cls.__init__).parameters.get(name)
        value = None if parameter is None else parameter.default
    return value.value if isinstance(value, core.AsTensor) else value


def lr_zero(spec: OptimSpec, option: Option) -> str:
    """Why the lr=0 contract does not apply to ``option`` ("" when it does)."""
    if _value(option, spec, "lr") != 0:
        return "lr is not 0"
    return EXCLUDED.get(("lr_zero", spec.name), "")


def zero_gradient(spec: OptimSpec, option: Option, dtype: str) -> str:
    """Why a zero gradient need not leave ``option``'s parameters unchanged in ``dtype`` ("" when it must)."""
    if excluded := EXCLUDED.get(("zero_gradient", spec.name)):
        return excluded
    for name in DECAYS:
        value = _value(option, spec, name)
        if value not in (None, 0):
            return f"{name}={value:g} shrinks the parameter whatever the gradient"
    eps = _value(option, spec, "eps")
    for value in eps if isinstance(eps, tuple) else (eps,):
        if isinstance(value, core.AsTensor):
            value = value.value
        if value is not None and float(torch.tensor(value, dtype=getattr(torch, dtype))) == 0:
            return f"eps={value:g} is 0 in {dtype}: a zero gradient makes the update 0/0, NaN by the math"
    return ""


def unkept(configuration: Configuration, spec: OptimSpec, run: core.Trajectory, *, steps: int,
           exact: core.Trajectory | None = None, sensitivity: dict | None = None) -> tuple[Finding, ...]:
    """The lr=0 or zero-gradient contract of ``configuration``, judged on its ``run``.

    For lr=0, ``exact`` and ``sensitivity`` (the float64 run and how far
    rounding to the dtype carries it) say where the state must stay finite;
    without them no state tensor is judged for finiteness.
    """
    contract = "zero_gradient" if configuration.zero else "lr_zero"
    finite = None
    if contract == "lr_zero":
        finite = {}
        if exact is not None:
            for path, value in exact.final.items():
                k = (sensitivity or {}).get(path)
                if value.is_floating_point() and k is not None and k.shape == value.shape:
                    finite[path] = torch.isfinite(value) & torch.isfinite(k)
    broken = core.unkept(run, finite=finite)
    if not broken:
        return ()
    first = broken[0]
    path = first.split(" ", 1)[0]
    moved = path in run.params
    mismatch = Mismatch(path=path, attribute="contract", expected="its initial value, bit for bit" if moved else "finite values",
                        actual=first.split(": ", 1)[1] if ": " in first else first)
    summary = (f"{configuration.words()} breaks the {contract} contract ({CONTRACTS[contract]}): after {steps} steps {first}.")
    return (finding(configuration, run, kind="invariant", reference="contract", mismatch=mismatch, summary=summary,
                    detail="\n".join(broken), salt=contract),)


def tensor_form(configuration: Configuration, spec: OptimSpec, run: core.Trajectory, numbers: core.Trajectory, *,
                steps: int, sensitivity: dict, u: float) -> tuple[Finding, ...]:
    """The tensor-form contract: ``run`` (a tensor setting's for-loop run) against ``numbers`` (its number form's)."""
    plain = number_form(spec, configuration.option)
    against = f"the same for-loop run with numbers for the tensors ({plain.name})"
    found = findings(configuration, run, numbers, reference="contract", sensitivity=sensitivity, u=u, steps=steps, against=against)
    return tuple(f for f in found if f.kind != "out_of_view_write")  # the configuration's own verdict reports those
