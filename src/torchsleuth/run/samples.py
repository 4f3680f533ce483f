"""An op's OpInfo samples in a dtype, made once per process.

The engine makes them for a unit (and picks those a unit sweeps: ``chosen_samples``); the shrinker, the diagnosis, the oracles and
shard ask for the same list again and again, so it is cached here, below all
of them, and every caller sees the same objects (a case's ``sample`` is an
index into this list).
"""

from __future__ import annotations

import functools
import warnings

import torch

from ..cases import opinfo
from ..cases.plan import spread
from . import tree

# Samples with more tensor elements than this are left to --samples 0: every
# layout of a 5-D tensor of a million elements costs seconds, and only
# grid_sampler_3d has such samples.
MAX_SAMPLE_ELEMENTS = 1 << 18


def samples_of(op: str, dtype: str) -> list:
    """The op's samples in ``dtype``, OpInfo's warnings silenced (cached)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _samples(op, dtype)


@functools.lru_cache(maxsize=4)
def _samples(op: str, dtype: str) -> list:
    return opinfo.samples(opinfo.get(op), getattr(torch, dtype))


def chosen_samples(samples: list, count: int) -> list[int]:
    """Indices of ``count`` samples spread over the list (all for 0), leaving out the huge ones."""
    if count == 0:
        return list(range(len(samples)))
    sizes = [sum(t.numel() for t in tree.call_leaves((s.input, *s.args), s.kwargs).values()) for s in samples]
    affordable = [i for i, size in enumerate(sizes) if size <= MAX_SAMPLE_ELEMENTS] or [min(range(len(samples)), key=sizes.__getitem__)] if samples else []
    return [affordable[i] for i in spread(len(affordable), count)]


def forget(op: str) -> None:
    """Drop what is cached of ``op``'s samples: ``torchsleuth.check`` registered it anew (with other samples)."""
    _samples.cache_clear()
