"""Training invariants, checked around every ``optimizer.step()`` at the cost of a few small kernels per parameter.

Design note. Four things must hold of a healthy step, whatever the model:

* gradients reach every parameter that requires grad (its ``.grad`` is set
  by the time the optimizer steps);
* no NaN or inf in a gradient before the step or in a parameter after it;
* each parameter with a nonzero gradient changes at the step (unless its
  group's learning rate is 0): the seed story's frozen ``encoder.weight``;
* the optimizer's state is written: a floating state tensor shaped like its
  parameter is not all zeros after a step with a nonzero gradient (Adam's
  ``exp_avg_sq`` stayed zero in the story). Scalars (``step``) are left out.

The last two look at a fixed set of positions of each tensor (POSITIONS of
them, where the gradient is nonzero): what they catch (a kernel that drops a
whole write) shows everywhere. In a tensor that fills its storage (dense in
any order of its dims, as parameters, their gradients and their states are)
the positions are an evenly spaced grid of its storage from an offset drawn
once per shape and strides (from a generator of watch's own), so reading
them is a view, and the views of every parameter become one row each in a
single copy; a tensor that does not fill its storage, is smaller than the
grid, or whose gradient is laid out otherwise is read at drawn flat indices
(a ``torch.take`` each). The rows are judged together (one comparison, one
reduction per row, one transfer of a few booleans): on a GPU the per-step
cost is about a dozen small kernels whatever the number of parameters, and
no Python loop over elements. The transfer does not
wait: on a GPU the booleans are copied into pinned memory behind the step and
read at the next step (or when the findings are asked for: ``flush``), so the
program keeps its next step queued while this one runs. The state is
looked at on the first step and every 16th (a state never written stays all
zeros, so it is caught at the first look). NaN and inf are looked for at the
positions every step, and in whole tensors every 16th step (a min-max
reduction per tensor, judged with the other verdicts, so that step does not
wait either): a NaN spreads through the next step, so a missed element shows
a step later.

A violation is a ``Finding`` of kind ``invariant``, naming the parameter by
its module path and its properties (shape, stride, contiguity, dtype,
device). Each (parameter, check) is reported once per watch, at the first
step it fails, so a frozen weight is one finding, not one per step.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

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
        self._positions: dict[tuple, torch.Tensor] = {}
        self._generator = torch.Generator().manual_seed(0)  # not the program's: its draws stay its own
        self._before: dict[torch.device, _Rows] = {}
        self._after: dict[torch.device, _Rows] = {}  # the last step's reads: this step's before, if the same parameters
        self._reported: set[tuple[str, str]] = set()
        self._pending: list[_Verdicts] = []  # a step's verdicts on their way to the host, read at the next step (flush)
        self.step = 0

    def name(self, p: torch.Tensor) -> str:
        if self._names is None or id(p) not in self._names:
            self._names = {**(self._names or {}), **naming.parameter_names()}  # one scan of the live modules
            self._names.setdefault(id(p), f"a parameter of shape {list(p.shape)} in no module")
        return self._names[id(p)]

    @torch.no_grad()  # the reads are views and copies of leaves that require grad: none of them needs a graph
    def before(self, optimizer: torch.optim.Optimizer) -> None:
        whole = self.step % FULL_EVERY == 0
        rows: dict[torch.device, _Rows] = {}
        for group in optimizer.param_groups:
            still = group.get("lr", 1) == 0
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.grad is None:
                    self._report(optimizer, p, "no_gradient", f"no gradient reached {self.name(p)} ({naming.describe(p)}) before {_step(optimizer)}")
                    continue
                if still or p.numel() == 0:  # not in a row: its whole-tensor check here and now
                    if whole and not _finite(p.grad):
                        self._report(optimizer, p, "grad_not_finite",
                                     f"the gradient of {self.name(p)} ({naming.describe(p)}) holds NaN or inf before {_step(optimizer)}")
                    continue
                device = p.device
                batch = rows.get(device)
                if batch is None:
                    batch = rows[device] = _Rows()
                batch.add(p, self._at(p))
        for device, batch in rows.items():
            grads = batch.read([p.grad for p in batch.params])
            batch.moving = grads != 0
            # read with the verdicts after the step: of the whole gradients on a whole step, else of the positions
            batch.grads_finite = _all_finite([p.grad for p in batch.params]) if whole else _finite_rows(grads)
            last = self._after.get(device)
            # what the last step left is what this one starts from (a program that changes its
            # parameters between steps makes them look moved: a frozen step missed, never a false alarm)
            if last is not None and _same(last.params, batch.params):
                batch.values, batch.views = last.values, last.views
            else:
                batch.values = batch.read_params()
        self._before = rows

    @torch.no_grad()
    def after(self, optimizer: torch.optim.Optimizer) -> None:
        whole = self.step % FULL_EVERY == 0
        if whole:
            in_rows = {id(p) for batch in self._before.values() for p in batch.params}  # checked whole in the verdicts
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad and p.grad is not None and id(p) not in in_rows and not _finite(p):
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
                states = [(i, key, value) for i, p in enumerate(batch.params) for key, value in optimizer.state.get(p, {}).items()
                          if isinstance(value, torch.Tensor) and value.shape == p.shape and value.numel() > 1
                          and (value.is_floating_point() or value.is_complex())]
            if states:
                rows = _rows([_read(v, batch.params[i], batch.positions[i]) for i, _, v in states])
                verdicts.append(((rows != 0) & moving[[i for i, _, _ in states]]).any(1))
            flags = torch.cat(verdicts)
            self._pending.append(_Verdicts(_to_host(flags), batch.params, states, whole, optimizer, self.step))
            after[device] = batch
            batch.values = now
        self._before, self._after = {}, after
        self.step += 1

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

    def _at(self, p: torch.Tensor) -> "torch.Tensor | _Grid":
        """The positions looked at in tensors laid out like ``p``, chosen once: a grid of its storage (its first
        storage index, its spacing) where ``p`` fills its storage, else POSITIONS drawn flat indices."""
        key = (tuple(p.shape), p.stride(), p.device)
        if key not in self._positions:
            n = p.numel()
            if n >= POSITIONS and _fills_storage(p.shape, p.stride()):
                spacing = n // POSITIONS
                start = int(torch.randint(n - spacing * (POSITIONS - 1), (), generator=self._generator))
                self._positions[key] = _Grid(start, spacing)
            else:
                self._positions[key] = torch.randint(n, (1, POSITIONS), generator=self._generator).to(p.device)
        return self._positions[key]

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


# Positions per tensor the per-step checks look at: a frozen parameter or an
# unwritten state is frozen or unwritten everywhere, so a couple of hundred
# positions (where the gradient is nonzero) tell, for a fraction of a pass.
POSITIONS = 256


class _Rows:
    """The parameters of one device, and what was read of them before the step: a row each."""

    def __init__(self):
        self.params: list[torch.Tensor] = []
        self.positions: list = []  # each parameter's: a _Grid, or flat indices
        self.views: tuple[list, list] | None = None  # the parameters' storage addresses, their grids' rows (views)
        self.moving: torch.Tensor | None = None  # where each gradient is nonzero
        self.values: torch.Tensor | None = None  # the parameters before the step
        self.grads_finite: torch.Tensor | None = None

    def add(self, p: torch.Tensor, positions) -> None:
        self.params.append(p)
        self.positions.append(positions)

    def read(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Each of ``tensors`` (one per parameter, shaped like it) at its parameter's positions: a row each."""
        return _rows([_read(t, p, at) for t, p, at in zip(tensors, self.params, self.positions)])

    def read_params(self) -> torch.Tensor:
        """The parameters at their positions. A grid's row is a view, made once while its parameter keeps its storage;
        drawn flat indices are read anew (a copy)."""
        addresses = [p.data_ptr() for p in self.params]
        if self.views is None or self.views[0] != addresses:
            self.views = (addresses, [_read(p, p, at) if isinstance(at, _Grid) else None for p, at in zip(self.params, self.positions)])
        return _rows([torch.take(p, at) if view is None else view for view, p, at in zip(self.views[1], self.params, self.positions)])


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _read(t: torch.Tensor, p: torch.Tensor, positions) -> torch.Tensor:
    """``t`` (``p`` or a tensor shaped like it) at ``p``'s positions, a row: a view of its storage's grid where ``t`` is
    laid out as ``p`` is (the same storage index is the same element), else its elements at the same flat indices.
    Under ``no_grad``: the views need no graph."""
    if isinstance(positions, _Grid):
        if t.stride() == p.stride() and t.shape == p.shape:
            return t.as_strided((1, POSITIONS), (POSITIONS * positions.spacing, positions.spacing), t.storage_offset() + positions.start)
        positions = positions.flat(p)  # laid out otherwise: the grid's elements by their flat index
    return torch.take(t, positions)


class _Grid:
    """Every ``spacing``-th storage index of a tensor that fills its storage, from ``start``: POSITIONS of them."""

    def __init__(self, start: int, spacing: int):
        self.start, self.spacing = start, spacing
        self._flat: torch.Tensor | None = None

    def flat(self, p: torch.Tensor) -> torch.Tensor:
        """The flat (row-major) indices of the grid's elements in ``p``: for a tensor laid out otherwise."""
        if self._flat is None:
            n = p.numel()
            storage = torch.arange(n, device=p.device).as_strided(p.shape, p.stride())  # each element's storage index
            flat = torch.empty(n, dtype=torch.long, device=p.device)
            flat[storage.reshape(-1)] = torch.arange(n, device=p.device)  # each storage index's element, flat
            self._flat = flat[self.start::self.spacing][:POSITIONS].reshape(1, POSITIONS)
        return self._flat


def _fills_storage(shape, stride) -> bool:
    """Whether a tensor of this shape and these strides is dense in some order of its dims: its elements are the
    storage indices 0 .. numel - 1 from its offset, each once."""
    expected = 1
    for size, step in sorted(((s, st) for s, st in zip(shape, stride) if s != 1), key=lambda d: d[1]):
        if step != expected:
            return False
        expected *= size
    return True


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


def _rows(rows: list[torch.Tensor]) -> torch.Tensor:
    """Rows of positions, one tensor: one copy on the device (of views: no copy before it)."""
    if len({t.dtype for t in rows}) > 1:  # mixed precision: in a dtype that holds every value exactly
        rows = [t.to(torch.complex128 if t.is_complex() else torch.float64) for t in rows]
    return torch.cat(rows)


# Every this many steps NaN and inf are looked for in whole tensors; in between,
# on the sampled grid (a NaN spreads: a step later it is everywhere).
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


def _step(optimizer) -> str:
    return f"{type(optimizer).__name__}.step()"
