"""The optimizer matrix: which optimizers, implementations, options, dtypes and layouts; its records.

Design note. Nothing here is a hand-kept list of optimizers. ``discover``
takes every class in ``torch.optim`` that subclasses ``Optimizer`` and reads
the rest from facts:

* implementations from the constructor's signature: ``forloop`` always
  (``foreach=False`` where there is a ``foreach``), ``foreach`` where there
  is a ``foreach`` argument, ``fused`` where there is a ``fused`` one. Whether
  the device and dtype have the implementation is learnt by running it: an
  optimizer that refuses (``fused`` without a kernel for the device, say) is
  a skip with torch's own reason, never a finding.
* options from the signature too, each toggled alone from the defaults: a
  boolean flag to its other value (``amsgrad``, ``maximize``,
  ``capturable``, ``centered``, ``nesterov``; named ``no_X`` when the default
  is True), ``weight_decay`` and ``momentum`` from 0 to 0.1 and 0.9. A flag
  that means nothing alone brings its companion: ``nesterov`` needs
  momentum, ``decoupled_weight_decay`` needs a weight decay. Left out:
  ``foreach`` and ``fused`` (they are the implementations) and
  ``differentiable`` (it makes the step itself differentiable, for
  meta-learning; it needs parameters that require grad and changes no
  arithmetic this matrix judges).
* which parameters an optimizer takes, by constructing it on each one alone
  (Muon takes only 2-D ones);
* whether it can run here at all, by one step on float32 parameters: an
  optimizer whose step refuses dense gradients (SparseAdam) is skipped with
  the message it raised;
* whether ``step`` needs a closure (its ``closure`` argument has no default:
  LBFGS). Such an optimizer may evaluate the closure many times a step, each
  at new parameters (LBFGS up to ``max_iter=20``); the matrix's gradients
  are seeded per step, so it is given ``max_iter=1`` where it has that
  argument: one gradient per step, as every other optimizer takes.

The hyperparameters at their edges are edges.py's; which settings a run
takes, and in what order its configurations run, plan.py's.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from dataclasses import asdict, dataclass

from ..cases.records import Case
from . import core

IMPLEMENTATIONS = ("forloop", "foreach", "fused")
DEFAULT_DTYPES = ("float32", "bfloat16", "float16")
DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT_STEPS = 5
DEFAULT_OPTION = "default"
# Hyperparameter edge settings per optimizer in a catalog run (a run over every optimizer): a seeded
# sample, the lr=0 contract first (optim/plan.py); a pointed run (at most POINTED_OPTIMIZERS) takes every one.
CATALOG_BUDGET = 4
POINTED_OPTIMIZERS = 2
# Constructor arguments that are not options of the matrix (see the design note).
NOT_OPTIONS = frozenset({"params", "self", "foreach", "fused", "differentiable"})
# Numeric arguments toggled from a default of zero, and the value they get.
NUMBERS = {"weight_decay": 0.1, "momentum": 0.9}
# Flags that change nothing without another argument set too.
COMPANIONS = {"nesterov": ("momentum",), "decoupled_weight_decay": ("weight_decay",)}
# Options that say where state lives, not what is computed: dropped from the
# float64 reference, which runs on the CPU (capturable needs an accelerator).
DEVICE_ONLY = frozenset({"capturable"})
# How a case records a run with zero gradients (``Case.edits``).
ZERO_EDIT = "grad:zero"
LAYOUT_WORDS = {
    "contiguous": "row-major",
    "transposed": "the 2-D weight and the 4-D conv weight transposed in their last two dims (stride (1, n))",
    "sliced": "every parameter a view of every other element of a wider buffer (gaps between elements)",
    "channels_last": "the 4-D conv weight in channels_last",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """A setting of an optimizer's hyperparameters, named by its parts joined by '+' (optim/edges.py reads and writes them)."""

    name: str  # "default", "amsgrad", "weight_decay", "no_nesterov", "amsgrad+maximize+lr=0", "betas[1]=0.9999+betas:tensor"
    kwargs: tuple[tuple[str, object], ...] = ()

    @property
    def edits(self) -> tuple[str, ...]:
        """How a case records the option (``Case.edits``): none for the defaults."""
        return () if self.name == DEFAULT_OPTION else (f"option:{self.name}",)


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimSpec:
    """What the matrix knows about one optimizer class."""

    name: str  # the class name in torch.optim: "Adam"
    implementations: tuple[str, ...]
    options: tuple[Option, ...]  # the defaults first
    fixed: tuple[tuple[str, object], ...] = ()  # arguments every run gets (LBFGS: max_iter=1)
    closure: bool = False  # step needs a closure
    params: tuple[str, ...] = ()  # the matrix's parameters it takes
    refused: tuple[tuple[str, str], ...] = ()  # (parameter, why) for those it does not
    skip: str = ""  # why it cannot be run at all; "" when it can

    @property
    def cls(self):
        import torch

        return getattr(torch.optim, self.name)

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimConfig:
    """What ``torchsleuth optim`` was asked to do (the store's run key is built from it)."""

    command: str = "optim"
    device: str = "cpu"
    optimizers: tuple[str, ...] = ()  # class names; empty: every one discovered
    implementations: tuple[str, ...] = IMPLEMENTATIONS
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    layouts: tuple[str, ...] = core.LAYOUTS
    options: tuple[str, ...] = ()  # settings by name (optim/edges.py); empty: every option of each optimizer, and the edges
    steps: int = DEFAULT_STEPS
    seed: int = 0
    imports: tuple[str, ...] = ()
    edges: bool = True  # hyperparameters at their edges, flags combined, and the contracts (optim/edges.py, contracts.py)
    budget: int = CATALOG_BUDGET  # edge settings per optimizer, a seeded sample; 0: every one (a pointed run's depth)

    def key(self) -> str:
        """Identifies what is run: a rerun of the same selection resumes an unfinished run."""
        fields = asdict(self)
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True, slots=True)
class Configuration:
    """One optimizer run of the matrix."""

    optimizer: str
    implementation: str
    dtype: str
    device: str
    layout: str
    option: Option
    skip: str = ""  # why it is not run: the optimizer cannot run here, or the layout changes none of its parameters
    zero: bool = False  # every gradient zero: judged by the zero-gradient contract alone (optim/contracts.py)

    @property
    def case(self) -> Case:
        layouts = () if self.layout == "contiguous" else (("param", self.layout),)
        return Case(op=self.optimizer, variant=self.implementation, dtype=self.dtype, device=self.device, sample=0,
                    layouts=layouts, edits=self.option.edits + ((ZERO_EDIT,) if self.zero else ()))

    @property
    def is_baseline(self) -> bool:
        """The for-loop run on contiguous parameters: what the other runs of its dtype are judged against."""
        return self.implementation == "forloop" and self.layout == "contiguous" and not self.zero

    def words(self) -> str:
        """``Adam (foreach, transposed params, bfloat16, option amsgrad)``, ``..., option lr=0, zero gradients)``."""
        option = "" if self.option.name == DEFAULT_OPTION else f", option {self.option.name}"
        zero = ", zero gradients" if self.zero else ""
        return f"{self.optimizer} ({self.implementation}, {self.layout} params, {self.dtype}{option}{zero})"


def names() -> tuple[str, ...]:
    """Every optimizer class torch.optim exports, by name."""
    import torch

    found = []
    for name in dir(torch.optim):
        value = getattr(torch.optim, name)
        if isinstance(value, type) and issubclass(value, torch.optim.Optimizer) and value is not torch.optim.Optimizer:
            found.append(name)
    return tuple(sorted(found))


def discover(selected: tuple[str, ...] = ()) -> list[OptimSpec]:
    """What the matrix knows of each optimizer in ``selected`` (every one when empty)."""
    return [spec(name) for name in (selected or names())]


@functools.cache  # probing costs a few steps; the CLI and the sweep both ask
def spec(name: str) -> OptimSpec:
    import torch

    cls = getattr(torch.optim, name)
    signature = inspect.signature(cls.__init__).parameters
    implementations = ("forloop",) + tuple(i for i in ("foreach", "fused") if i in signature)
    step = inspect.signature(cls.step).parameters.get("closure")
    closure = step is not None and step.default is inspect.Parameter.empty
    fixed = (("max_iter", 1),) if closure and "max_iter" in signature else ()
    params, refused = _accepted(cls, dict(fixed))
    skip = ""
    if not params:
        skip = "it refuses every parameter of the matrix: " + refused[0][1]
    else:
        try:
            kwargs = dict(fixed, **({"foreach": False} if "foreach" in signature else {}))
            core.trajectory(cls, kwargs, layout="contiguous", dtype=torch.float32, device="cpu", steps=1, seed=0,
                            names=params, closure=closure)
        except Exception as e:  # torch's own words say why better than a list of ours could
            skip = f"one step on dense float32 parameters raised {type(e).__name__}: {message(e)}"
    return OptimSpec(name=name, implementations=implementations, options=_options(signature), fixed=fixed,
                     closure=closure, params=params, refused=refused, skip=skip)


def _accepted(cls, fixed: dict) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    import torch

    taken, refused = [], []
    for name, shape in core.PARAMS:
        try:
            cls([torch.zeros(shape)], **fixed)
            taken.append(name)
        except Exception as e:
            refused.append((name, message(e)))
    return tuple(taken), tuple(refused)


def _options(signature) -> tuple[Option, ...]:
    options = [Option(name=DEFAULT_OPTION)]
    for name, parameter in signature.items():
        default = parameter.default
        if name in NOT_OPTIONS or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if isinstance(default, bool):
            kwargs = {name: not default}
            for companion in COMPANIONS.get(name, ()) if not default else ():
                if companion in signature and signature[companion].default == 0:
                    kwargs[companion] = NUMBERS[companion]
            options.append(Option(name=name if not default else f"no_{name}", kwargs=tuple(kwargs.items())))
        elif name in NUMBERS and default == 0 and not isinstance(default, bool):
            options.append(Option(name=name, kwargs=((name, NUMBERS[name]),)))
    return tuple(options)


def kwargs(spec: OptimSpec, implementation: str, option: Option, *, reference: bool = False) -> dict:
    """The constructor's keyword arguments for one run (``reference``: the CPU float64 run, device-only options dropped)."""
    chosen = dict(spec.fixed)
    chosen.update((k, v) for k, v in option.kwargs if not (reference and k in DEVICE_ONLY))
    if implementation == "forloop" and "foreach" in spec.implementations:
        chosen["foreach"] = False
    elif implementation == "foreach":
        chosen["foreach"] = True
    elif implementation == "fused":
        chosen["fused"] = True
    return chosen


def option_names(specs: list[OptimSpec]) -> tuple[str, ...]:
    """Every option name the optimizers in ``specs`` have, the defaults first."""
    return tuple(dict.fromkeys(o.name for s in specs for o in s.options))


def message(e: BaseException) -> str:
    """An exception's words on one line, at most 300 characters."""
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")
