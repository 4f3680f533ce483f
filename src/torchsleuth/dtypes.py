"""Dtype names as users write them, and the few facts about dtypes every stage needs."""

from __future__ import annotations

import torch

from . import names

# Names a user may give to --dtypes, in the order they are listed; and their aliases (``names``: checked without torch).
NAMES = names.DTYPES
ALIASES = names.DTYPE_ALIASES


def parse(name: str) -> torch.dtype:
    return getattr(torch, names.dtype(name))


def name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def is_inexact(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def wide(dtype: torch.dtype) -> torch.dtype:
    """float64 for a floating dtype, complex128 for a complex one; others as they are."""
    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return dtype


def real_part(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def unit_roundoff(dtype: torch.dtype) -> float:
    dtype = real_part(dtype)
    if not dtype.is_floating_point:
        return 0.0
    return torch.finfo(dtype).eps / 2
