"""Training invariants, checked around every ``optimizer.step()`` at the cost of one copy of the parameters.

Design note. Four things must hold of a healthy step, whatever the model:

* gradients reach every parameter that requires grad (its ``.grad`` is set
  by the time the optimizer steps);
* no NaN or inf in a gradient before the step or in a parameter after it;
* each parameter with a nonzero gradient changes at the step (unless its
  group's learning rate is 0): the seed story's frozen ``encoder.weight``;
* the optimizer's state is written: a floating state tensor shaped like its
  parameter is not all zeros after a step with a nonzero gradient (Adam's
  ``exp_avg_sq`` stayed zero in the story). Scalars (``step``) are left out.

A violation is a ``Finding`` of kind ``invariant``, naming the parameter by
its module path and its properties (shape, stride, contiguity, dtype,
device). Each (parameter, check) is reported once per watch, at the first
step it fails, so a frozen weight is one finding, not one per step.
"""

from __future__ import annotations

import hashlib

import torch

from ..cases.records import Case
from ..judge.records import Finding, Mismatch
from ..run.live import classify
from . import names as naming


class StepChecks:
    def __init__(self, device: str = "cpu"):
        self.device = device
        self.findings: list[Finding] = []
        self._names: dict[int, str] | None = None
        self._before: dict[int, torch.Tensor] = {}
        self._reported: set[tuple[str, str]] = set()
        self.step = 0

    def name(self, p: torch.Tensor) -> str:
        if self._names is None or id(p) not in self._names:
            self._names = naming.parameter_names()
        return self._names.get(id(p), f"parameter {list(p.shape)}")

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        self._before = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.grad is None:
                    self._report(optimizer, p, "no_gradient", f"no gradient reached {self.name(p)} ({naming.describe(p)}) before {_step(optimizer)}")
                    continue
                if not bool(torch.isfinite(p.grad).all()):
                    self._report(optimizer, p, "grad_not_finite", f"the gradient of {self.name(p)} ({naming.describe(p)}) holds NaN or inf before {_step(optimizer)}")
                if group.get("lr", 1) != 0 and bool((p.grad != 0).any()):
                    self._before[id(p)] = p.detach().clone()

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad or p.grad is None:
                    continue
                if not bool(torch.isfinite(p).all()):
                    self._report(optimizer, p, "param_not_finite", f"{self.name(p)} ({naming.describe(p)}) holds NaN or inf after {_step(optimizer)}")
                old = self._before.get(id(p))
                if old is not None and torch.equal(old, p.detach()):
                    self._report(optimizer, p, "frozen",
                                 f"{self.name(p)} ({naming.describe(p)}) did not change at {_step(optimizer)} although its gradient is nonzero")
                if old is None:
                    continue
                for key, value in optimizer.state.get(p, {}).items():
                    if (isinstance(value, torch.Tensor) and value.shape == p.shape and value.numel() > 1
                            and (value.is_floating_point() or value.is_complex()) and not bool((value != 0).any())):
                        self._report(optimizer, p, f"state_{key}",
                                     f"{_step(optimizer)} left its state {key!r} of {self.name(p)} all zeros "
                                     f"({naming.describe(value)}) although the gradient is nonzero")
        self._before = {}
        self.step += 1

    def _report(self, optimizer, p: torch.Tensor, check: str, summary: str) -> None:
        name = self.name(p)
        if (name, check) in self._reported:
            return
        self._reported.add((name, check))
        kind = type(optimizer).__name__
        layout = classify(p)
        placed = ((name, layout),) if layout != "contiguous" else ()
        # a case id like any other (report and diff parse them): the check rides in the edits
        case = Case(op=f"{kind}.step", variant="step", dtype=str(p.dtype).removeprefix("torch."), device=str(p.device),
                    sample=self.step, layouts=placed, edits=(f"check:{check}",))
        self.findings.append(Finding(
            id="f-" + hashlib.sha256(f"{kind}|{name}|{check}|invariant".encode()).hexdigest()[:10],
            kind="invariant", op=f"torch.optim.{kind}.step", opinfo=kind, variant="step",
            dtype=case.dtype, device=case.device, reference="contract",
            case_id=case.id, layouts=placed, summary=summary,
            mismatch=Mismatch(path=name, attribute=check, expected=_EXPECTED.get(check, ""), actual=_ACTUAL.get(check, "")),
            detail=f"step {self.step}",
        ))


_EXPECTED = {
    "no_gradient": "a gradient", "grad_not_finite": "finite values", "param_not_finite": "finite values",
    "frozen": "the parameter changes",
}
_ACTUAL = {"no_gradient": "None", "grad_not_finite": "NaN or inf", "param_not_finite": "NaN or inf", "frozen": "unchanged"}


def _step(optimizer) -> str:
    return f"{type(optimizer).__name__}.step()"
