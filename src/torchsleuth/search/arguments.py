"""The arguments search: each number and flag argument at the values OpInfo's samples never give it.

Design note. OpInfo keeps each non-tensor argument at one value per sample,
and often leaves it out (``leaky_relu``'s ``negative_slope``, ``add``'s
``alpha``). Kernels branch on these values: a slope past 1, an ``eps`` of 0,
a negative ``dim``, a flag the other way. This search plans, for every
number or bool argument of a sample after the input (its own, and the ones
it leaves at their defaults, named by ``argument_names``), a few values at
the edges of that argument's range, one edit per value:

``arg:PATH=VALUE`` sets one argument: ``PATH`` is ``args[I]`` (the I-th of the
sample's arguments after the input) or a keyword name (added when the sample
lacks it); ``VALUE`` is a Python literal as ``repr`` writes it (``-0.5``,
``True``, ``inf``, ``nan``), read back with ``ast.literal_eval``, never eval.

The values (``values_for``), from the argument's name, type and value ``v``:

* a dim (``dim``, ``axis``, ...: an int): its other spelling (``-1`` for the
  last of ``n`` dims, and back) and the other end of ``range(n)``, in both
  spellings; never out of range for the input.
* a norm's order (``p``/``ord`` of an op whose name says norm, dist or margin;
  ``norm_type`` anywhere): the usual orders 0, 1, 2, inf, -inf, 0.5, 3.
* a bool: the other one.
* an int that codes a choice (``*mode``, ``reduction``): the other codes
  below ``ENUM_VALUES`` (aten checks none, so another int is no mode at all).
* an int: 0, 1, -1, ``-v``, and a large ``LARGE_INT``.
* a float: 0, ``-v``, ``1 - v`` past the midpoint when ``v`` is in (0, 1), the
  reciprocal when it is at most ``LARGE`` (a small ``v`` becomes a large
  one), ``2v`` and ``v/2`` at +-1; -1, 1 and ``SMALL``/``LARGE`` at 0.
* a complex: 0, ``-v``, its conjugate.

And a pointwise op's float argument in a floating dtype (``alpha``, ``value``,
``negative_slope``, ``beta``, ``threshold``, ``min``/``max``: an int
``alpha`` or ``value`` too) at the dtype's ends (``extremes``): +-inf, its
smallest normal and its largest finite value, where an ``alpha * b`` or a
``x * beta`` overflows or flushes in the dtype.

Some arguments are left alone: ones that say where or how the result is made
rather than what it is (``inplace``, ``out``, ``dtype``, names starting with
``_``). Cases are planned for the functional, in-place and out= variants
(their kernels can differ). A searched call that raises is loud (``raised``),
not a finding; the references run the same edited call (in float64 for the
precision reference), so an edit that changes the result's shape is judged
on its own terms.
"""

from __future__ import annotations

import ast
import dataclasses
import math

import torch

from ..cases import opinfo
from ..errors import UsageError
from . import values
from .argument_names import NUMBER_TYPES, signature
from .registry import Search

DESCRIPTION = "each number and flag argument at its edges: 0, negative, past the midpoint, reciprocal, dims both ways, flags flipped"
VERB = "arg"
FORM = "arg:PATH=VALUE"

VARIANTS = ("functional", "inplace", "out")
# Arguments that say where or how the result is made, not what it is.
LEFT_ALONE = frozenset({"inplace", "out", "dtype", "requires_grad", "pin_memory", "non_blocking", "copy", "memory_format"})
DIM_NAMES = frozenset({"dim", "axis", "dim0", "dim1", "dim2", "start_dim", "end_dim", "source", "destination"})
NORM_ORDER_NAMES = frozenset({"p", "ord"})  # a norm's order in ops named for NORM_OPS (dropout's p is a probability)
NORM_OPS = ("norm", "dist", "margin")
NORM_ORDERS = (0, 1, 2, math.inf, -math.inf, 0.5, 3)
LARGE_INT = 64  # past every dim OpInfo samples have, yet small enough as a size or count
SMALL, LARGE = 1e-3, 1e3
# Int-valued arguments a floating op takes as a float Scalar (add's alpha, addcmul's value): their extremes are floats.
FLOAT_SCALARS = frozenset({"alpha", "value"})
# An int named ``*mode`` or ``reduction`` codes a choice (grid_sampler's interpolation_mode): the
# codes in use are 0, 1, 2, and another int is no mode at all (aten does not check it).
ENUM_VALUES = 3
# Non-finite numbers as repr writes them, which literal_eval cannot read.
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def edit(path: str, value) -> str:
    """The edit that sets argument ``path`` to ``value``: ``arg:alpha=-0.5``."""
    return f"{VERB}:{path}={repr(value).replace(' ', '')}"


def parse_value(text: str):
    """A value as ``edit`` writes it, read back without eval."""
    if text in NON_FINITE:
        return NON_FINITE[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if type(value) not in NUMBER_TYPES and value is not None:
        value = None
    if value is None and text != "None":
        raise UsageError(f"cannot read {text!r} as an argument value; write a number or bool as repr does (-0.5, True, inf, nan)")
    return value


def apply(sample, rest: str, *, op: str = ""):
    """The sample with argument ``PATH`` set to ``VALUE`` (``rest`` is ``PATH=VALUE``)."""
    path, found, text = rest.partition("=")
    if not found or not path:
        raise UsageError(f"argument edit {VERB}:{rest!r} is not of the form {FORM}")
    value = parse_value(text)
    position = sample_position(path)
    if position is None:
        return dataclasses.replace(sample, kwargs={**sample.kwargs, path: value})
    if position >= len(sample.args):
        raise UsageError(f"argument edit {VERB}:{rest}: the sample has {len(sample.args)} arguments after the input")
    return dataclasses.replace(sample, args=sample.args[:position] + (value,) + sample.args[position + 1:])


def sample_position(path: str) -> int | None:
    """Where argument ``path`` stands among the sample's arguments after the input (``"args[1]"`` -> 1); None for a keyword."""
    if not path.startswith("args["):
        return None
    if not (path.endswith("]") and path[len("args["):-1].isdigit()):
        raise UsageError(f"argument path {path!r} is not args[I] nor a keyword name")
    return int(path[len("args["):-1])


def numbers(args: tuple, kwargs: dict) -> list[tuple[str, object]]:
    """The Python numbers and bools among a sample's arguments after the input, by path."""
    found = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [(path, value) for path, value in found if type(value) in NUMBER_TYPES]


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """One edit per planned value of each number argument of the sample, for the variants whose kernels differ."""
    function = opinfo.functions(opinfo.get(op)).get(variant)
    if variant not in VARIANTS or function is None or not _tensor_input(sample.input):
        return []
    known = signature(function, sample)
    named = {f"args[{i}]": name for i, name in enumerate(known.positional) if name}
    arguments = [(path, named.get(path, path), value) for path, value in numbers(sample.args, sample.kwargs)]
    arguments += [(name, name, value) for name, value in known.defaulted]
    dims = _dims(sample.input)
    wide = getattr(torch, dtype).is_floating_point and values.op_kind(op) == "pointwise"
    planned = []
    for path, name, value in arguments:
        if name in LEFT_ALONE or name.startswith("_"):
            continue
        found = values_for(op, name, value, dims)
        if wide:
            found += [v for v in extremes(name, value, getattr(torch, dtype)) if not any(_same(v, k) for k in (value, *found))]
        planned += [(edit(path, v),) for v in found]
    return planned


def extremes(name: str, value, dtype: torch.dtype) -> list[float]:
    """A pointwise op's float argument (and an int ``alpha`` or ``value``, which a float op takes as a float) at the
    ends of the case's floating ``dtype``: +-inf, its smallest normal and its largest finite value."""
    if type(value) is not float and not (type(value) is int and name in FLOAT_SCALARS):
        return []
    info = torch.finfo(dtype)
    return [math.inf, -math.inf, info.smallest_normal, info.max]


def values_for(op: str, name: str, value, dims: int) -> list:
    """The values the search gives argument ``name`` of ``op``, whose sample value is ``value``, for an input of ``dims`` dims."""
    if type(value) is bool:
        found = [not value]
    elif name in DIM_NAMES and type(value) is int:
        found = _dim_values(value, max(dims, 1))
    elif name == "norm_type" or name in NORM_ORDER_NAMES and any(word in op for word in NORM_OPS):
        found = list(NORM_ORDERS)
    elif type(value) is int and (name.endswith("mode") or name == "reduction"):
        found = list(range(ENUM_VALUES))
    elif type(value) is int:
        found = [0, 1, -1, -value, LARGE_INT]
    elif type(value) is float:
        found = _float_values(value)
    else:
        found = [0j, -value, value.conjugate()]
    kept = []
    for v in found:
        if not _same(v, value) and not any(_same(v, k) for k in kept):
            kept.append(v)
    return kept


def _dim_values(dim: int, n: int) -> list[int]:
    if not -n <= dim < n:
        return []  # out of range already: the sample means something else by it
    other = dim - n if dim >= 0 else dim + n
    end = n - 1 if dim % n == 0 else 0
    return [other, end, end - n]


def _float_values(v: float) -> list[float]:
    if math.isnan(v):
        return [0.0, 1.0]
    if math.isinf(v):
        return [-v, 0.0, 1.0]
    if v == 0:
        return [-1.0, 1.0, SMALL, LARGE]
    found = [0.0, -v]
    if 0 < v < 1:
        found.append(1 - v)
    if abs(v) == 1:
        found += [2 * v, v / 2]
    elif abs(1 / v) <= LARGE:
        # a small v's reciprocal is a large value; past LARGE it only adds a constant that
        # cancels in float32 (triplet_margin_loss's eps of 1e-6 made 1e6), no kernel branch
        found.append(1 / v)
    return found


def _same(a, b) -> bool:
    """Equal as an argument: a bool only to a bool; numbers by value (2 is 2.0, nan is nan)."""
    if (type(a) is bool) != (type(b) is bool):
        return False
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b


def _tensor_input(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, torch.Tensor) for t in value)


def _dims(value) -> int:
    """The dims of the sample's input (of its first tensor, for a list of tensors)."""
    return value.dim() if hasattr(value, "dim") else value[0].dim()


SEARCH = Search(name="arguments", description=DESCRIPTION, edits="one number or flag argument", order=20, plan=plan, verb=VERB, form=FORM,
                apply=apply)
