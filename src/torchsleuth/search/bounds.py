"""The ``bounds`` search: indices and divisors the CPU refuses, for a device that may not check them.

Design note. A CUDA kernel that lacks a bounds check does not raise: it reads
or writes past the tensor, wraps an index computed in 32 bits, or divides an
integer by zero, and returns what it finds. The CPU checks the same values
and raises. So on a device where a bad index stops the kernel at a
device-side assert (``run.references.ASSERTING``) this search gives a sample
the values the CPU refuses; the sweep sets such cases aside and the refusal
differential (shrink.refusals) sends a share of them to the device, each in a
worker that may die: a device that returns there is an ``unchecked_input``
finding. On the CPU the same cases would only raise, so the search plans
nothing there (``Search.devices``).

The edit ``bound:PATH=KIND`` sets the first element of the integer tensor at
``PATH`` (an index, a target, an offset: any integer tensor but the input
of a floating or complex call), or of the divisor of an integer call (any
integer tensor after the input), to:

* ``past``: the input's element count, past every dim's end (and the
  flattened input's, for ``take``);
* ``negative``: minus that count, less one: before every dim's start;
* ``wrap31``: 2^31 plus the element's own value, past what int32 holds;
* ``wrap32``: 2^32 plus the element's own value, which a kernel computing
  its index in 32 bits wraps back into range: it reads the wrong element
  and every check on the wrapped value passes (int64 tensors only);
* ``zero``: 0, a divisor (integer calls only).

One element only: the rest of the call stays as the sample made it, so a
device that returns gives garbage in one place, as the real bugs do.
"""

from __future__ import annotations

import torch

from ..errors import UsageError
from ..run import references, tree
from .registry import Search

VERB = "bound"
FORM = "bound:PATH=past|negative|wrap31|wrap32|zero"
INDEX_KINDS = ("past", "negative", "wrap31", "wrap32")
VARIANTS = ("functional", "inplace", "out")


def _integer(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """``bound:PATH=KIND`` for each integer tensor after the input: index kinds in a floating call, ``zero`` in an
    integer one."""
    if variant not in VARIANTS:
        return []
    wanted = getattr(torch, dtype)
    integral = not (wanted.is_floating_point or wanted.is_complex or wanted == torch.bool)
    edits = []
    for path, t in tree.sample_tensors(sample).items():
        if path == "input" or t.numel() == 0 or not _integer(t):
            continue
        if integral:
            edits.append((f"{VERB}:{path}=zero",))
        else:
            kinds = INDEX_KINDS if t.dtype == torch.int64 else INDEX_KINDS[:2]
            edits += [(f"{VERB}:{path}={kind}",) for kind in kinds]
    return edits


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with ``bound:PATH=KIND`` made: the first element of the tensor at PATH set as KIND says."""
    path, _, kind = rest.rpartition("=")
    if kind not in (*INDEX_KINDS, "zero"):
        raise UsageError(f"unknown bound {kind!r} in {VERB}:{rest}; expected {FORM}")
    tensors = tree.sample_tensors(sample)
    if path not in tensors:
        raise UsageError(f"no tensor {path!r} in the sample for {VERB}:{rest}; its tensors: {', '.join(tensors) or 'none'}")
    if not _integer(tensors[path]):
        raise UsageError(f"{VERB}:{rest} names a {tensors[path].dtype} tensor; bounds are set in integer tensors")
    first = tensors.get("input")
    count = first.numel() if isinstance(first, torch.Tensor) else 1
    return tree.map_sample_tensors(sample, lambda p, t: _bounded(t, kind, count) if p == path else t)


def _bounded(t: torch.Tensor, kind: str, count: int) -> torch.Tensor:
    changed = t.clone()
    flat = changed.view(-1)
    own = int(flat[0])
    value = {"past": count, "negative": -count - 1, "wrap31": 2**31 + own, "wrap32": 2**32 + own, "zero": 0}[kind]
    info = torch.iinfo(t.dtype)
    flat[0] = max(info.min, min(info.max, value))
    return changed


SEARCH = Search(name="bounds", description="on a device that may not check them (cuda): indices past the end, before the start "
                "and past 2^31 and 2^32, and integer divisors of 0, which the CPU refuses; the refusal differential sends them "
                "to the device", edits="one element of an index or divisor set out of bounds (bound: edits)", order=45, plan=plan,
                verb=VERB, form=FORM, apply=apply, on_device=lambda kind: kind in references.ASSERTING)
