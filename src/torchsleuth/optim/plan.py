"""The configurations of a run: which settings each optimizer gets, at what depth, in what order.

Design note. An optimizer's settings are the matrix's options (the
defaults, each flag alone: matrix.py) and, with ``OptimConfig.edges``, its
hyperparameters at their edges and its flags combined (edges.py). Depth
follows the question, as the ops sweep's does (``torchsleuth.sweep.depth``):
a run pointed at a few optimizers (``POINTED_OPTIMIZERS``) takes every edge
setting (``budget`` 0); a run over all of them takes ``CATALOG_BUDGET`` per
optimizer, a sample seeded by the run's seed and the optimizer's name, the
lr=0 setting first (its contract is the strongest check an edge gives), and
a note says which it took of how many. Settings named with ``--options``
are run as named, none sampled.

Every setting runs in every implementation, dtype and layout of the run.
With the edges on, each setting the zero-gradient contract holds for
(contracts.py) also runs with zero gradients, in every implementation and
dtype, on contiguous parameters only: the contract is about the arithmetic
at zero; the layouts are judged by the seeded runs.

What a constructor refuses (``betas[0]=1``: "Invalid beta parameter") is
learnt by constructing the optimizer on one parameter of the device: a
setting every implementation refuses is dropped, named in a note; one that
some implementations refuse (a tensor lr with ``foreach=True``) is a skip of
those, with torch's words. Order: each baseline (the for-loop run on
contiguous parameters) comes before what is judged against it.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass

from ..errors import UsageError
from . import contracts, core, edges
from .matrix import (
    CATALOG_BUDGET, DEFAULT_OPTION, DEVICE_ONLY, POINTED_OPTIMIZERS, Configuration, Option, OptimConfig, OptimSpec, kwargs, message,
)

__all__ = ["CATALOG_BUDGET", "POINTED_OPTIMIZERS", "Settings", "depth", "plan", "settings"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """The settings one optimizer runs in a run, and what was left out."""

    options: tuple[Option, ...]  # the matrix's options first, then the edge settings taken
    edges: int = 0  # edge settings the constructor takes
    taken: int = 0  # of those, how many this run takes
    refused: tuple[tuple[str, str], ...] = ()  # (setting, the constructor's words) for those every implementation refuses
    flags_left: tuple[tuple[str, str], ...] = ()  # (flag, why) for flags left out of the combinations on this device


def depth(config: OptimConfig, *, deep: bool, given: set[str] = frozenset()) -> OptimConfig:
    """``config`` at the depth its question asks for: every edge setting (deep), or a sample; a budget in ``given`` is kept."""
    if "budget" in given:
        return config
    return dataclasses.replace(config, budget=0 if deep else CATALOG_BUDGET)


@functools.cache
def refusal(spec: OptimSpec, option: Option, implementation: str, device: str) -> str:
    """Why the constructor refuses ``option`` in ``implementation`` ("" when it takes it)."""
    import torch

    shape = dict(core.PARAMS)[spec.params[0]]
    try:
        spec.cls([torch.zeros(shape, device=device)], **core.materialize(kwargs(spec, implementation, option)))
    except Exception as e:  # torch's words say what it refuses
        return f"{type(e).__name__}: {message(e)}"
    return ""


@functools.cache
def _flags_here(spec: OptimSpec, device: str) -> tuple[tuple[Option, ...], tuple[tuple[str, str], ...]]:
    """The flag options whose step runs on ``device``, and why the others are left out of the combinations."""
    import torch

    taken, left = [], []
    for option in edges.flags(spec):
        if not any(k in DEVICE_ONLY for k, _ in option.kwargs):
            taken.append(option)
            continue
        try:
            core.trajectory(spec.cls, kwargs(spec, "forloop", option), layout="contiguous", dtype=torch.float32, device=device,
                            steps=1, seed=0, names=spec.params[:1], closure=spec.closure)
            taken.append(option)
        except Exception as e:
            left.append((option.name, f"{type(e).__name__}: {message(e)}"))
    return tuple(taken), tuple(left)


@functools.cache
def settings(spec: OptimSpec, config: OptimConfig) -> Settings:
    """The settings ``spec`` runs in ``config``: those named, or its options and (with the edges) its edge settings."""
    implementations = [i for i in spec.implementations if i in config.implementations]
    if config.options:
        named = []
        for text in config.options:
            try:
                named.append(edges.parse(spec, text))
            except UsageError:
                continue  # a setting of another selected optimizer
        return Settings(options=tuple(dict.fromkeys(named)))
    if not config.edges or not implementations:
        return Settings(options=spec.options)
    allowed, left = _flags_here(spec, config.device)
    accepted, refused = [], []

    def accepts(option: Option) -> bool:
        return not all(refusal(spec, option, i, config.device) for i in implementations)

    for option in edges.settings(spec, allowed, config.seed, accepts):
        reasons = [refusal(spec, option, i, config.device) for i in implementations]
        if all(reasons):
            refused.append((option.name, reasons[0]))
        else:
            accepted.append(option)
    taken = accepted
    if config.budget and len(accepted) > config.budget:
        first = [o for o in accepted if o.name == "lr=0" and not contracts.lr_zero(spec, o)]
        rest = [o for o in accepted if o not in first]
        drawn = random.Random(f"{config.seed}|{spec.name}|sample").sample(rest, config.budget - len(first))
        taken = sorted(first + drawn, key=accepted.index)
    return Settings(options=spec.options + tuple(taken), edges=len(accepted), taken=len(taken), refused=tuple(refused),
                    flags_left=left)


def plan(specs: list[OptimSpec], config: OptimConfig) -> list[Configuration]:
    """Every configuration to run, in an order where each baseline comes before what is judged against it."""
    planned = []
    for s in specs:
        if s.skip:
            for dtype in config.dtypes:
                planned.append(Configuration(optimizer=s.name, implementation="forloop", dtype=dtype, device=config.device,
                                             layout="contiguous", option=s.option(DEFAULT_OPTION), skip=s.skip))
            continue
        implementations = [i for i in s.implementations if i in config.implementations]
        options = settings(s, config).options
        for option in options:
            for dtype in config.dtypes:
                for implementation in implementations:
                    for layout in config.layouts:
                        skip = _unchanged(s, layout) or _refused(s, option, implementation, config.device)
                        planned.append(Configuration(optimizer=s.name, implementation=implementation, dtype=dtype,
                                                     device=config.device, layout=layout, option=option, skip=skip))
        if not config.edges:
            continue
        for option in options:
            for dtype in config.dtypes:
                if contracts.zero_gradient(s, option, dtype):
                    continue
                for implementation in implementations:
                    planned.append(Configuration(optimizer=s.name, implementation=implementation, dtype=dtype, device=config.device,
                                                 layout="contiguous", option=option, zero=True,
                                                 skip=_refused(s, option, implementation, config.device)))
    return planned


def _refused(spec: OptimSpec, option: Option, implementation: str, device: str) -> str:
    why = refusal(spec, option, implementation, device)
    # the setting is in the case id: the reason leaves it out, so the summary counts one row per refusal
    return f"its constructor refuses the setting with {implementation}: {why}" if why else ""


def _unchanged(spec: OptimSpec, layout: str) -> str:
    """Why ``layout`` is no configuration of its own for ``spec``: it lays out none of the parameters it takes."""
    shapes = dict(core.PARAMS)
    if layout == "contiguous" or any(core.strides_of(shapes[p], layout) != core.strides_of(shapes[p], "contiguous") for p in spec.params):
        return ""
    return f"{layout} lays out none of the parameters it takes ({', '.join(spec.params)}): the contiguous run covers it"


def notes(specs: list[OptimSpec], config: OptimConfig) -> list[str]:
    """What a run says about its settings: what it sampled, what constructors refused, where a contract does not hold.

    One line per optimizer for its edges; the flags left out and the contracts that do not hold at the defaults
    one line per reason, naming the optimizers.
    """
    said, flags, zero = [], {}, {}
    for s in specs:
        if s.skip:
            continue
        chosen = settings(s, config)
        if chosen.edges:
            taken = [o.name for o in chosen.options if o not in s.options]
            depth = "every one" if chosen.taken == chosen.edges else f"a sample of {chosen.taken} (seed {config.seed})"
            refused = ""
            if chosen.refused:
                name, why = chosen.refused[0]
                refused = f" ({len(chosen.refused)} more its constructor refuses, not run: {name}: {why}{'; ...' if len(chosen.refused) > 1 else ''})"
            said.append(f"{s.name}: {depth} of {chosen.edges} edge settings{refused}: {', '.join(taken)}")
        for flag, why in chosen.flags_left:
            flags.setdefault((flag, why.split(":")[0]), (why, []))[1].append(s.name)
        if config.edges:
            for dtype in config.dtypes:
                if why := contracts.zero_gradient(s, s.option(DEFAULT_OPTION), dtype):
                    dtypes = zero.setdefault(why, {}).setdefault(s.name, [])
                    dtypes.append(dtype)
            if why := contracts.EXCLUDED.get(("lr_zero", s.name)):
                said.append(f"{s.name}: the lr=0 contract is not judged: {why}")
    for (flag, _), (why, names) in flags.items():
        said.append(f"{flag} left out of the flag combinations on {config.device} ({', '.join(names)}): {why}")
    for why, by in zero.items():
        where = ", ".join(f"{name} in {', '.join(dtypes)}" for name, dtypes in by.items())
        said.append(f"no zero-gradient contract at the defaults of {where}: {why}")
    return said
