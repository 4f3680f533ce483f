"""Hyperparameters at their edges: the settings beyond each optimizer's defaults, by rule, and their names.

Design note. The options of the matrix (matrix.py) toggle each flag alone
at otherwise default values; real bugs sit at other values. Which values a
hyperparameter gets follows from its name and its default, read from the
constructor's signature, never from a table per optimizer:

* bounded (a rate in [0, 1]: ``betas``, ``momentum``, ``dampening``,
  ``rho``, ``alpha``, ``etas``, when the default lies in [0, 1]):
  ``BOUNDED_VALUES``, 0, tiny (1e-8), past the midpoint (0.5), near 1
  (0.999, 0.9999), just below 1 (1 - 1e-8: 1 in float32 and below, the
  mirror of tiny) and 1 itself, the edge most constructors refuse;
* scale (every other number: ``lr``, ``eps``, ``weight_decay``, ``lambd``,
  ``lr_decay``, ``t0``, ``step_sizes``, ...): ``SCALE_VALUES``, 0, tiny,
  large (10 and 1e3), with the sign of a negative default (Adafactor's
  ``beta2_decay``);
* count (a whole number named ``*_steps``, ``*_size``, ``*_iter``,
  ``*_eval``): 0, 1 and twice the default;
* each element of a tuple on its own (``betas[1]``), by the rule its
  argument and element default give; ``None``, strings and callables have
  no range and keep their default; so do the matrix's fixed arguments
  (LBFGS ``max_iter=1``);
* a tensor where torch's docstring gives the argument a ``Tensor`` type
  (``lr``; ``betas`` of Adam and AdamW): the default and every edge value
  of that argument again as 0-dim tensors (``core.AsTensor``);
* flags both ways, combined: every combination of two or more flag options
  (``COMBINATIONS`` at most, a seeded sample beyond) with one edge value
  drawn (seeded) from the singles above, and every non-empty combination
  with lr=0 (the lr=0 contract under each flag). A flag the device refuses
  on its own (``capturable`` off an accelerator) is left out of them.

An edge value only matters with a companion set too (``dampening`` needs
momentum): it brings it, as matrix.py's flags do. What a constructor refuses
(``betas[0]=1``) is loud, not a finding: plan.py drops it, saying so.

Names. A setting is named by its parts joined by ``+``, in the signature's
order: an option of the matrix (``amsgrad``, ``no_nesterov``), a value
(``lr=0``, ``betas[1]=0.9999``) or a tensor form (``lr:tensor``):
``amsgrad+maximize+lr=0``. ``compose`` turns parts into the setting and its
keyword arguments and ``parse`` reads a name back, so a case id alone
rebuilds its setting (the repro scripts, ``--options``) whatever a catalog
run sampled.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import random
import re
from dataclasses import dataclass

from ..errors import UsageError
from .core import AsTensor
from .matrix import DEFAULT_OPTION, NOT_OPTIONS, NUMBERS, Option, OptimSpec

BOUNDED = re.compile(r"betas?\d*|momentum|dampening|rho|alpha|etas")
COUNT = re.compile(r".*_(steps|size|iter|eval)")
BOUNDED_VALUES = (0.0, 1e-8, 0.5, 0.999, 0.9999, 1 - 1e-8, 1.0)
SCALE_VALUES = (0.0, 1e-8, 10.0, 1e3)
# An edge value of the key changes nothing while the companion is 0: it brings NUMBERS[companion].
COMPANIONS = {"dampening": ("momentum",)}
# Flag combinations per optimizer at most (a seeded sample beyond): 2^5 covers every optimizer of torch 2.13.
COMBINATIONS = 32
TENSOR = "tensor"


@dataclass(frozen=True, kw_only=True, slots=True)
class Hyper:
    """One numeric hyperparameter (or one element of a tuple of them) and the rule its values follow."""

    argument: str
    index: int | None  # the element of a tuple argument (betas[1]); None for a number
    default: float | int
    rule: str  # "bounded", "scale" or "count"
    tensor: bool  # torch's docstring gives the argument a Tensor type

    @property
    def name(self) -> str:
        return self.argument if self.index is None else f"{self.argument}[{self.index}]"

    @property
    def values(self) -> tuple:
        """The edge values, the default left out."""
        if self.rule == "count":
            candidates = (0, 1, 2 * self.default)
        elif self.rule == "bounded":
            candidates = BOUNDED_VALUES
        else:
            candidates = tuple(-v if self.default < 0 and v else v for v in SCALE_VALUES)
        return tuple(v for v in dict.fromkeys(candidates) if v != self.default)


@functools.cache
def hyperparameters(spec: OptimSpec) -> tuple[Hyper, ...]:
    """The numeric hyperparameters of ``spec``'s constructor, in signature order."""
    documented = _tensor_arguments(spec.cls.__doc__ or "")
    found = []
    for name, parameter in _signature(spec).items():
        if name in NOT_OPTIONS or name in dict(spec.fixed) or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = parameter.default
        elements = list(enumerate(default)) if isinstance(default, tuple) else [(None, default)]
        for index, value in elements:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if isinstance(value, int) and COUNT.fullmatch(name):
                rule = "count"
            elif BOUNDED.fullmatch(name) and 0 <= value <= 1:
                rule = "bounded"
            else:
                rule = "scale"
            found.append(Hyper(argument=name, index=index, default=value, rule=rule, tensor=name in documented))
    return tuple(found)


def _tensor_arguments(doc: str) -> frozenset[str]:
    """The arguments torch documents with a Tensor type: ``lr (float, Tensor, optional): ...``."""
    return frozenset(m.group(1) for m in re.finditer(r"^\s+(\w+) \(([^)\n]*)\)", doc, re.MULTILINE) if "Tensor" in m.group(2))


def _signature(spec: OptimSpec):
    return inspect.signature(spec.cls.__init__).parameters


def flags(spec: OptimSpec) -> tuple[Option, ...]:
    """The matrix's options that turn a flag (``amsgrad``, ``no_nesterov``), each bringing its companions."""
    return tuple(o for o in spec.options if o.kwargs and isinstance(o.kwargs[0][1], bool))


# --- names ---------------------------------------------------------------------------------


def _number(value) -> str:
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def compose(spec: OptimSpec, parts) -> Option:
    """The setting of ``spec`` that ``parts`` name (an option, ``NAME=VALUE``, ``NAME[i]=VALUE``, ``NAME:tensor``).

    Raises ``UsageError`` naming what ``spec`` does not have or cannot take.
    """
    read = [_read(spec, part.strip()) for part in parts if part.strip() and part.strip() != DEFAULT_OPTION]
    order = list(_signature(spec))
    read = sorted(dict.fromkeys(read), key=lambda r: (order.index(r[1]), r[0], -1 if r[2] is None else r[2]))
    if not read:
        return spec.option(DEFAULT_OPTION)
    names = [_text(r) for r in read]
    if len(names) == 1 and any(o.name == names[0] for o in spec.options):
        return spec.option(names[0])
    defaults = {name: p.default for name, p in _signature(spec).items()}
    chosen, explicit = {}, set()
    for kind, argument, index, value in read:
        if kind == 0:  # an option of the matrix
            chosen.update(spec.option(value).kwargs)
            explicit.update(k for k, _ in spec.option(value).kwargs)
        elif kind == 1:
            explicit.add(argument)
            if index is None:
                chosen[argument] = value
            else:
                elements = list(chosen.get(argument, defaults[argument]))
                elements[index] = value
                chosen[argument] = tuple(elements)
            for companion in COMPANIONS.get(argument, ()):
                if companion in defaults and companion not in explicit and defaults[companion] == 0:
                    chosen[companion] = NUMBERS[companion]
    for kind, argument, _, _ in read:
        if kind == 2:
            value = chosen.get(argument, defaults[argument])
            chosen[argument] = tuple(_tensor(v) for v in value) if isinstance(value, tuple) else _tensor(value)
    return Option(name="+".join(names), kwargs=tuple(chosen.items()))


def _tensor(value):
    return value if value is None or isinstance(value, AsTensor) else AsTensor(float(value))


def parse(spec: OptimSpec, name: str) -> Option:
    """The setting a name written by ``compose`` (or by a user) stands for."""
    return compose(spec, name.split("+"))


def _text(read: tuple) -> str:
    kind, argument, index, value = read
    if kind == 0:
        return value
    if kind == 2:
        return f"{argument}:{TENSOR}"
    return f"{argument}{'' if index is None else f'[{index}]'}={_number(value)}"


def _read(spec: OptimSpec, part: str) -> tuple:
    """One part of a name as (kind, argument, index, value): kind 0 an option, 1 a value, 2 a tensor form."""
    for option in spec.options:
        if option.name == part and option.kwargs:
            return (0, option.kwargs[0][0], None, part)
    hypers = hyperparameters(spec)
    known = {h.argument for h in hypers}
    tensor = re.fullmatch(rf"(\w+):{TENSOR}", part)
    value = re.fullmatch(r"(\w+)(?:\[(\d+)\])?=(.*)", part)
    if not tensor and not value:
        raise UsageError(f"unknown option {part!r} of {spec.name}; its options: {', '.join(o.name for o in spec.options)}; "
                         f"or a hyperparameter at a value: NAME=VALUE, NAME[i]=VALUE, NAME:{TENSOR} (NAME one of {', '.join(sorted(known))})")
    argument = (tensor or value).group(1)
    if argument not in known:
        raise UsageError(f"unknown hyperparameter {argument!r} of {spec.name}; its numeric hyperparameters: "
                         f"{', '.join(h.name for h in hypers) or 'none'}")
    if tensor:
        return (2, argument, None, None)
    index = None if value.group(2) is None else int(value.group(2))
    hyper = next((h for h in hypers if h.argument == argument and h.index == index), None)
    if hyper is None:
        elements = ", ".join(h.name for h in hypers if h.argument == argument)
        if index is None:
            raise UsageError(f"{spec.name}'s {argument} is a tuple: set one element at a time ({elements}), e.g. {argument}[0]=VALUE")
        raise UsageError(f"{spec.name}'s {argument} has no element {argument}[{index}]; its elements: {elements}")
    text = value.group(3).strip()
    try:
        number = int(text) if hyper.rule == "count" else float(text)
    except ValueError:
        whole = "a whole number" if hyper.rule == "count" else "a number"
        raise UsageError(f"bad value {text!r} for {hyper.name} of {spec.name}: expected {whole} (its default is {hyper.default!r})") from None
    if number != number:
        raise UsageError(f"bad value {text!r} for {hyper.name} of {spec.name}: NaN is no hyperparameter value")
    return (1, argument, index, number)


# --- the settings -------------------------------------------------------------------------


def singles(spec: OptimSpec) -> list[Option]:
    """Each hyperparameter at each of its edge values alone, and the tensor forms torch documents."""
    hypers = hyperparameters(spec)
    found = [compose(spec, [f"{h.name}={_number(v)}"]) for h in hypers for v in h.values]
    for argument in dict.fromkeys(h.argument for h in hypers if h.tensor):
        found.append(compose(spec, [f"{argument}:{TENSOR}"]))
        found += [compose(spec, [f"{h.name}={_number(v)}", f"{argument}:{TENSOR}"]) for h in hypers if h.argument == argument for v in h.values]
    return found


def combinations(spec: OptimSpec, allowed: tuple[Option, ...], seed: int, edges: list[Option]) -> list[Option]:
    """Flags combined (``allowed``: the flag options the device takes): two or more with one seeded edge, any with lr=0.

    ``edges``: the singles to draw from (those the constructor takes).
    """
    rng = random.Random(f"{seed}|{spec.name}|combinations")
    subsets = [c for size in range(1, len(allowed) + 1) for c in itertools.combinations(allowed, size)]
    if len(subsets) > COMBINATIONS:
        subsets = sorted(rng.sample(subsets, COMBINATIONS), key=subsets.index)
    has_lr = any(h.argument == "lr" for h in hyperparameters(spec))
    found = []
    for subset in subsets:
        names = [o.name for o in subset]
        if len(subset) >= 2 and edges:
            found.append(compose(spec, names + rng.choice(edges).name.split("+")))
        if has_lr:
            found.append(compose(spec, names + ["lr=0"]))
    return found


def settings(spec: OptimSpec, allowed: tuple[Option, ...], seed: int, accepts=lambda option: True) -> list[Option]:
    """Every edge setting of ``spec``: the singles, then the combinations; none that is an option of the matrix.

    ``accepts(option)``: whether the constructor takes a single; the combinations draw from those it does.
    """
    options = {o.name for o in spec.options}
    found = {}
    alone = singles(spec)
    for option in alone + combinations(spec, allowed, seed, [o for o in alone if accepts(o)]):
        if option.name not in options:
            found.setdefault(option.name, option)
    return list(found.values())


def number_form(spec: OptimSpec, option: Option) -> Option | None:
    """``option`` with every tensor form given as the number it holds; None when it has none."""
    parts = option.name.split("+")
    kept = [p for p in parts if not p.endswith(f":{TENSOR}")]
    return None if len(kept) == len(parts) else compose(spec, kept)
