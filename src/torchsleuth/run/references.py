"""The references a case is judged against, computed once per sample and shared.

Design note. Every case of a sample whose layouts keep the sample's values
shares one set of references (``expanded`` and ``empty`` change values, so
cases using them get their own). Each reference is the functional (or, for
the backward variant, the gradient) computation on contiguous tensors:

* ``contiguous``: on the device under test, in the case's dtype (the layout
  reference, and the expected value of every in-place and out= case);
* ``cpu``: on the CPU in the case's dtype (the device reference);
* ``float64``: on the CPU in float64 or complex128 (the precision reference;
  off the CPU, a call over more than ``WIDE_ON_DEVICE`` elements has it, and
  the runs below, on the device under test: see ``wide_device``);
* ``perturbed``: two more float64 runs with every floating input nudged by a
  random relative amount up to the case dtype's unit roundoff. How far they
  land from ``float64``, element by element, measures how sensitive the op
  is to rounding at that precision (the judge's tolerance rule uses it);
* ``jumped``: two float64 runs nudged by plus and minus ``JUMP`` times that,
  to find the elements where the op jumps (see judge.tolerance);
* ``ranged``: the float64 run with every intermediate past the case dtype's
  largest value made an infinity (``run.ranged``): where the call's own
  intermediates overflow in the dtype.

All of them are computed lazily: a case that needs none pays for none.

Values the CPU refuses are not sent to a GPU. A case whose values torchsleuth
changed (a value-changing layout such as ``empty``, or searched and special
values) can hold an index out of range: an ``empty`` weight under
``embedding``'s indices, a target past ``nll_loss``'s classes. The CPU raises;
a CUDA kernel stops at a device-side assert, which ends the worker's CUDA
context, and now and then (six times in run Z of bench/cuda-sweep.md, about one
fault in 45) keeps the GPU from switching contexts until the driver's
5-second timeout (Xid 109): every worker on the GPU waits the while. So on a
CUDA device, when the CPU refuses a case's changed values and takes the
sample's own (``original``: the op, the dtype and the CPU are not what fails),
``contiguous`` is that refusal (``Refused``) and the values go no further. An
error that says the CPU lacks the kernel (``unimplemented``: a dtype a path
of the op's has no CPU kernel for) refuses no value, and the case is sent. The
outcome is ``raised`` as before, and no finding is lost: the judges compare a
device's result with the CPU's, or with the device's own on the same values,
and neither says anything where the CPU refuses. Measured on an H200 (runs AA
and AB): 5,541 cases refused, 88 of them passes before (a CUDA kernel that
returns where the CPU raises: a Cholesky of non-finite values, an integer
division by zero), no finding lost, the catalog in 240 and 263 s against
286-336 s. The CPU's twin can itself kill the worker (the CPU's kernels crash
on some such values: ``lu_unpack``'s and ``pdist``'s gradients on empty
inputs); a case replayed alone (which decides whether it crashes) and its
description are therefore made as before, with ``original`` left out
(``engine``'s ``refuse=False``), and the crash of the CPU's twin is no finding
of the device's. Yet a kernel that returns where the CPU raises is itself one of
the commonest silent bugs on a GPU (a bounds check the CUDA kernel lacks): after
the sweep's units, the refusal differential (``shrink.refusals``) sends a share of
the refused cases to the device after all, each in a worker that may die.

An op may come with a trusted implementation of its own (``reference``: the
eager composition a fused kernel replaces, which ``torchsleuth.check`` takes):
then the float64 runs (``float64``, ``perturbed``, ``jumped``) call it in place
of the op, so the op is judged against what it should compute, not only
against itself in another precision.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

import torch

from .. import devices, dtypes
from ..errors import one_line
from ..cases import layouts
from ..cases.records import Case
from . import call, transfer, tree
from .facts import Facts
from .ranged import Overflowing
from .trace import Trace

# How many units of roundoff the jump probe nudges by: about as many
# roundings as a kernel does on the way to an index or a comparison.
JUMP = 16.0
# Off the CPU, the float64 runs of a call holding more elements than this are made on the device under test: on the CPU
# each is seconds over 2^24 entries, and the tolerance rule asks for three to five of them (a span probe's: 10 to 25 s a
# case on an H100, bench/cuda-pointed.md). The CPU's call in the case's dtype stays the device reference, so a kernel
# whose bug is the same in float64 on the device still differs from the CPU.
WIDE_ON_DEVICE = 1 << 22


def unimplemented(error: BaseException) -> bool:
    """Whether an error says the CPU has no kernel for a call (a dtype, or a path its arguments take: bicubic's
    antialias in half precision), as against refusing its values: ``NotImplementedError``, or the dispatch macros'
    "not implemented for 'Half'" that older releases raise as a ``RuntimeError``. Such a call is sent to the device
    as any other: on an H100, 32 of one pointed run's refused cases were dtype gaps like this one, and the refusal
    differential named each "unchecked" (bench/time-target.md)."""
    return isinstance(error, NotImplementedError) or "not implemented for '" in str(error)


class Reference:
    """A reference result: the value, or the error that computing it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    @property
    def ok(self) -> bool:
        return self.error is None


class Refused(Exception):
    """Why a case's contiguous reference was not computed on the device: the CPU refuses its changed values."""


# The devices where an index out of range stops the kernel at a device-side assert that ends the process's context
ASSERTING = frozenset({"cuda"})
# How a refused case's reason begins (``Refused``): what the refusal differential (shrink.refusals) looks for
REFUSED = "the CPU refuses these values"


class References:
    def __init__(self, base: call.Prepared, dtype: torch.dtype, *, seed: int, reference=None, original=None):
        # ``base`` is the functional (or backward) call on the case's values
        # on the device under test; its tensors are made contiguous here.
        # ``reference``: the op's trusted implementation, which the float64 runs call
        self.reference = reference
        # ``original``: for values torchsleuth changed, a function giving the CPU reference of the sample's own values
        self.original = original
        # off the CPU, made from the host storages ``base`` was copied from (run.transfer.placed), which are
        # kept: each copy below is then one op on the device, and the host copy needs no read-back
        self._stored: dict[str, torch.Tensor] = {}
        tensors = {}
        for path, t in base.tensors.items():
            stored = call.host_storage(base, path)
            if stored is not None:
                laid, self._stored[path] = transfer.placed("contiguous", _view(stored, t), t.device)
            else:
                laid = layouts.apply("contiguous", t.detach())
            tensors[path] = laid.requires_grad_(t.requires_grad)
        self.base = _with_tensors(base, tensors)
        self.dtype = dtype
        self.seed = seed
        self.facts: dict[str, Facts] = {}  # catalog name -> its facts, read off these references once (run.facts.of_references)

    @functools.cached_property
    def contiguous(self) -> Reference:
        if self.refused is not None:
            return Reference(error=self.refused)
        # on copies: a kernel that writes its inputs must not change what later references see
        return self._run(self._copies())

    @functools.cached_property
    def refused(self) -> Refused | None:
        """On a device where an index out of range asserts: why these changed values are not sent to it (the CPU
        refuses them and takes the sample's own); None where they are."""
        device = self.base.case.device
        if self.original is None or devices.kind(device) not in ASSERTING or self.cpu.ok or not self.original().ok:
            return None
        if unimplemented(self.cpu.error):  # the CPU lacks the kernel these arguments reach: it judged no value
            return None
        return Refused(f"{REFUSED} ({one_line(self.cpu.error)}) and takes the sample's own; "
                       f"not sent to {device}, where a value out of range stops the kernel and ends the process")

    def _copies(self) -> tree.Tensors:
        return {p: self._copy(p, t).requires_grad_(t.requires_grad) for p, t in self.base.tensors.items()}

    def _copy(self, path: str, t: torch.Tensor) -> torch.Tensor:
        """A fresh contiguous copy of base tensor ``t`` (guard values included), from its host storage where kept."""
        if path in self._stored:
            return transfer.rebuilt(self._stored[path], call.metadata(t), t.device)
        return layouts.apply("contiguous", t.detach())

    @functools.cached_property
    def trace(self) -> Trace:
        """The ops the contiguous call dispatches to (a separate run: see run.trace)."""
        return call.traced(self.base, self._copies())[0]

    @functools.cached_property
    def host(self) -> tree.Tensors:
        """The base tensors on the CPU, read back from the device once, together, for every reference made on the CPU
        (a CPU sweep's are the base tensors themselves). Read them; do not write them."""
        paths = [p for p in self.base.tensors if p not in self._stored]
        read = dict(zip(paths, transfer.to_host([self.base.tensors[p].detach() for p in paths])))
        return {p: _view(self._stored[p], t) if p in self._stored else read[p] for p, t in self.base.tensors.items()}

    @functools.cached_property
    def cpu(self) -> Reference:
        return self._run(self._converted(device="cpu"), device="cpu")

    @functools.cached_property
    def wide_device(self) -> str:
        """Where the float64 runs are made: the CPU, or off it the device under test for a call over WIDE_ON_DEVICE
        elements (see there)."""
        device = self.base.case.device
        elements = sum(t.numel() for t in self.base.tensors.values())
        return device if devices.kind(device) != "cpu" and elements > WIDE_ON_DEVICE else "cpu"

    @functools.cached_property
    def float64(self) -> Reference:
        if not (self.dtype.is_floating_point or self.dtype.is_complex):
            return Reference(error=ValueError("no float64 reference for an integer dtype"))
        try:
            found = self._run(self._converted(device=self.wide_device, wide=True), device=self.wide_device, wide=True)
        except Exception as e:  # the copy to the device failed (its memory)
            found = Reference(error=e)
        if not found.ok and self.wide_device != "cpu":  # the device has no float64 kernel for the call: the CPU's, as ever
            self.wide_device = "cpu"  # the nudged runs follow
            found = self._run(self._converted(device="cpu", wide=True), device="cpu", wide=True)
        return found

    @functools.cached_property
    def perturbed(self) -> tuple[Reference, ...]:
        """float64 runs with the inputs nudged by up to one unit of roundoff (two draws)."""
        return self._nudged((1.0, 1.0), seeds=(self.seed, self.seed + 1))

    @functools.cached_property
    def jumped(self) -> tuple[Reference, ...]:
        """float64 runs nudged by +-JUMP units of roundoff along one draw: they cross the
        discontinuities (floor, a pixel edge, a tie) that rounding inside a kernel can cross."""
        return self._nudged((JUMP, -JUMP), seeds=(self.seed + 2, self.seed + 2))

    @functools.cached_property
    def ranged(self) -> Reference:
        """The float64 run overflowing as the case's dtype does (see ``run.ranged``)."""
        if not (self.dtype.is_floating_point or self.dtype.is_complex) or dtypes.wide(self.dtype) == self.dtype:
            return Reference(error=ValueError("no narrower range than float64's"))
        real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
        self.float64  # noqa: B018  (settles where the float64 runs are made)
        return self._run(self._converted(device=self.wide_device, wide=True), device=self.wide_device, wide=True,
                         mode=Overflowing(torch.finfo(real).max, self.dtype))

    def _nudged(self, scales, *, seeds) -> tuple[Reference, ...]:
        if not self.float64.ok:
            return ()
        u = dtypes.unit_roundoff(self.dtype)
        found = []
        for scale, seed in zip(scales, seeds):
            tensors = self._converted(device=self.wide_device, wide=True, nudge=(scale * u, torch.Generator().manual_seed(seed)))
            found.append(self._run(tensors, device=self.wide_device, wide=True))
        return tuple(r for r in found if r.ok)

    def _converted(self, *, device: str, wide: bool = False, nudge=None) -> tree.Tensors:
        found = {}
        with torch.no_grad():
            for path, t in self.host.items():
                t = t.to(device)  # the layout below gives each reference storages of its own
                if wide:
                    t = t.to(dtypes.wide(t.dtype))
                if nudge is not None and (t.dtype.is_floating_point or t.dtype.is_complex):
                    u, generator = nudge
                    shape = t.shape if not t.is_complex() else (*t.shape, 2)
                    delta = ((torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * u).to(t.device)
                    if t.is_complex():
                        t = torch.view_as_complex(torch.view_as_real(t) * (1 + delta))
                    else:
                        t = t * (1 + delta)
                t = layouts.apply("contiguous", t)
                if self.base.tensors[path].requires_grad:
                    t.requires_grad_(True)
                found[path] = t
        return found

    def _run(self, tensors: tree.Tensors, *, device: str | None = None, wide: bool = False, mode=None) -> Reference:
        prepared = self.base
        if device is not None:
            prepared = _retarget(prepared, device=device, dtype=self.dtype if wide else None)
        if wide and self.reference is not None:
            prepared = dataclasses.replace(prepared, function=self.reference)
        try:
            with mode if mode is not None else contextlib.nullcontext():
                value = call.compute(prepared, tensors)
            call.synchronize(device or self.base.case.device)
            return Reference(value=value)
        except Exception as e:
            return Reference(error=e)


def _retarget(prepared: call.Prepared, *, device: str, dtype: torch.dtype | None) -> call.Prepared:
    """``prepared`` with device and (when ``dtype`` is given) dtype arguments moved to the reference's."""

    def move(value: Any) -> Any:
        if isinstance(value, torch.device):
            return torch.device(device)
        if dtype is not None and isinstance(value, torch.dtype) and value == dtype:
            return dtypes.wide(dtype)
        return value

    kwargs = {k: (device if k == "device" and v is not None else tree.map_values(v, move)) for k, v in prepared.kwargs.items()}
    args = tree.map_values(prepared.args, move)
    return dataclasses.replace(prepared, args=args, kwargs=kwargs)


def _view(storage: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The flat host ``storage`` viewed with the shape, strides and offset ``like`` has on its own storage."""
    return storage.as_strided(like.shape, like.stride(), like.storage_offset())


def _with_tensors(prepared: call.Prepared, tensors: tree.Tensors) -> call.Prepared:
    args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, tensors)
    return dataclasses.replace(prepared, args=args, kwargs=kwargs, tensors=tensors)


def base_case(case: Case) -> Case:
    """The case whose contiguous call is ``case``'s reference: same values, every tensor contiguous."""
    family = "backward" if case.variant == "backward" else "functional"
    keep = tuple((path, layout) for path, layout in case.layouts if layout in layouts.VALUE_CHANGING and not path.startswith("out"))
    return dataclasses.replace(case, variant=family, layouts=keep, oracle="")
