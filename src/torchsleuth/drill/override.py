"""Putting a kernel in place of aten's CPU kernel: the one place that touches torch.library.

Design note. ``torch.library.Library("aten", "IMPL")`` overrides a kernel
for as long as the Library object lives, so a plant module keeps the one
``planted`` returns at module level, and the tests' ``plant`` fixture
destroys its own when the test ends. Overriding an aten kernel makes torch
warn; that warning is the point of a plant, so it is silenced here.
"""

from __future__ import annotations

import warnings

import torch


def override(library: torch.library.Library, op: str, kernel) -> None:
    """Register ``kernel`` as ``op``'s CPU kernel in ``library`` ("addcmul_", "sum.dim_IntList")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        library.impl(op, kernel, "CPU")


def planted(op: str, kernel) -> torch.library.Library:
    """A new aten library with ``kernel`` in place of ``op``'s CPU kernel; the override lasts while it lives."""
    library = torch.library.Library("aten", "IMPL")
    override(library, op, kernel)
    return library
