"""Naming what a training step touches the way its author does: ``encoder.weight``, ``exp_avg_sq of encoder.weight``.

Design note. The optimizer holds parameters, not names. The names live in
the modules, which ``watch`` does not get handed (``torchsleuth watch
train.py`` runs the script unchanged), so on an optimizer's first step the
live ``nn.Module`` objects are looked up once (``gc``) and every parameter
is named by its path from the outermost module that holds it. A tensor is
recognised later by its storage, so views of a parameter are named too, and
the optimizer state, named from the optimizer, is told apart by its own
storage.
"""

from __future__ import annotations

import gc
import warnings

import torch


def _live_modules() -> list[torch.nn.Module]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on some of torch's lazy objects warns of deprecation
        return [o for o in gc.get_objects() if _is_module(o)]


def _is_module(o) -> bool:
    try:
        return isinstance(o, torch.nn.Module)
    except ReferenceError:  # a weak proxy whose object is gone: isinstance asks it for its class and it has none
        return False


def _roots() -> list[torch.nn.Module]:
    """The live modules no other live module holds: the tops of the program's module trees."""
    modules = _live_modules()
    children = {id(child) for m in modules for child in m.children()}
    return [m for m in modules if id(m) not in children]


def module_names() -> dict[int, str]:
    """``id(module)`` -> its path from the outermost live module holding it ("" for a root)."""
    return {id(module): name for root in _roots() for name, module in reversed(list(root.named_modules()))}


def parameter_names() -> dict[int, str]:
    """``id(parameter)`` -> ``encoder.weight``, over every live module tree."""
    return {id(p): name for root in _roots() for name, p in reversed(list(root.named_parameters(remove_duplicate=False)))}


def address(t: torch.Tensor) -> int:
    """What identifies a tensor's memory: its storage's address (views of it share it; 0 if it has none)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def describe(t: torch.Tensor) -> str:
    """A tensor's properties, as the seed story compared them one by one."""
    contiguity = "contiguous" if t.is_contiguous() else "non-contiguous"
    return (
        f"shape {list(t.shape)}, stride {list(t.stride())}, {contiguity}, "
        f"{str(t.dtype).removeprefix('torch.')}, {t.device}"
    )
