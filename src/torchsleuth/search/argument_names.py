"""What an op's non-tensor arguments are called, and which the sample leaves at their defaults.

Design note. The arguments search picks values by an argument's name (a
``dim`` stays in range, a norm's ``p`` takes the usual orders), and it also
searches the number arguments a sample never passes (``leaky_relu``'s
samples leave ``negative_slope`` at 0.01). Both come from the callable the
variant calls: ``inspect.signature`` for a Python function (``nn.functional``,
OpInfo's lambdas), else the aten schema of the builtin's name, the overload
chosen to fit the sample's own arguments. A callable neither tells about
(``*args, **kwargs``; no schema fits) names nothing: the search then
varies only the sample's own numbers, by type.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

NUMBER_TYPES = (bool, int, float, complex)


@dataclass(frozen=True, kw_only=True, slots=True)
class Signature:
    """What the callable says about one sample's call."""

    positional: tuple[str, ...] = ()  # the name of each of the sample's ``args``, in order ("" where unknown)
    defaulted: tuple[tuple[str, object], ...] = ()  # (name, default) of the numbers the sample leaves out, by keyword


def signature(function: Callable, sample) -> Signature:
    """The names of ``sample``'s positional arguments and its left-out number arguments, for ``function``."""
    found = _python_signature(function, sample)
    if found is None:
        found = _schema_signature(function, sample)
    return found or Signature()


def _python_signature(function: Callable, sample) -> Signature | None:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin: no Python signature
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return Signature()  # a pass-through wrapper: the names are the wrapped function's
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    covered = {p.name for p in positional[: 1 + len(sample.args)]} | set(sample.kwargs)
    defaulted = tuple((p.name, p.default) for p in parameters
                      if p.kind is not p.POSITIONAL_ONLY and p.name not in covered and type(p.default) in NUMBER_TYPES)
    return Signature(positional=tuple(p.name for p in positional[1: 1 + len(sample.args)]), defaulted=defaulted)


def _schema_signature(function: Callable, sample) -> Signature | None:
    name = getattr(function, "__name__", "")
    if not name or name == "<lambda>":
        return None
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except Exception:
        return None
    for schema in schemas:
        arguments = list(schema.arguments)
        positional = [a for a in arguments if not a.kwarg_only]
        if not _fits(positional, arguments, sample):
            continue
        covered = {a.name for a in positional[: 1 + len(sample.args)]} | set(sample.kwargs)
        defaulted = tuple((a.name, a.default_value) for a in arguments
                          if a.name not in covered and a.has_default_value() and type(a.default_value) in NUMBER_TYPES)
        return Signature(positional=tuple(a.name for a in positional[1: 1 + len(sample.args)]), defaulted=defaulted)
    return None


def _fits(positional: list, arguments: list, sample) -> bool:
    """Whether the sample's call could bind to this overload: counts, types and keyword names agree."""
    if not positional or len(positional) < 1 + len(sample.args) or not _accepts(str(positional[0].type), sample.input):
        return False
    if not all(_accepts(str(a.type), value) for a, value in zip(positional[1:], sample.args)):
        return False
    names = {a.name: a for a in arguments}
    return all(key in names and _accepts(str(names[key].type), value) for key, value in sample.kwargs.items())


def _accepts(kind: str, value) -> bool:
    """Whether a schema type (as ``str(argument.type)`` writes it) takes ``value``, roughly."""
    if value is None:
        return kind.startswith("Optional[")
    kind = kind.removeprefix("Optional[").removesuffix("]") if kind.startswith("Optional[") else kind
    if isinstance(value, torch.Tensor):
        return kind == "Tensor"
    if isinstance(value, (list, tuple)):
        return kind.startswith("List[") or kind.endswith("[]")
    if type(value) in NUMBER_TYPES:
        return kind in ("number", "int", "float", "bool", "complex", "SymInt", "Tensor") or kind.startswith("List[int")
    if isinstance(value, str):
        return kind == "str"
    return True
