"""A live aten call (one ``torchsleuth watch`` saw in a user's program) as a case the judge can take.

Design note. The ops engine judges calls it made itself from OpInfo samples;
``watch`` sees calls a program makes. Both meet at ``call.Prepared``: here a
live call's tensors are copied into fresh storages with the same shape,
strides and storage offset (and poisoned guard elements after the view, as
the engine's layouts have), so the judged call runs on copies and the
program's own call, and its tensors, are left alone. The case names the aten
overload, the variant its schema implies (in-place when it writes an
argument, ``out`` when it takes out= tensors), and the layout each tensor
argument has, read off its strides.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..cases import layouts
from ..cases.records import Case
from . import call, tree

# Elements of poison after each copied view, as cases.layouts puts there.
GUARD = layouts.GUARD


def variant_of(func) -> str:
    """functional, inplace or out, from the overload's schema."""
    schema = func._schema
    mutable = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if any(a.kwarg_only for a in mutable):
        return "out"
    return "inplace" if mutable else "functional"


def written_paths(func, args: tuple, kwargs: dict) -> frozenset[str]:
    """The paths of the tensors the schema marks written (``input``, ``args[1]``, a keyword).

    A written list of tensors (``_foreach_mul_``'s self) is every element's path: ``input[0]``, ...
    """
    leaves = tree.call_leaves(args, kwargs)
    return frozenset(path for path in leaves for argument in _written_arguments(func, args, kwargs)
                     if path == argument or path.startswith(argument + "["))


def _written_arguments(func, args: tuple, kwargs: dict) -> frozenset[str]:
    found = set()
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        if argument.name in kwargs:
            found.add(argument.name)
        elif index < len(args):
            found.add("input" if index == 0 else f"args[{index - 1}]")
    return frozenset(found)


def classify(t: torch.Tensor) -> str:
    """The layout name (cases.records.LAYOUTS) that best describes ``t``'s strides."""
    shape, stride, offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()
    if t.numel() == 0:
        return "empty"
    if any(s == 0 and n > 1 for s, n in zip(stride, shape)):
        return "expanded"
    if layouts.is_contiguous(shape, stride):
        return "offset" if offset else "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    dense = sorted(((s, n) for s, n in zip(stride, shape) if n > 1), reverse=True)
    expected = 1
    for s, n in reversed(dense):
        if s != expected:
            return "strided"
        expected *= n
    return "transposed" if t.dim() == 2 else "permuted"


def replica(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its shape, strides and offset, in a fresh storage with guards after it."""
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    storage = torch.full((t.storage_offset() + extent + GUARD,), layouts.poison(t.dtype), dtype=t.dtype, device=t.device)
    copy = storage.as_strided(t.shape, t.stride(), t.storage_offset())
    # write through the dims of size > 1 only: a stride-0 (expanded) dim holds one value
    kept = tuple(0 if s == 0 else slice(None) for s in t.stride())
    with torch.no_grad():
        if t.numel():
            copy[kept].copy_(t.detach()[kept])
    return copy


def prepare(func, args: tuple, kwargs: dict, *, step: int) -> call.Prepared | None:
    """The live call as a case on copies of its tensors; None when it has no tensor to judge by.

    Raises when a tensor cannot be copied as it is laid out (overlapping
    strides other than stride 0).
    """
    tensors = tree.call_leaves(args, kwargs)
    if not tensors:
        return None
    dtype = next((t.dtype for t in tensors.values() if t.dtype.is_floating_point or t.dtype.is_complex), next(iter(tensors.values())).dtype)
    device = str(next(iter(tensors.values())).device)
    copies = {path: replica(t) for path, t in tensors.items()}
    placed = tuple(sorted((path, classify(t)) for path, t in tensors.items() if classify(t) != "contiguous"))
    case = Case(op=str(func), variant=variant_of(func), dtype=str(dtype).removeprefix("torch."), device=device, sample=step, layouts=placed)
    new_args, new_kwargs = tree.replace_call(args, kwargs, copies)
    return call.Prepared(
        case=case, function=func, args=new_args, kwargs=new_kwargs, tensors=copies,
        written=written_paths(func, args, kwargs), process=_identity,
    )


def base(prepared: call.Prepared) -> call.Prepared:
    """The call whose contiguous run is the reference: the same overload, every tensor to be made contiguous.

    An in-place overload run on contiguous copies returns the value its self
    should end up holding, which is what the in-place contract compares with.
    """
    case = dataclasses.replace(prepared.case, variant="functional", layouts=())
    return dataclasses.replace(prepared, case=case, written=frozenset())


def _identity(value: Any) -> Any:
    return value
