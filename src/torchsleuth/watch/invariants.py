"""Training invariants, checked around the optimizer's steps at the cost of a dozen small kernels a checked step.

Design note. Four things must hold of a healthy step, whatever the model:

* gradients reach every parameter that requires grad (its ``.grad`` is set
  by the time the optimizer steps);
* no NaN or inf in a gradient before the step or in a parameter after it;
* each parameter with a nonzero gradient changes at the step (unless its
  group's learning rate is 0): the seed story's frozen ``encoder.weight``;
* the optimizer's state is written: a floating state tensor shaped like its
  parameter is not all zeros after a step with a nonzero gradient (Adam's
  ``exp_avg_sq`` stayed zero in the story). Scalars (``step``) are left out.

Which steps are checked is watch.cadence's choice: every one of the first
16, then as many as keep the checks within 2% of the program's own step time
(at least one in 32). The last two checks look at a fixed set of positions
of each tensor where the gradient is nonzero (watch.rows: a grid of each
tensor's storage, read as views in one copy): what they catch (a kernel that
drops a whole write) shows everywhere. The rows are judged together (one
comparison, one reduction per row, one transfer of a few booleans): on a GPU
a checked step costs about a dozen small kernels whatever the number of
parameters, and no Python loop over elements. The transfer does not wait: on
a GPU the booleans are copied into pinned memory behind the step and read at
the next checked step (or when the findings are asked for: ``flush``), so
the program keeps its next step queued while this one runs. The state is
looked at on the first checked step and every 16th (a state never written
stays all zeros, so it is caught at the first look). NaN and inf are looked
for at the positions on every checked step, and in whole tensors on every
16th (a min-max reduction per tensor, judged with the other verdicts, so
that step does not wait either): a NaN spreads through the next step, so a
missed element shows a step later.

On a rank of a sharded program each rank checks its own shards (a DTensor parameter's local tensor, its
gradient's and its state's), so every check reads only what the rank holds.

A violation is a ``Finding`` of kind ``invariant``, naming the parameter by
its module path and its properties (shape, stride, contiguity, dtype,
device). Each (parameter, check) is reported once per watch, at the first
step it fails, so a frozen weight is one finding, not one per step.
"""

from __future__ import annotations

import hashlib
import time
from typing import NamedTuple

import torch

from ..cases.records import Case
from ..judge.records import Finding, Mismatch
from ..run.live import classify
from . import names as naming
from .cadence import Cadence, sampling
from .rows import Positions, Rows, read, same, stacked


class StepChecks:
    def __init__(self, device: str = "cpu", all_steps: bool = False):
        self.device, self.all_steps = device, all_steps
        self.findings: list[Finding] = []
        self._names: dict[int, str] | None = None
        self._positions = Positions()
        self._before: dict[torch.device, Rows] = {}
        self._after: dict[torch.device, Rows] = {}  # the last step's reads: this step's before, if the same parameters
        self._reported: set[tuple[str, str]] = set()
        self._pending: list[_Verdicts] = []  # a step's verdicts on their way to the host, read at the next step (flush)
        self.step = 0
        self.clock = time.perf_counter  # what each optimizer's cadence times the checks and the steps with
        self.cadences: dict[int, Cadence] = {}  # id(optimizer) -> the steps of it checked (watch.cadence)
        self._cadence: Cadence | None = None  # the stepping optimizer's
        self._checking = False  # whether this step's checks run
        self._after_step = -1  # the step whose reads self._after holds

    def name(self, p: torch.Tensor) -> str:
        if self._names is None or id(p) not in self._names:
            self._names = {**(self._names or {}), **naming.parameter_names()}  # one scan of the live modules
            self._names.setdefault(id(p), f"a parameter of shape {list(p.shape)} in no module")
        return self._names[id(p)]

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        cadence = self.cadences.get(id(optimizer))
        if cadence is None:  # each optimizer its own: two stepping in turn are each checked
            cadence = self.cadences[id(optimizer)] = Cadence(clock=lambda: self.clock(), all_steps=self.all_steps)
        self._cadence, self._checking = cadence, cadence.due()
        if self._checking:
            began = cadence.clock()
            self._check_before(optimizer)
            cadence.spent(cadence.clock() - began)

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        cadence = self._cadence
        if self._checking and cadence is not None:
            began = cadence.clock()
            self._check_after(optimizer)
            cadence.spent(cadence.clock() - began)
            cadence.done()
        self.step += 1

    def sampled(self) -> str:
        """Which steps were checked, for the run's note: empty when every step of every optimizer was."""
        cadences = list(self.cadences.values())
        return sampling(sum(c.checked for c in cadences), sum(c.steps for c in cadences), max((c.every for c in cadences), default=1))

    @torch.no_grad()  # the reads are views and copies of leaves that require grad: none of them needs a graph
    def _check_before(self, optimizer: torch.optim.Optimizer) -> None:
        whole = self._cadence.checked % FULL_EVERY == 0
        rows: dict[torch.device, Rows] = {}
        for group in optimizer.param_groups:
            still = group.get("lr", 1) == 0
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.grad is None:
                    self._report(optimizer, p, "no_gradient", f"no gradient reached {self.name(p)} ({naming.describe(p)}) before {_step(optimizer)}")
                    continue
                local = _local(p)  # a DTensor's shard on this rank: each rank checks its own
                if still or local.numel() == 0:  # not in a row: its whole-tensor check here and now
                    if whole and not _finite(_local(p.grad)):
                        self._report(optimizer, p, "grad_not_finite",
                                     f"the gradient of {self.name(p)} ({naming.describe(p)}) holds NaN or inf before {_step(optimizer)}")
                    continue
                device = p.device
                batch = rows.get(device)
                if batch is None:
                    batch = rows[device] = Rows()
                batch.add(local, self._positions.of(local), owner=p)
        for device, batch in rows.items():
            grads = batch.read([_local(p.grad) for p in batch.owners])
            batch.moving = grads != 0
            # read with the verdicts after the step: of the whole gradients on a whole step, else of the positions
            batch.grads_finite = _all_finite([_local(p.grad) for p in batch.owners]) if whole else _finite_rows(grads)
            last = self._after.get(device)
            # what the last step left is what this one starts from (a program that changes its
            # parameters between steps makes them look moved: a frozen step missed, never a false alarm)
            if last is not None and self._after_step == self.step - 1 and same(last.params, batch.params):
                batch.values, batch.views = last.values, last.views
            else:
                batch.values = batch.read_params()
        self._before = rows

    @torch.no_grad()
    def _check_after(self, optimizer: torch.optim.Optimizer) -> None:
        whole = self._cadence.checked % FULL_EVERY == 0
        if whole:
            in_rows = {id(p) for batch in self._before.values() for p in batch.owners}  # checked whole in the verdicts
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad and p.grad is not None and id(p) not in in_rows and not _finite(_local(p)):
                        self._report(optimizer, p, "param_not_finite",
                                     f"{self.name(p)} ({naming.describe(p)}) holds NaN or inf after {_step(optimizer)}", self.step)
        self.flush()  # the last step's verdicts: done on the device long ago
        after = {}
        for device, batch in self._before.items():
            now = batch.read_params()
            moving = batch.moving
            # per parameter: does any position where the gradient is nonzero hold a new value?
            finite = _all_finite(batch.params) if whole else _finite_rows(now)
            verdicts = [moving.any(1), ((now != batch.values) & moving).any(1), batch.grads_finite, finite]
            states = []
            if whole:  # a state never written stays all zeros: looked at on the steps the whole tensors are
                states = [(i, key, _local(value)) for i, (p, owner) in enumerate(zip(batch.params, batch.owners))
                          for key, value in optimizer.state.get(owner, {}).items()
                          if isinstance(value, torch.Tensor) and _local(value).shape == p.shape and _local(value).numel() > 1
                          and (value.is_floating_point() or value.is_complex())]
            if states:
                rows = stacked([read(v, batch.params[i], batch.positions[i]) for i, _, v in states])
                verdicts.append(((rows != 0) & moving[[i for i, _, _ in states]]).any(1))
            flags = torch.cat(verdicts)
            self._pending.append(_Verdicts(_to_host(flags), batch.owners, states, whole, optimizer, self.step))
            after[device] = batch
            batch.values = now
        self._before, self._after, self._after_step = {}, after, self.step

    def flush(self) -> None:
        """Report what the verdicts of past steps say. They are read one step late: reading them at their own step
        would wait for the device to finish it, where the program's next step could already be queued."""
        pending, self._pending = self._pending, []
        for v in pending:
            host, event = v.flags
            if event is not None:
                event.synchronize()
            flags = host.tolist()
            n = len(v.params)
            any_moving, moved, grads_finite, finite = (flags[k * n:(k + 1) * n] for k in range(4))
            written = flags[4 * n:]
            optimizer = v.optimizer
            for i, p in enumerate(v.params):
                if not grads_finite[i]:
                    self._report(optimizer, p, "grad_not_finite",
                                 f"the gradient of {self.name(p)} ({naming.describe(p)}) holds NaN or inf before {_step(optimizer)}", v.step)
                if not finite[i]:
                    self._report(optimizer, p, "param_not_finite", f"{self.name(p)} ({naming.describe(p)}) holds NaN or inf after {_step(optimizer)}",
                                 v.step)
                if any_moving[i] and not moved[i]:
                    self._report(optimizer, p, "frozen",
                                 f"{self.name(p)} ({naming.describe(p)}) did not change at {_step(optimizer)} although its gradient is nonzero", v.step)
            for (i, key, value), ok in zip(v.states, written):
                if any_moving[i] and not ok:
                    p = v.params[i]
                    self._report(optimizer, p, f"state_{key}",
                                 f"{_step(optimizer)} left its state {key!r} of {self.name(p)} all zeros "
                                 f"({naming.describe(value)}) although the gradient is nonzero", v.step)

    def _report(self, optimizer, p: torch.Tensor, check: str, summary: str, step: int | None = None) -> None:
        name = self.name(p)
        if (name, check) in self._reported:
            return
        self._reported.add((name, check))
        step = self.step if step is None else step
        kind = type(optimizer).__name__
        layout = classify(p)
        placed = ((name, layout),) if layout != "contiguous" else ()
        # a case id like any other (report and diff parse them): the check rides in the edits
        case = Case(op=f"{kind}.step", variant="step", dtype=str(p.dtype).removeprefix("torch."), device=str(p.device),
                    sample=step, layouts=placed, edits=(f"check:{check}", f"param:{name}"))
        self.findings.append(Finding(
            id="f-" + hashlib.sha256(f"{kind}|{name}|{check}|invariant".encode()).hexdigest()[:10],
            kind="invariant", op=f"torch.optim.{kind}.step", opinfo=kind, variant="step",
            dtype=case.dtype, device=case.device, reference="contract",
            case_id=case.id, layouts=placed, summary=summary,
            mismatch=Mismatch(path=name, attribute=check, expected=_EXPECTED.get(check, ""), actual=_ACTUAL.get(check, "")),
            detail=f"step {step}",
        ))


_EXPECTED = {
    "no_gradient": "a gradient", "grad_not_finite": "finite values", "param_not_finite": "finite values",
    "frozen": "the parameter changes",
}
_ACTUAL = {"no_gradient": "None", "grad_not_finite": "NaN or inf", "param_not_finite": "NaN or inf", "frozen": "unchanged"}


class _Verdicts(NamedTuple):
    """One step's verdicts for one device, on their way to the host: (host tensor, event or None) and what they judge."""

    flags: tuple
    params: list
    states: list
    whole: bool
    optimizer: object
    step: int


def _to_host(flags: torch.Tensor) -> tuple[torch.Tensor, object]:
    """``flags`` copied to the host without waiting: into pinned memory, with an event to wait on when read."""
    if flags.device.type != "cuda":
        return flags, None
    host = torch.empty(flags.shape, dtype=flags.dtype, pin_memory=True)
    stream = torch.cuda.current_stream(flags.device)  # the copy goes on the flags' device's stream: the event too
    host.copy_(flags, non_blocking=True)
    event = torch.cuda.Event()
    event.record(stream)
    return host, event


# Every this many checked steps NaN and inf are looked for in whole tensors; in
# between, on the sampled grid (a NaN spreads: a step later it is everywhere).
FULL_EVERY = 16


def _all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Per tensor, on the device and without waiting: no NaN or inf anywhere in it (a min-max reduction each: NaN
    carries through it, and unlike a sum it cannot overflow)."""
    found = []
    for t in tensors:
        t = t.detach()
        t = torch.view_as_real(t) if t.is_complex() else t
        if not t.is_floating_point() or t.numel() == 0:
            found.append(torch.ones(2, dtype=torch.bool, device=t.device))
            continue
        found.append(torch.isfinite(torch.stack(torch.aminmax(t))))
    return torch.stack(found).all(1)


def _finite_rows(rows: torch.Tensor) -> torch.Tensor:
    """Per row, no NaN or inf: ``x - x`` is 0 for every finite ``x``, NaN for the rest (two kernels, where
    ``isfinite`` takes four)."""
    return ((rows - rows) == 0).all(1)


def _finite(t: torch.Tensor) -> bool:
    """No NaN or inf in the whole of ``t``, now (a parameter outside the rows: ``_all_finite`` of it alone)."""
    return bool(_all_finite([t])[0])


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (its local tensor); any other tensor itself."""
    return getattr(t, "_local_tensor", t)


def _step(optimizer) -> str:
    return f"{type(optimizer).__name__}.step()"
