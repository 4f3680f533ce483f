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

The last two look at a fixed grid of a few hundred elements of each tensor,
where the gradient is nonzero: what they catch (a kernel that drops a whole
write) shows everywhere, and the checks stay a small fraction of a step.
NaN and inf are looked for on that grid, and in whole tensors every 16th
step (a sum per tensor, confirmed elementwise when it is not finite): a NaN
spreads through the next step, so a missed element shows a step later.

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
            self._names = {**(self._names or {}), **naming.parameter_names()}  # one scan of the live modules
            self._names.setdefault(id(p), f"a parameter of shape {list(p.shape)} in no module")
        return self._names[id(p)]

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        self._before = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.grad is None:
                    self._report(optimizer, p, "no_gradient", f"no gradient reached {self.name(p)} ({naming.describe(p)}) before {_step(optimizer)}")
                    continue
                if not _finite(p.grad, whole=self.step % FULL_EVERY == 0):
                    self._report(optimizer, p, "grad_not_finite", f"the gradient of {self.name(p)} ({naming.describe(p)}) holds NaN or inf before {_step(optimizer)}")
                if group.get("lr", 1) == 0:
                    continue
                grad = _sample(p.grad)
                moving = grad != 0
                if bool(moving.any()):  # where the gradient is nonzero, the parameter must move
                    self._before[id(p)] = (_sample(p).clone(), moving)

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad or p.grad is None:
                    continue
                if not _finite(p, whole=self.step % FULL_EVERY == 0):
                    self._report(optimizer, p, "param_not_finite", f"{self.name(p)} ({naming.describe(p)}) holds NaN or inf after {_step(optimizer)}")
                if id(p) not in self._before:
                    continue
                old, moving = self._before[id(p)]
                if torch.equal(old[moving], _sample(p)[moving]):
                    self._report(optimizer, p, "frozen",
                                 f"{self.name(p)} ({naming.describe(p)}) did not change at {_step(optimizer)} although its gradient is nonzero")
                for key, value in optimizer.state.get(p, {}).items():
                    if (isinstance(value, torch.Tensor) and value.shape == p.shape and value.numel() > 1
                            and (value.is_floating_point() or value.is_complex()) and not bool(_sample(value)[moving].any())):
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
                    sample=self.step, layouts=placed, edits=(f"check:{check}", f"param:{name}"))
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


# Elements per tensor the per-step checks look at: a frozen parameter or an
# unwritten state is frozen or unwritten everywhere, so a grid of a few hundred
# elements (where the gradient is nonzero) tells, for a fraction of a pass.
SAMPLE = 512


def _sample(t: torch.Tensor) -> torch.Tensor:
    """A fixed grid of at most about SAMPLE elements of ``t`` (a view: every dim stepped alike)."""
    t = t.detach()
    if t.numel() <= SAMPLE:
        return t
    step = max(1, int((t.numel() / SAMPLE) ** (1 / max(1, t.dim()))))
    return t[tuple(slice(None, None, step) for _ in range(t.dim()))]


# Every this many steps NaN and inf are looked for in whole tensors; in between,
# on the sampled grid (a NaN spreads: a step later it is everywhere).
FULL_EVERY = 16


def _finite(t: torch.Tensor, *, whole: bool) -> bool:
    """No NaN or inf in ``t`` (on the grid, or the whole tensor): a sum, confirmed elementwise if it is not finite."""
    if not (t.is_floating_point() or t.is_complex()):
        return True
    if not whole:
        t = _sample(t)
    total = t.detach().sum()
    return bool(torch.isfinite(total)) or bool(torch.isfinite(t).all())


def _step(optimizer) -> str:
    return f"{type(optimizer).__name__}.step()"
