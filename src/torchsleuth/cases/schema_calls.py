"""The calls ``cases.schema`` tries for an op: generated from its schema, made, called, and tried in child processes.

Design note. An aten overload or a custom op has no OpInfo entry to make its
samples, but its schema says what each argument is. This module turns a
schema into candidate calls, as data: each argument gets a few options by its
type and name, and a candidate (``Call``) is a shape that every tensor
argument shares (so broadcasting ops work) and one option per argument.

The options: a tensor of the candidate's shape in the sample's dtype (an
argument named like an index: int64 in [0, 2), in range for every shape
here; named like a mask: bool); ``Tensor?`` also once None; ``Tensor[]`` a
list of two (``TENSORS_LENGTH``); an int named like a dim -1 and 0 (in range for every shape),
other ints 1 and 2; ``int[]`` named like dims ``[0]`` or ``[-1]``, named like a
size or shape the candidate's shape, other lists of ones or twos; floats
0.5, ``Scalar`` 2 (an unsized list of them: one, or as many as a ``Tensor[]``); bools both ways; ``ScalarType`` the sample's dtype; the
optional dtype, layout, device, memory format, generator and bool arguments
None. An argument with a default is left out (the searches vary it later).
An argument the generator cannot make (a ``str`` or a ``Storage`` without a
default) makes the op ungenerated, with that reason (``unsupported``).

Which candidates work is found by calling them (``cases.schema``); making
one again from its ``Call`` and seed gives the same values in every process.
``OverloadCall`` is the callable an entry's variants call: the overload with
a Python signature from its schema, cloning what it writes where asked.
A blind call can kill its process or never return: ``probe_elsewhere`` has
child processes try them, and learns from the child which call it was.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

# The shapes every tensor of a candidate takes, the most telling first (layouts need two dims or more).
SHAPES = ((3, 4), (2, 3, 4), (5,), (2, 2, 3, 4), ())
# At most this many combinations of the arguments' options are tried.
MAX_CHOICES = 12
# How many tensors a ``Tensor[]`` argument gets.
TENSORS_LENGTH = 2

# An option: (KIND, payload). Tensors and shapes are made for the candidate; the rest are plain values.
TENSOR, TENSORS, VALUE, SHAPE, DTYPE, NONE, LEFT_OUT = "tensor", "tensors", "value", "shape", "dtype", "none", "left out"
# Optional arguments of these types are left None: where and how the result is made, not what it is.
_NONE_ONLY = frozenset({"ScalarType", "Layout", "Device", "MemoryFormat", "Generator", "bool", "str"})
_DIM_NAMES = frozenset({"dim", "dims", "axis", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination"})


@dataclass(frozen=True, slots=True)
class Call:
    """One candidate call: the shape its tensors share, and the index of the option each argument takes."""

    shape: tuple[int, ...]
    choice: tuple[int, ...]

    def key(self) -> str:
        return f"{self.shape}|{self.choice}"


def options(argument) -> list[tuple[str, Any]] | str:
    """The options of one schema argument, or why the generator cannot make it (a sentence)."""
    if argument.has_default_value():
        return [(LEFT_OUT, None)]
    kind = argument.real_type
    optional = isinstance(kind, torch._C.OptionalType)
    text = str(kind.getElementType() if optional else kind)
    if optional and text in _NONE_ONLY:
        return [(NONE, None)]
    made = _made(text, argument.name, argument.N)
    if optional:
        return [*(made or []), (NONE, None)]
    return made if made is not None else f"it takes {text} {argument.name}, which the generator cannot make"


def _made(text: str, name: str, n: int | None) -> list[tuple[str, Any]] | None:
    words = set(name.split("_"))
    if text == "Tensor":
        return [(TENSOR, _tensor_kind(words))]
    if text in ("List[Tensor]", "List[Optional[Tensor]]"):
        return [(TENSORS, _tensor_kind(words))]
    if text in ("int", "SymInt"):
        return [(VALUE, -1), (VALUE, 0)] if name in _DIM_NAMES else [(VALUE, 1), (VALUE, 2)]
    if text in ("List[int]", "List[SymInt]"):
        if name in _DIM_NAMES:
            return [(VALUE, list(range(-n, 0)))] if n and n > 1 else [(VALUE, [0]), (VALUE, [-1])]
        if words & {"size", "sizes", "shape"}:
            return [(SHAPE, n)]
        return [(VALUE, [1] * (n or 1)), (VALUE, [2] * (n or 1))]
    lengths = (n,) if n else (1, TENSORS_LENGTH)  # an unsized list: one value, or one per tensor of a list (foreach)
    plain = {
        "float": [0.5], "number": [2], "complex": [complex(0.5, 0.5)], "bool": [False, True],
        "Layout": [torch.strided], "Device": [torch.device("cpu")], "MemoryFormat": [torch.contiguous_format],
        "List[bool]": [[True] * k for k in lengths], "List[float]": [[0.5] * k for k in lengths],
        "List[number]": [[2] * k for k in lengths],
    }
    if text in plain:
        return [(VALUE, value) for value in plain[text]]
    return [(DTYPE, None)] if text == "ScalarType" else None


def _tensor_kind(words: set[str]) -> str:
    if words & {"index", "indices"}:
        return "index"
    return "mask" if "mask" in words else "sample"


def unsupported(schema) -> str:
    """Why no call of ``schema`` can be generated ("" when one can)."""
    for argument in schema.arguments:
        found = options(argument)
        if isinstance(found, str):
            return found
    return ""


def calls(schema, limit: int) -> list[Call]:
    """At most ``limit`` candidates, shapes and option combinations interleaved so the first few differ in both."""
    choices = _choices([options(a) for a in schema.arguments])
    pairs = sorted(itertools.product(range(len(SHAPES)), range(len(choices))), key=lambda p: (p[0] + p[1], p[1]))
    return [Call(shape=SHAPES[s], choice=choices[c]) for s, c in pairs[:limit]]


def _choices(found: list[list[tuple[str, Any]]]) -> list[tuple[int, ...]]:
    """Option combinations, one argument changed at a time, taken in turns from two starts: every first option, and every
    optional tensor None (for an op whose optional tensors need other shapes than its input); at most ``MAX_CHOICES``."""
    first = tuple(0 for _ in found)
    none = tuple(len(o) - 1 if o[0][0] in (TENSOR, TENSORS) and o[-1][0] == NONE else 0 for o in found)

    def changed(base: tuple[int, ...]) -> list[tuple[int, ...]]:
        return [base[:i] + (k,) + base[i + 1:] for i, listed in enumerate(found) if not (base is none and none[i])
                for k in range(len(listed)) if k != base[i]]

    turns = itertools.chain.from_iterable(itertools.zip_longest(changed(first), changed(none)))
    return list(dict.fromkeys(c for c in (first, none, *turns) if c is not None))[:MAX_CHOICES]


def make(schema, call: Call, dtype: torch.dtype, seed: str) -> tuple[list, dict]:
    """The positional and keyword arguments of ``call`` in ``dtype``, its tensors drawn from ``seed`` (the same everywhere).

    An argument left out makes the positional ones after it keywords.
    """
    number = int.from_bytes(hashlib.sha256(f"{seed}|{dtype}|{call.key()}".encode()).digest()[:8], "little")
    args: list = []
    kwargs: dict = {}
    by_keyword = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(number)
        for argument, index in zip(schema.arguments, call.choice):
            kind, payload = options(argument)[index]
            if kind == LEFT_OUT:
                by_keyword = True
                continue
            value = _value(kind, payload, call.shape, dtype)
            if argument.kwarg_only or by_keyword:
                kwargs[argument.name] = value
            else:
                args.append(value)
    return args, kwargs


def _value(kind: str, payload, shape: tuple[int, ...], dtype: torch.dtype):
    if kind == TENSOR:
        return _tensor(payload, shape, dtype)
    if kind == TENSORS:
        return [_tensor(payload, shape, dtype) for _ in range(TENSORS_LENGTH)]
    if kind == SHAPE:
        return list(shape) if payload is None else list(shape[-payload:]) if len(shape) >= payload else [2] * payload
    if kind == DTYPE:
        return dtype
    return None if kind == NONE else payload


def _tensor(kind: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    from torch.testing import make_tensor

    if kind == "index":
        return make_tensor(shape, dtype=torch.int64, device="cpu", low=0, high=2)
    return make_tensor(shape, dtype=torch.bool if kind == "mask" else dtype, device="cpu")


# --- calling the overload ---------------------------------------------------------------------------------

# A repro script's function that clones what an in-place overload writes (the functional variant's call).
_CLONE = "(lambda v: v if v is None else [t.clone() for t in v] if isinstance(v, (list, tuple)) else v.clone())"


class OverloadCall:
    """The overload, called on clones of the arguments at ``written`` (schema positions); a Python signature from its schema.

    The signature names the arguments and their defaults for the searches (``search.argument_names``). Where the
    overload writes its arguments and returns nothing, the call returns the clones it wrote.
    """

    def __init__(self, overload, written: tuple[int, ...] = ()):
        self.overload = overload
        arguments = overload._schema.arguments
        self.written = written
        self.written_names = tuple(arguments[i].name for i in written)
        self.__signature__ = _signature(arguments)
        self.__name__ = str(overload)

    def __call__(self, *args, **kwargs):
        if not self.written:
            return self.overload(*args, **kwargs)
        args = [_clone(a) if i in self.written else a for i, a in enumerate(args)]
        kwargs = {k: _clone(v) if k in self.written_names else v for k, v in kwargs.items()}
        result = self.overload(*args, **kwargs)
        if self.overload._schema.returns:
            return result
        clones = [a for i, a in enumerate(args) if i in self.written] + [v for k, v in kwargs.items() if k in self.written_names]
        return clones[0] if len(clones) == 1 else tuple(clones)

    def expression(self) -> str:
        """This call as Python source; "" for one a script cannot write as an expression (it returns what it cloned)."""
        name = f"torch.ops.{self.overload}"
        if not self.written:
            return name
        if not self.overload._schema.returns:
            return ""
        return (f"(lambda clone: lambda *args, **kwargs: {name}(*[clone(a) if i in {self.written!r} else a for i, a in enumerate(args)], "
                f"**{{k: clone(v) if k in {self.written_names!r} else v for k, v in kwargs.items()}}))({_CLONE})")


def _clone(value):
    if value is None:
        return None
    return [t.clone() for t in value] if isinstance(value, (list, tuple)) else value.clone()


def _signature(arguments) -> inspect.Signature | None:
    """The schema as a Python signature; None where Python cannot write it."""
    empty = inspect.Parameter.empty
    try:
        return inspect.Signature([
            inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY if a.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=a.default_value if a.has_default_value() else empty)
            for a in arguments
        ])
    except ValueError:  # an argument named like a Python keyword ("from"), or an order Python does not allow
        return None


def first_line(error: Exception) -> str:
    """The first line of what ``error`` says, cut at 200 characters."""
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else ""


def tensors(value) -> list[torch.Tensor]:
    """The tensors of a result, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in tensors(v)] if isinstance(value, (list, tuple)) else []


def requiring_grad(values: list) -> list:
    """``values`` with their floating and complex tensors requiring grad."""
    def need(t):
        return t.requires_grad_() if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) else t

    return [[need(t) for t in v] if isinstance(v, list) else need(v) for v in values]


# --- trying calls in processes of their own ------------------------------------------------------------------
#
# A child announces each call before making it (``say("try", ...)``), and each op's record when done; when it
# dies or stops answering, the parent knows which call did it, records that op as working in no dtype, and
# starts another child for the ops left.

# A probe call that takes longer than this hangs.
PROBE_TIMEOUT = 60.0
# At least this many ops for each probe process running at once.
CHUNK = 32
_PROTOCOL = "torchsleuth-probe "
_STREAM: list = []  # a child's stream to its parent (``serving``); empty in every other process


def serving() -> list[str]:
    """In a probe child: the names of the ops to probe, read from stdin; what kernels print goes nowhere from now on."""
    names = json.loads(sys.stdin.readline())
    _STREAM.append(os.fdopen(os.dup(1), "w"))
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # what kernels print must not mix with the protocol
    return names


def say(*message) -> None:
    """In a probe child, tell the parent ``("try", op, call)`` before a call or ``("done", op, record)``; elsewhere nothing."""
    for stream in _STREAM:
        stream.write(_PROTOCOL + json.dumps(message) + "\n")
        stream.flush()


def probe_elsewhere(names: list[str], serve: str) -> dict[str, dict]:
    """The probe records of ``names``, made by child processes running the Python code ``serve`` (as many at once as
    there are CPUs, a few dozen ops each); an op one of whose calls kills or hangs one works in no dtype, saying so."""
    count = max(1, min(os.cpu_count() or 1, len(names) // CHUNK))
    records: dict[str, dict] = {}
    with ThreadPoolExecutor(count) as pool:
        for found in pool.map(_probe_children, [names[i::count] for i in range(count)], [serve] * count):
            records.update(found)
    return records


def _probe_children(names: list[str], serve: str) -> dict[str, dict]:
    """The probe records of ``names``, made in child processes one after another: each dies or hangs at most once."""
    records: dict[str, dict] = {}
    while len(records) < len(names):
        todo = [n for n in names if n not in records]
        with subprocess.Popen([sys.executable, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) as child:
            child.stdin.write(json.dumps(todo) + "\n")
            child.stdin.close()
            lines: queue.Queue = queue.Queue()
            reader = threading.Thread(target=lambda: [*map(lines.put, child.stdout), lines.put("")], daemon=True)
            reader.start()
            last = None
            while line := _next(lines):
                if line.startswith(_PROTOCOL):
                    message = json.loads(line[len(_PROTOCOL):])
                    if message[0] == "try":
                        last = message[1:]
                    else:
                        records[message[1]], last = message[2], None
            hung = line is None
            child.kill()
            code = child.wait()
            reader.join()
        how = "never returns" if hung else f"kills the process ({_signal(code)})"
        failed = [last[0]] if last is not None else todo  # died between calls: nothing more to learn
        reason = f"a generated call {how}: {last[1]}" if last is not None else f"the probe process failed ({_signal(code)})"
        records.update({n: {"working": {}, "backward": [], "error": "", "reason": reason} for n in failed if n not in records})
    return records


def _signal(code: int) -> str:
    try:
        return signal.Signals(-code).name if code < 0 else f"exit status {code}"
    except ValueError:
        return f"signal {-code}"


def _next(lines: queue.Queue) -> str | None:
    """The child's next line; "" when it ended, None when it said nothing for ``PROBE_TIMEOUT`` seconds."""
    try:
        return lines.get(timeout=PROBE_TIMEOUT)
    except queue.Empty:
        return None
