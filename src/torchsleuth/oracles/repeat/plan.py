"""Which argument a ``repeat`` case changes, and to what: the plan, and reading and setting that argument.

Design note. A case changes one Python number (or bool) among a sample's
arguments after the input, found by ``numbers`` and named by its path
(``args[1]``, or the keyword); ``changed`` gives B's value. A sample whose
dtype has an ``OTHER_DTYPE`` also gets one case that makes B in that dtype.
``number_at`` and ``with_number`` read and set the argument in a prepared
call, where the input is the first of the call's arguments.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...cases.records import Unit
from ...run import call
from ...run.samples import samples_of
from .detail import Change, argument_position

VARIANTS = ("functional", "inplace")
# The dtype B is made in, for the dtype case.
OTHER_DTYPE = {"float32": "float64", "float64": "float32", "float16": "float32", "bfloat16": "float32",
               "complex64": "complex128", "int64": "int32"}
NUMBER_TYPES = (bool, int, float, complex)


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    """The oracle names of one sample's cases: one per number argument, and one for another dtype."""
    if variant not in VARIANTS:
        return []
    s = samples_of(unit.op, unit.dtype)[sample]  # cached: the engine has just made them
    changes = [Change(argument=argument, number=changed(value)) for argument, value in numbers(s.args, s.kwargs)]
    if unit.dtype in OTHER_DTYPE:
        changes.append(Change(dtype=OTHER_DTYPE[unit.dtype]))
    return [change.oracle_name() for change in changes]


def numbers(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """The Python numbers and bools among a sample's arguments after the input, by path."""
    found = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [(path, value) for path, value in found if type(value) in NUMBER_TYPES]


def changed(value):
    """The value B takes instead: near enough to stay valid, far enough to change the result."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value - 1 if value > 0 else value + 1
    if isinstance(value, float):
        if math.isnan(value):
            return 0.0
        if math.isinf(value):
            return math.copysign(1.0, value)
        return value / 2 if value else 0.5
    return value / 2 if value else complex(0.5, 0.5)


def number_at(prepared: call.Prepared, argument: str):
    """The value of ``argument`` in the prepared call (None when the call has no such argument)."""
    position = argument_position(argument)
    if position is None:
        return prepared.kwargs.get(argument)
    return prepared.args[position] if position < len(prepared.args) else None


def with_number(prepared: call.Prepared, argument: str, value) -> call.Prepared:
    """The prepared call with ``argument`` set to ``value``."""
    position = argument_position(argument)
    if position is None:
        return dataclasses.replace(prepared, kwargs={**prepared.kwargs, argument: value})
    return dataclasses.replace(prepared, args=prepared.args[:position] + (value,) + prepared.args[position + 1:])
