"""Moving a case's tensors between the host and the device, with as few device ops and waits as it takes.

Design note. Several workers on one GPU take turns on it (its processes'
contexts are time-sliced), so what a case asks of the device is paid in the
other workers' turns too (bench/cuda-sweep.md). Three rules follow.

* Tensors go to a CUDA device through pinned memory without waiting
  (``to_device``): a copy from ordinary memory waits for everything queued
  before it.
* They come back in batches waited for once (``to_host``; thousands of small
  ones as one copy each per dtype, ``gathered``).
* A layout is made where the values are (``placed``): a tensor of a case is
  laid out in host memory, its poisoned storage filled and its values placed
  there, and the whole storage goes to the device in one copy, so a tensor
  costs the device one op where laying it out there cost three (the copy in,
  the poison fill, the strided copy). The storage left on the host is exactly
  what the device tensor's storage holds until something writes it, so it is
  also the call's first snapshot (run.call.execute) and the contiguous
  references' host copy (run.references), which need no read-back then.
"""

from __future__ import annotations

import torch

from ..cases import layouts

# How many tensors ``to_host`` copies one by one before it gathers them.
MANY = 16


def to_device(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """``t.to(device)``, queued rather than waited for: a strided CPU tensor bound for a CUDA device is staged in
    pinned memory and copied asynchronously (a copy from ordinary memory waits for everything queued before it)."""
    if t.device.type == "cpu" and torch.device(device).type == "cuda" and t.layout == torch.strided:
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor on the CPU (a CPU tensor as it is): the copies off a CUDA device queued into pinned memory and
    waited for together, once per device, where a ``.cpu()`` each would wait once each.

    More than ``MANY`` of them (``split`` returns thousands) go as one copy per device and dtype (``gathered``): each
    copy into pinned memory takes a pinned block of its own, and thousands of allocations cost more than the waits."""
    found = list(tensors)
    off = [i for i, t in enumerate(tensors) if t.device.type == "cuda" and t.layout == torch.strided]
    groups: dict[tuple, list[int]] = {}
    for i in off:  # one group per tensor, or per device and dtype when there are many
        groups.setdefault((tensors[i].device, tensors[i].dtype) if len(off) > MANY else i, []).append(i)
    gathered_from = []
    for indices in groups.values():
        if len(indices) > 1:
            try:
                gathered_from.append((indices, gathered([tensors[i] for i in indices], "cpu", non_blocking=True)))
                continue
            except RuntimeError:  # a dtype the device cannot concatenate: copied one by one
                pass
        for i in indices:
            found[i] = tensors[i].to("cpu", non_blocking=True)
    for i, t in enumerate(tensors):  # neither on the CPU nor copied above: a blocking copy
        if t.device.type != "cpu" and not (t.device.type == "cuda" and t.layout == torch.strided):
            found[i] = t.to("cpu")
    for device in {tensors[i].device for i in off}:
        torch.cuda.synchronize(device)
    for indices, copies in gathered_from:
        for i, t in zip(indices, copies):
            found[i] = t
    return found


def gathered(tensors: list[torch.Tensor], device, *, non_blocking: bool = False) -> list[torch.Tensor]:
    """``[t.to(device) for t in tensors]`` (one dtype, one device) as one copy: flattened and concatenated where they
    are, copied, and cut back into tensors of their shapes (contiguous, views of one buffer: read them only)."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors]).to(device, non_blocking=non_blocking)
    return [piece.view(t.shape) for t, piece in zip(tensors, flat.split([t.numel() for t in tensors]))]


def storage_of(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as a flat tensor of its dtype (no copy)."""
    storage = t.untyped_storage()
    numel = storage.nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (numel,), (1,))


def placed(layout: str, t: torch.Tensor, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``t`` laid out as ``layout`` (cases.layouts) on ``device``, and the flat host storage it was copied from.

    A strided tensor on the CPU bound for another device is laid out on the CPU and its whole storage moved in one
    copy (queued, through pinned memory, for a CUDA device); the host storage is returned with it, and holds what the
    device tensor's storage holds until something writes either. Anything else (a CPU case, a tensor already on the
    device, a sparse one) is moved and laid out where it lands, and the second item is None."""
    target = torch.device(device)
    if target.type == "cpu" or t.device.type != "cpu" or t.layout != torch.strided:
        return layouts.apply(layout, to_device(t, target)), None
    host = layouts.apply(layout, t.detach())
    storage = storage_of(host)
    if target.type == "cuda":
        storage = storage.pin_memory()  # kept, pinned: to_device then queues the copy from it as it is
    moved = to_device(storage, target)
    return moved.as_strided(host.shape, host.stride(), host.storage_offset()).detach(), storage


def rebuilt(storage: torch.Tensor, meta: tuple, device: str | torch.device) -> torch.Tensor:
    """A fresh tensor on ``device`` over a copy of the flat host ``storage``, viewed as ``meta`` (shape, stride,
    offset): one op on the device, queued where the storage is pinned."""
    shape, stride, offset = meta
    target = torch.device(device)
    fresh = to_device(storage, target) if target.type == "cuda" and storage.is_pinned() else storage.to(target, copy=True)
    return fresh.as_strided(shape, stride, offset)
