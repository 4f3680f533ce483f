"""Parity: a sharded run against the same script on one rank, step by step, to the first step and parameter they part at.

Design note. ``watch --nproc N --parity train.py`` runs the script twice,
at world size 1 and at N (each as watch.ranks starts ranks), and on each
run records, for the first ``STEPS`` optimizer steps:

* the loss: the value of the last scalar ``backward()`` was called on
  before the step (``torch.autograd.backward``, which ``Tensor.backward``
  calls, is wrapped for the watch; a DTensor loss is gathered);
* each parameter's full gradient just before the step, by FQN
  (``full_tensor()`` of a DTensor gradient: a collective, made alike on
  every rank, in the optimizer's parameter order, with the shadow replay
  paused).

Rank 0 posts them with its findings. The gatherer compares the two runs
step by step (``compare``): the first step at which a gradient, or else
the loss, differs beyond the reduction-order allowance (``ALLOWED_ULPS``
units of roundoff of the value's dtype, relative to the largest magnitude
of the one-rank value, plus ``ATOL``: a sharded run sums in another order,
never by more) is a ``parity_mismatch`` finding naming the step and the
parameter (the first, in the optimizer's order, with the largest
difference relative to its allowance), so a user learns where the runs
part; the DTensor findings of the same run say which op did it. Parity
means something only where the script computes the same numbers at both
sizes (the same global batch; no rank-dependent data): the script's choice,
as a single-device run is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zlib

import torch

from ..cases.records import Case
from ..judge.records import Finding, Mismatch
from .sharded import quiet

STEPS = 8  # steps recorded and compared
MAX_ELEMENTS = 1 << 20  # a step's gradients kept whole up to this many elements; past it, the first of each
ALLOWED_ULPS = 1024
ATOL = 1e-6


class Recorder:
    """The loss and full gradients of the first STEPS steps of one run (kept on rank 0)."""

    def __init__(self, context, name, *, rank: int = 0):
        self.context, self.name, self.rank = context, name, rank
        self.losses: list[float | None] = []
        self.grads: list[dict[str, torch.Tensor]] = []
        self._loss: float | None = None
        self._original = None

    def install(self) -> None:
        self._original = torch.autograd.backward
        original, recorder = self._original, self

        def backward(tensors, *args, **kwargs):
            recorder.saw(tensors)
            return original(tensors, *args, **kwargs)

        torch.autograd.backward = backward

    def remove(self) -> None:
        if self._original is not None:
            torch.autograd.backward = self._original
            self._original = None

    def saw(self, tensors) -> None:
        """``backward()`` called on ``tensors``: its value, when it is one number (a DTensor's gathered)."""
        if len(self.losses) >= STEPS or not isinstance(tensors, torch.Tensor) or tensors.numel() != 1:
            return
        paused, self.context.paused = self.context.paused, True
        try:
            with torch.no_grad():
                value = tensors.full_tensor() if hasattr(tensors, "full_tensor") else tensors
                self._loss = float(value.detach().reshape(()))
        finally:
            self.context.paused = paused

    @torch.no_grad()
    def before_step(self, optimizer) -> None:
        if len(self.grads) >= STEPS:
            return
        grads: dict[str, torch.Tensor] = {}
        budget = MAX_ELEMENTS
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                with quiet():
                    g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad  # a collective: on every rank
                if self.rank == 0:
                    g = g.detach().reshape(-1)[:max(budget, 4096)].cpu().clone()
                    budget -= g.numel()
                    grads[self.name(p)] = g
        self.grads.append(grads)
        self.losses.append(self._loss)
        self._loss = None

    def payload(self) -> dict:
        return {"losses": self.losses, "grads": [_blob(step) for step in self.grads]}


def compare(one: dict, many: dict, world: int, program: str, *, rerun: list[str] = ()) -> Finding | None:
    """The first step at which the run on ``world`` ranks parts from the run on one (see the design note); None if never.
    ``rerun``: the ``torchsleuth watch`` arguments that compare them again, kept in the finding's data for its script."""
    steps = min(len(one.get("grads", ())), len(many.get("grads", ())))
    for step in range(steps):
        single, sharded = _load(one["grads"][step]), _load(many["grads"][step])
        worst = None
        for fqn, e in single.items():
            a = sharded.get(fqn)
            if a is None or a.shape != e.shape:
                continue
            diff, allowed = _difference(a, e)
            if diff > allowed and (worst is None or diff / allowed > worst[1] / worst[2]):
                worst = (fqn, diff, allowed, e)
        loss_one, loss_many = one["losses"][step], many["losses"][step]
        loss_wrong = None
        if loss_one is not None and loss_many is not None:
            diff, allowed = _difference(torch.tensor(loss_many), torch.tensor(loss_one))
            if diff > allowed:
                loss_wrong = (diff, allowed)
        if worst is None and loss_wrong is None:
            continue
        return _finding(step, worst, loss_wrong, (loss_one, loss_many), world, program, rerun)
    return None


def _difference(a: torch.Tensor, e: torch.Tensor) -> tuple[float, float]:
    a64, e64 = a.to(torch.float64), e.to(torch.float64)
    diff = float(torch.nan_to_num((a64 - e64).abs(), nan=float("inf")).max()) if e.numel() else 0.0
    eps = torch.finfo(e.dtype).eps if e.is_floating_point() else 0.0
    scale = float(e64.abs().max()) if e.numel() else 0.0
    return diff, ATOL + ALLOWED_ULPS * eps * scale


def _finding(step: int, worst, loss_wrong, losses, world: int, program: str, rerun: list[str]) -> Finding:
    if worst is not None:
        fqn, diff, allowed, e = worst
        what = f"the gradient of {fqn} differs by up to {diff:.3g} (allowed {allowed:.3g} for the reduction order)"
        path, dtype = fqn, str(e.dtype).removeprefix("torch.")
    else:
        diff, allowed = loss_wrong
        fqn, path, dtype = "", "loss", "float32"
        what = f"the loss differs by {diff:.3g} (allowed {allowed:.3g})"
    loss = f"; the loss is {losses[1]:.6g} on {world} ranks, {losses[0]:.6g} on one" if None not in losses else ""
    summary = (f"The run on {world} ranks parts from the same script on one rank at step {step}: {what}{loss}. "
               "The DTensor findings of the run name the op whose rule did it.")
    case = Case(op="parity", variant="step", dtype=dtype, device="cpu", sample=step, edits=(f"param:{fqn or 'loss'}", f"ranks:{world}"))
    return Finding(
        id="f-" + hashlib.sha256(f"{program}|{step}|{path}|parity".encode()).hexdigest()[:10], kind="parity_mismatch",
        op="parity", opinfo="parity", variant="step", dtype=dtype, device="cpu", reference="parity", case_id=case.id, layouts=(),
        summary=summary, mismatch=Mismatch(path=path, attribute="values", expected=f"the one-rank run's (step {step})",
                                           actual=f"off by {diff:.3g}", max_abs_err=diff, allowed=allowed),
        detail=f"step {step}; first parameter apart: {fqn or '(none: the loss alone)'}",
        data=json.dumps({"parity": {"step": step, "parameter": fqn, "world": world, "rerun": list(rerun)}}),
    )


def _blob(tensors: dict) -> str:
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return base64.b85encode(zlib.compress(buffer.getvalue(), 6)).decode()


def _load(blob: str) -> dict:
    return torch.load(io.BytesIO(zlib.decompress(base64.b85decode(blob))))
