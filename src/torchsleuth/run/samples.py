"""An op's OpInfo samples in a dtype, made once per process.

The engine makes them for a unit; the shrinker, the diagnosis, the oracles and
shard ask for the same list again and again, so it is cached here, below all
of them, and every caller sees the same objects (a case's ``sample`` is an
index into this list).
"""

from __future__ import annotations

import functools
import warnings

import torch

from ..cases import opinfo


def samples_of(op: str, dtype: str) -> list:
    """The op's samples in ``dtype``, OpInfo's warnings silenced (cached)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _samples(op, dtype)


@functools.lru_cache(maxsize=4)
def _samples(op: str, dtype: str) -> list:
    return opinfo.samples(opinfo.get(op), getattr(torch, dtype))


def forget(op: str) -> None:
    """Drop what is cached of ``op``'s samples: ``torchsleuth.check`` registered it anew (with other samples)."""
    _samples.cache_clear()
