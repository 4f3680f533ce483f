"""Running configurations: one run, the references, and what a refusal means.

Design note. A configuration is run in this process (optimizer steps are
short and touch no worker-killing code paths the ops sweep isolates
against). What a run raises decides its status, from torch's own message:
a configuration torch says it does not implement here (``fused`` without a
kernel for the device or dtype, ``capturable`` off an accelerator, an
optimizer that does not support something) is a ``skip`` with that reason;
anything else it raises is ``raised``: loud, so not a silent bug, listed
with the message (LBFGS flattening a non-contiguous gradient with ``view``
is one).

The references of a configuration are computed once and shared by every
configuration judged against them:

* ``baseline``: the for-loop implementation on contiguous parameters, same
  dtype, same device, same option;
* ``exact``: the for-loop implementation in float64 on the CPU, from the
  same values rounded to the dtype; ``emulated``: the same run with every
  float64 result rounded to the dtype (``core.Rounded``), which also tells
  the lowest precision the optimizer computes at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..dtypes import unit_roundoff
from . import core
from .matrix import Configuration, OptimConfig, OptimSpec, kwargs

# torch's words for "this configuration is not implemented here".
UNSUPPORTED = re.compile(
    r"not supported|not implemented|does not support|doesn't support|only support|supported devices|"
    r"requires all the params|must be on supported|unsupported",
    re.IGNORECASE,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Ran:
    """A run's trajectory, or why there is none (status ``skip`` or ``raised``)."""

    trajectory: core.Trajectory | None
    status: str = "ran"  # "ran", "skip" or "raised"
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Exact:
    """The float64 reference of one optimizer, option and dtype, with what rounding to the dtype does to it."""

    ran: Ran
    sensitivity: dict  # path -> float64: |emulated - exact|, where both have the path with one shape
    u: float  # unit roundoff of the lowest precision the optimizer computes at (at least the dtype's)


def run(spec: OptimSpec, configuration: Configuration, config: OptimConfig) -> Ran:
    dtype = getattr(torch, configuration.dtype)
    return attempt(
        spec.cls, kwargs(spec, configuration.implementation, configuration.option),
        layout=configuration.layout, dtype=dtype, device=configuration.device, steps=config.steps, seed=config.seed,
        names=spec.params, closure=spec.closure, zero=configuration.zero,
    )


def baseline(spec: OptimSpec, configuration: Configuration, config: OptimConfig) -> Ran:
    dtype = getattr(torch, configuration.dtype)
    return attempt(
        spec.cls, kwargs(spec, "forloop", configuration.option),
        layout="contiguous", dtype=dtype, device=configuration.device, steps=config.steps, seed=config.seed,
        names=spec.params, closure=spec.closure,
    )


def exact(spec: OptimSpec, configuration: Configuration, config: OptimConfig) -> Exact:
    dtype = getattr(torch, configuration.dtype)
    common = dict(layout="contiguous", dtype=torch.float64, device="cpu", steps=config.steps, seed=config.seed,
                  values_dtype=dtype, names=spec.params, closure=spec.closure)
    arguments = kwargs(spec, "forloop", configuration.option, reference=True)
    ran = attempt(spec.cls, dict(arguments), **common)
    sensitivity, lowest = {}, torch.float64
    if ran.trajectory is not None:
        mode = core.Rounded(dtype)
        emulated = attempt(spec.cls, dict(arguments), mode=mode, **common)
        lowest = mode.lowest
        if emulated.trajectory is not None:
            for path, value in ran.trajectory.final.items():
                other = emulated.trajectory.final.get(path)
                if other is not None and other.shape == value.shape:
                    sensitivity[path] = (other.to(torch.float64) - value.to(torch.float64)).abs()
    return Exact(ran=ran, sensitivity=sensitivity, u=max(unit_roundoff(dtype), unit_roundoff(lowest)))


def attempt(optimizer, arguments: dict, **how) -> Ran:
    """``core.trajectory``, with what it raised turned into a status and a reason."""
    try:
        return Ran(trajectory=core.trajectory(optimizer, arguments, **how))
    except Exception as e:  # the optimizer's to raise: classified, never swallowed silently
        reason = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        unsupported = isinstance(e, NotImplementedError) or UNSUPPORTED.search(str(e))
        return Ran(trajectory=None, status="skip" if unsupported else "raised", reason=reason)
