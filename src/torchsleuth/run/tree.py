"""Walking the nested arguments of a call: finding tensors, swapping them, writing them as source.

Arguments are Python values nested in lists, tuples and dicts. Each tensor has
a path: ``input``, ``input[1]`` (a tensor list), ``args[0]``, ``weight`` (a
keyword argument), ``out[1]``. Every transform of a case (layout, device,
dtype) is a map over these tensors; the rest of the structure is kept.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterator

import torch

Tensors = dict[str, torch.Tensor]


def leaves(value: Any, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside ``value`` with its path."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}[{key!r}]")


def call_leaves(args: tuple, kwargs: dict) -> Tensors:
    """The tensors of a call ``f(*args, **kwargs)``: ``input``, ``args[i]``, keyword names."""
    found: Tensors = {}
    for i, arg in enumerate(args):
        found.update(leaves(arg, "input" if i == 0 else f"args[{i - 1}]"))
    for name, arg in kwargs.items():
        found.update(leaves(arg, name))
    return found


def replace(value: Any, path: str, new: Tensors) -> Any:
    """``value`` with each tensor swapped for ``new[path]`` (kept where ``new`` lacks it)."""
    if isinstance(value, torch.Tensor):
        return new.get(path, value)
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, (list, tuple)):
        return rebuild(value, [replace(item, f"{path}[{i}]", new) for i, item in enumerate(value)])
    if isinstance(value, dict):
        return {key: replace(item, f"{path}[{key!r}]", new) for key, item in value.items()}
    return value


def replace_call(args: tuple, kwargs: dict, new: Tensors) -> tuple[tuple, dict]:
    args = tuple(replace(arg, "input" if i == 0 else f"args[{i - 1}]", new) for i, arg in enumerate(args))
    kwargs = {name: replace(arg, name, new) for name, arg in kwargs.items()}
    return args, kwargs


def rebuild(value: list | tuple, items: list) -> Any:
    """A sequence of ``value``'s type holding ``items``: list, tuple, namedtuple or torch.return_types."""
    if type(value) in (list, tuple):
        return type(value)(items)
    if hasattr(value, "_make"):  # namedtuple
        return value._make(items)
    return type(value)(items)  # structseq (torch.return_types.*) takes one sequence


def map_values(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every non-container leaf (tensors and scalars)."""
    if isinstance(value, torch.Size):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return rebuild(value, [map_values(item, fn) for item in value])
    if isinstance(value, dict):
        return {key: map_values(item, fn) for key, item in value.items()}
    return fn(value)


def output_leaves(value: Any, path: str = "out") -> list[tuple[str, Any]]:
    """The leaves of an op's result: tensors, numbers, bools, None, with paths."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        found = []
        for i, item in enumerate(value):
            found.extend(output_leaves(item, f"{path}[{i}]"))
        return found
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            found.extend(output_leaves(item, f"{path}[{key!r}]"))
        return found
    return [(path, value)]


class Unrepresentable(Exception):
    """A value with no Python source that rebuilds it."""


def source(value: Any, path: str) -> str:
    """Python source for ``value``, with tensors written ``T["path"]``."""
    if isinstance(value, torch.Tensor):
        return f"T[{path!r}]"
    if isinstance(value, torch.Size):
        return f"torch.Size({list(value)!r})"
    if isinstance(value, tuple) and type(value) is not tuple:
        raise Unrepresentable(f"{type(value).__name__} at {path}")
    if isinstance(value, (list, tuple)):
        items = [source(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {source(v, f'{path}[{k!r}]')}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, complex):
        return f"complex({source(value.real, path)}, {source(value.imag, path)})"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, torch.memory_format):
        return str(value)
    if isinstance(value, torch.layout):
        return str(value)
    if isinstance(value, slice):
        return f"slice({source(value.start, path)}, {source(value.stop, path)}, {source(value.step, path)})"
    if value is Ellipsis:
        return "..."
    raise Unrepresentable(f"{type(value).__name__} at {path}")


def call_source(args: tuple, kwargs: dict) -> tuple[str, str]:
    """Source of ``args`` and ``kwargs``, as ``(args_src, kwargs_src)``."""
    args_src = ", ".join(source(arg, "input" if i == 0 else f"args[{i - 1}]") for i, arg in enumerate(args))
    kwargs_src = ", ".join(f"{name}={source(arg, name)}" for name, arg in kwargs.items())
    return args_src, kwargs_src


def sample_tensors(sample) -> Tensors:
    """An OpInfo sample's tensor arguments (input, args, kwargs), by path."""
    return call_leaves((sample.input, *sample.args), sample.kwargs)


def map_sample_tensors(sample, change: Callable[[str, torch.Tensor], torch.Tensor]):
    """``sample`` with each tensor argument replaced by ``change(path, tensor)`` (the sample itself is not changed)."""
    new = {path: change(path, t) for path, t in sample_tensors(sample).items()}
    (input, *args), kwargs = replace_call((sample.input, *sample.args), sample.kwargs, new)
    return dataclasses.replace(sample, input=input, args=tuple(args), kwargs=kwargs)
