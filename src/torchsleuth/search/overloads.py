"""The overloads search: a Python number where a tensor was, to reach the overloads that take one.

Design note. OpInfo's samples pass tensors, so ``add.Scalar``, ``pow.Tensor_Scalar``,
``clamp``'s number bounds and the kernels behind them (a wrapped number's own
type promotion and broadcast path) are never called. Where some overload of
the op's packet takes a number at an argument another overload takes a tensor
at (``cases.reach.number_slots``), this search plans two kinds of edit:

* ``scalar:PATH``: the tensor at ``PATH`` ("args[0]", "input", a keyword)
  becomes a Python number, its first element's value, and the op is called as
  always (``torch.add(x, 2.0)``); one edit for each argument an overload
  takes as a number at once (``clamp``'s ``min`` and ``max``);
* ``scalar:PATH@aten.add.Scalar``: the same number, and the case calls that
  overload itself (``cases.reach.calls``): no Python entry point reaches
  ``add.Scalar``, whose kernel is its own. Planned only where the op is the
  public ``torch.NAME`` (so the sample's positions are the schema's) and the
  overload takes the sample's arguments.

The value is the first element's, so it is exact in the case's dtype and
every reference sees the same number. An edit the op refuses makes the case
raise: loud, never a finding.

The overloads no such edit reaches (``norm.ScalarOpt_dim``, ``fill.Tensor``,
``isin.Tensor_Scalar``) are no edits of a sample: in a pointed run with this
search, ``sweep.depth`` adds them as ops of their own, swept from their
schema (``cases.unreached``).
"""

from __future__ import annotations

import dataclasses
import re

import torch

from ..cases import opinfo, reach, unreached
from ..errors import UsageError
from .registry import Search

DESCRIPTION = ("a Python number in place of a tensor where an overload takes one (add.Scalar, pow.Tensor_Scalar, clamp's bounds); "
               "in a pointed run, the overloads no sample reaches, swept from their schema")
VERB = "scalar"
FORM = "scalar:PATH or scalar:PATH@OVERLOAD"


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """For each overload that takes numbers where the sample has tensors: those numbers, and the overload called directly."""
    entry = opinfo.get(op)
    slots = reach.number_slots(entry)
    if not slots or reach.random(entry):
        return []
    at = {name: path for path, value, name in _arguments(sample, reach.parameter_names(entry))
          if name in slots and isinstance(value, torch.Tensor) and value.numel() > 0}
    planned: list[tuple[str, ...]] = []
    for overload in dict.fromkeys(o for found in slots.values() for o in found):
        # every argument this overload takes as a number at once: clamp's min and max together
        paths = [at[name] for name, found in slots.items() if overload in found and name in at]
        if not paths or (variant in ("method", "inplace") and "input" in paths):  # self stays a tensor
            continue
        edits = tuple(f"{VERB}:{path}" for path in paths)
        planned.append(edits)
        if variant == "method" or not reach.direct(entry):
            continue
        edited = _edited(sample, paths)
        if reach.fits(overload, [edited.input, *edited.args], edited.kwargs) and reach.sibling(overload, variant) is not None:
            planned.append((*edits[:-1], f"{edits[-1]}@{overload}"))
    return list(dict.fromkeys(planned))


def _edited(sample, paths: list[str]):
    for path in paths:
        sample = apply(sample, path)
    return sample


def apply(sample, rest: str, *, op: str = ""):
    """The sample with the tensor at ``PATH`` (``rest`` is ``PATH`` or ``PATH@OVERLOAD``) replaced by a Python number."""
    path = rest.partition("@")[0]
    if path == "input":
        return dataclasses.replace(sample, input=_number(sample.input, path))
    match = re.fullmatch(r"args\[(\d+)\]", path)
    if match and int(match[1]) < len(sample.args):
        args = list(sample.args)
        args[int(match[1])] = _number(args[int(match[1])], path)
        return dataclasses.replace(sample, args=tuple(args))
    if path in sample.kwargs:
        return dataclasses.replace(sample, kwargs={**sample.kwargs, path: _number(sample.kwargs[path], path)})
    raise UsageError(f"no argument {path!r} to make a number of in {VERB}:{rest}; the form is {FORM}")


def _arguments(sample, names: tuple[str, ...] | None):
    """(path, value, schema name) of the sample's top-level arguments; positional ones only where names are known."""
    if names is not None:
        for i, value in enumerate((sample.input, *sample.args)[: len(names)]):
            yield ("input" if i == 0 else f"args[{i - 1}]"), value, names[i]
    for key, value in sample.kwargs.items():
        yield key, value, key


def _number(value, path: str):
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        raise UsageError(f"{VERB}:{path} needs a non-empty tensor there, not {type(value).__name__}")
    return value.reshape(-1)[0].item()


SEARCH = Search(name="overloads", description=DESCRIPTION, edits="a tensor argument made a Python number, an overload called by name", order=40,
                plan=plan, verb=VERB, form=FORM, apply=apply, pointed_ops=unreached.with_unreached)
