"""Kernel reach: which aten overloads an op's entry points can reach, and calling one directly.

Design note. An OpInfo entry's samples reach one aten overload (``aten.add.Tensor``)
while its packet has others with kernels of their own (``add.Scalar``, the
``out`` overloads), and aten has in-place siblings OpInfo does not declare.
This module says, from PyTorch's own dispatcher, which overloads exist
(``found``: each overload of the op's packets that has a CPU or composite
kernel), which arguments some overload takes as a number where another takes
a tensor (``number_slots``: where the ``overloads`` search puts a Python
number), and which overloads a traced call reached (``reached``).

Some overloads no Python entry point reaches (``add.Scalar``: the Python
binding wraps the number into a tensor and calls ``add.Tensor``). A searched
case reaches one by an edit ``scalar:PATH@aten.add.Scalar``: ``calls`` then
gives every variant of the case that overload (its in-place and out=
overloads), so the case and its references call the same kernel, and the
repro script calls ``torch.ops.aten.add.Scalar`` (``name_of``).

An internal kernel the op dispatches to (``aten._softmax`` under ``F.softmax``)
is reached the same way, by an edit ``internal:aten._softmax.default#0``: the
case calls that overload with the arguments the op's trace gave it.

A kernel registered only as CompositeImplicitAutograd decomposes before a
dispatch mode sees it, so a trace never names it; only a direct call does.
Everything here works on torch 2.4 through 2.14 (schemas, ``overloads()``,
``_dispatch_has_kernel_for_dispatch_key``) and is cached per packet.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

# The dispatch keys whose kernel counts as the overload's own on the CPU.
KERNEL_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")
COMPOSITE_IMPLICIT = "CompositeImplicitAutograd"


# Python namespaces whose functions aten names with the namespace as a prefix (torch.special.erfcx: aten::special_erfcx).
PREFIXED = ("special", "linalg", "fft")


def aten_name(entry) -> str:
    """The aten packet an entry's functional variant is named after ("add", "relu" for nn.functional.relu).

    OpInfo's ``aten_name`` defaults to the entry's Python path, which names no
    packet (``nn.functional.embedding``, ``special.bessel_j0``): then the packet
    that path is in aten's terms, where ``torch.ops.aten`` has it (``embedding``,
    ``special_bessel_j0``, ``_scaled_mm`` for ``torch._scaled_mm``); else the name
    as declared, which names none (``masked.sum``: no aten op of its own).
    """
    declared = getattr(entry, "aten_name", None) or entry.name.split(".")[0]
    if packet(declared) is not None:
        return declared
    return next((name for name in _spellings(getattr(entry, "aten_name", None) or entry.name) if packet(name) is not None), declared)


def _spellings(path: str) -> tuple[str, ...]:
    """The packets a Python path may call by aten's naming (see ``aten_name``), to be checked against ``torch.ops.aten``."""
    parts = path.split(".")
    if parts[:3] == ["torch", "ops", "aten"]:
        return tuple(parts[3:4])  # torch.ops.aten._safe_softmax.default
    parts = parts[1:] if parts[0] == "torch" else parts
    if parts[:2] == ["nn", "functional"]:
        return tuple(parts[2:3])  # the last component: F.embedding calls aten::embedding
    if len(parts) == 2 and parts[0] in PREFIXED:
        return ("_".join(parts),)
    return tuple(parts[:1]) if len(parts) == 1 else ()


@functools.cache
def packet(name: str):
    """``torch.ops.aten.NAME``, or None where aten has no such packet."""
    if not name or not name.replace("_", "a").isalnum():
        return None
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


def packets(entry) -> tuple[str, ...]:
    """The aten packets the entry's public entry points can reach: the op, its in-place ``NAME_``, its backward."""
    name = aten_name(entry)
    names = (name, name if name.endswith("_") else name + "_", getattr(entry, "aten_backward_name", None) or "")
    return tuple(n for n in dict.fromkeys(names) if packet(n) is not None)


def qualified(op) -> str:
    """The dispatcher's name of an overload: ``aten::add.Scalar``, ``aten::relu`` for a default one."""
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


@functools.cache
def kernel_keys(name: str) -> tuple[str, ...]:
    """The ``KERNEL_KEYS`` an overload ("aten.add.Scalar") has a kernel for; () for TorchScript-only ones."""
    op = overload(name)
    if op is None:
        return ()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return tuple(key for key in KERNEL_KEYS if has(qualified(op), key))
    except RuntimeError:  # aten::add.int: a TorchScript operator, not in the dispatcher
        return ()


@functools.cache
def overloads(name: str) -> tuple[str, ...]:
    """A packet's overloads that have a CPU or composite kernel, as "aten.add.Tensor"."""
    found = packet(name)
    if found is None:
        return ()
    named = (f"aten.{name}.{o}" for o in found.overloads())
    return tuple(n for n in named if kernel_keys(n))


def found(entry) -> tuple[str, ...]:
    """Every overload the entry's packets have a kernel for, in packet order."""
    return tuple(o for p in packets(entry) for o in overloads(p))


def composite_only(name: str) -> bool:
    """Whether the overload's one kernel decomposes into others (a trace can never name it)."""
    return kernel_keys(name) == (COMPOSITE_IMPLICIT,)


@functools.cache
def overload(name: str):
    """``torch.ops.aten.add.Scalar`` for "aten.add.Scalar"; None where there is none."""
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != "aten" or packet(parts[1]) is None:
        return None
    return getattr(packet(parts[1]), parts[2], None)


def is_out(name: str) -> bool:
    op = overload(name)
    return op is not None and takes_out(op)


def takes_out(op) -> bool:
    """Whether the overload ``op`` is an out= overload (it takes an ``out`` argument)."""
    return any(getattr(a, "is_out", False) for a in op._schema.arguments)


def random(entry) -> bool:
    """Whether any overload of the entry's packets draws random numbers (its siblings are not its own)."""
    return any(torch.Tag.nondeterministic_seeded in overload(o).tags for o in found(entry))


# --- what an overload takes ------------------------------------------------------------------


def _element(kind):
    return kind.getElementType() if isinstance(kind, torch._C.OptionalType) else kind


# Schema types of a number argument: a Scalar (add.Scalar's other), and a float or an int (normal.Tensor_float's std)
ANY_NUMBER = (torch._C.NumberType, torch._C.FloatType, torch._C.IntType)


def takes_number(argument) -> bool:
    return isinstance(_element(argument.type), torch._C.NumberType)


def takes_tensor(argument) -> bool:
    return isinstance(_element(argument.type), torch._C.TensorType)


def number_slots(entry) -> dict[str, tuple[str, ...]]:
    """Argument name -> the functional overloads that take a number there where another overload takes a tensor.

    ``add``: ``{"other": ("aten.add.Scalar",)}``; ``pow``: ``self`` (``pow.Scalar``)
    and ``exponent`` (``pow.Tensor_Scalar``); ``clamp``: ``min`` and ``max``.
    """
    return _number_slots(aten_name(entry))


def any_number_slots(packet: str) -> frozenset[str]:
    """``number_slots``' argument names for aten packet ``packet``, a ``float`` or ``int`` counting as a number as a
    ``Scalar`` does (``normal.Tensor_float``'s ``std``)."""
    return frozenset(_number_slots(packet, ANY_NUMBER))


@functools.cache
def _number_slots(name: str, kinds: tuple = (torch._C.NumberType,)) -> dict[str, tuple[str, ...]]:
    functional = [o for o in overloads(name) if not is_out(o)]
    tensor_names = {a.name for o in functional for a in overload(o)._schema.arguments if takes_tensor(a)}
    slots: dict[str, list[str]] = {}
    for o in functional:
        for a in overload(o)._schema.arguments:
            if isinstance(_element(a.type), kinds) and a.name in tensor_names:
                slots.setdefault(a.name, []).append(o)
    return {k: tuple(v) for k, v in slots.items()}


def parameter_names(entry) -> tuple[str, ...] | None:
    """The schema names of the entry's positional parameters, in order; None where they are not known.

    A Python function (a lambda of OpInfo's, ``F.relu``) names them itself;
    a builtin public function (``torch.add``) takes the schema's own order.
    """
    try:
        params = inspect.signature(entry.op).parameters.values()
        return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        pass
    if not direct(entry):
        return None
    schemas = [overload(o)._schema for o in overloads(aten_name(entry)) if not is_out(o)]
    # names by position, from the overload with the most tensor arguments (add.Tensor's self, other)
    best = max(schemas, key=lambda s: sum(takes_tensor(a) for a in s.arguments), default=None)
    return None if best is None else tuple(a.name for a in best.arguments if not a.kwarg_only)


def direct(entry) -> bool:
    """Whether the entry's op is the public ``torch.NAME`` of its packet, so a sample's positions are the schema's."""
    name = aten_name(entry)
    return entry.op is getattr(torch, name, None) and packet(name) is not None


def fits(name: str, values: list, kwargs: dict) -> bool:
    """Whether overload ``name`` takes ``values`` by position and ``kwargs`` by name (types and arity only)."""
    schema = overload(name)._schema
    positional = [a for a in schema.arguments if not a.kwarg_only and not getattr(a, "is_out", False)]
    by_name = {a.name: a for a in schema.arguments}
    if len(values) > len(positional) or any(k not in by_name for k in kwargs):
        return False
    given = {a.name: v for a, v in zip(positional, values)} | kwargs
    for name_, value in given.items():
        if isinstance(value, torch.Tensor) != takes_tensor(by_name[name_]):
            return False
    return all(a.name in given or _has_default(a) or getattr(a, "is_out", False) for a in schema.arguments)


def _has_default(argument) -> bool:
    has = getattr(argument, "has_default_value", None)
    return has() if has is not None else argument.default_value is not None or isinstance(argument.type, torch._C.OptionalType)


def sibling(name: str, variant: str) -> str | None:
    """The overload a variant of functional overload ``name`` calls: its in-place one, its out= one (None: none)."""
    if variant in ("functional", "backward"):
        return name
    base = name.split(".")[1]
    if variant not in ("inplace", "out"):
        return None
    # the sibling takes the same arguments (pow.Tensor_Scalar -> pow_.Scalar, add.Scalar -> add.Scalar_out)
    wanted = [(a.name, str(a.type)) for a in overload(name)._schema.arguments]
    for candidate in overloads(base + "_") if variant == "inplace" else [o for o in overloads(base) if is_out(o)]:
        arguments = overload(candidate)._schema.arguments
        if [(a.name, str(a.type)) for a in arguments if not getattr(a, "is_out", False)] == wanted:
            return candidate
    return None


def single_out(name: str):
    """The out= overload that takes functional overload ``name``'s arguments and one tensor ``out`` (``norm.out`` of
    ``norm.ScalarOpt_dim``), or None: the out variant of an op swept from its schema calls it."""
    found = sibling(name, "out")
    outs = [a.name for a in overload(found)._schema.arguments if getattr(a, "is_out", False)] if found else []
    return overload(found) if outs == ["out"] else None


# --- calling an overload directly ----------------------------------------------------------


# The edit verb of a direct call of an internal kernel the op's trace names (``search.internal``):
# ``internal:aten._softmax.default#0``, or ``internal:aten._ctc_loss.default#0>0``, judged on output 0 alone.
INTERNAL = "internal"


def called(edits: tuple[str, ...]) -> str:
    """The overload a case's edits call directly ("aten.add.Scalar" from ``scalar:args[0]@aten.add.Scalar``,
    "aten._softmax.default" from ``internal:aten._softmax.default#0``), or ""."""
    for edit in edits:
        verb, _, rest = edit.partition(":")
        if verb == "scalar" and "@" in rest:
            return rest.partition("@")[2]
        if verb == INTERNAL:
            return rest.partition("#")[0]
    return ""


def calls(entry, functions: dict[str, Callable], edits: tuple[str, ...]) -> dict[str, Callable]:
    """``functions`` (variant -> callable), or, where ``edits`` call an overload directly, that overload's per variant.

    The references are made with the ``functional`` one, so a case and its
    references call the same kernel; a variant the overload has no sibling
    for is left out (the case is then skipped, saying so).
    """
    name = called(edits)
    if not name or overload(name) is None:
        return functions
    found_ = {}
    for variant in functions:
        target = sibling(name, "functional" if variant == "method" else variant)
        if target is not None:
            found_[variant] = overload(target)
    kept = kept_outputs(edits)
    return {variant: Outputs(overload=function, kept=kept) for variant, function in found_.items()} if kept else found_


def kept_outputs(edits: tuple[str, ...]) -> tuple[int, ...]:
    """The outputs a direct call of an internal kernel is judged on (``internal:...#K>0,2``); () for all of them.

    The op's own call uses only some outputs of many internal kernels (``F.ctc_loss`` takes
    ``_ctc_loss``'s loss and drops ``log_alpha``, partly uninitialized; ``F.embedding_bag``
    drops the bags ``_embedding_bag_forward_only`` may leave empty): the others hold
    nothing the op promises. A malformed list is left to the edit to refuse.
    """
    for edit in edits:
        verb, _, rest = edit.partition(":")
        if verb == INTERNAL:
            listed = rest.partition("#")[2].partition(">")[2].split(",")
            return tuple(int(i) for i in listed) if all(i.isdigit() for i in listed) else ()
    return ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Outputs:
    """A directly called overload whose result is the outputs ``kept`` (by position) of the overload's."""

    overload: Any
    kept: tuple[int, ...]

    def __call__(self, *args, **kwargs):
        result = self.overload(*args, **kwargs)
        return result[self.kept[0]] if len(self.kept) == 1 else tuple(result[i] for i in self.kept)

    def __str__(self) -> str:
        return str(self.overload)


def name_of(function: Any) -> str:
    """A repro script's name for a directly called overload ("torch.ops.aten.add.Scalar"); "" for anything else.

    Some of its outputs (``Outputs``): a lambda that calls it and picks them, "(lambda *args, **kwargs:
    torch.ops.aten._ctc_loss.default(*args, **kwargs)[0])".
    """
    if isinstance(function, Outputs) and isinstance(function.overload, torch._ops.OpOverload):
        picked = f"[{function.kept[0]}]" if len(function.kept) == 1 else ""
        called_ = f"torch.ops.{function.overload}(*args, **kwargs){picked}"
        if not picked:
            called_ = f"(lambda result: ({', '.join(f'result[{i}]' for i in function.kept)},))({called_})"
        return f"(lambda *args, **kwargs: {called_})"
    return f"torch.ops.{function}" if isinstance(function, torch._ops.OpOverload) else ""


def reached(ops: Iterable, *called_: Any) -> tuple[str, ...]:
    """The aten overloads a case reached: those its trace names, and the ones it called by name (""s left out)."""
    names = {str(op) for op in ops} | {str(c) for c in called_ if c is not None and str(c)}
    return tuple(sorted(n for n in names if n.startswith("aten.")))
