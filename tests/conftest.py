"""Shared fixtures: planting a kernel for one test, and sweeping into a fresh store."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, SweepResult, sweep
from torchsleuth.drill.override import override


@pytest.fixture
def plant():
    """``plant("addcmul_", kernel)`` replaces aten's CPU kernel until the test ends.

    In-process only: sweeps with ``workers=0`` see it, spawned workers do not
    (they load plants through ``SweepConfig.imports``).
    """
    library = torch.library.Library("aten", "IMPL")
    try:
        yield lambda op, kernel: override(library, op, kernel)
    finally:
        library._destroy()


@pytest.fixture
def run_sweep(tmp_path):
    """Sweeps ``config`` into a store of its own (a shared store would resume the last run)."""
    counter = itertools.count()

    def run(config: SweepConfig) -> SweepResult:
        return sweep(config, db=str(tmp_path / f"runs-{next(counter)}.db"))

    return run


def run_with_and_without(text: str, plant_source: str, tmp_path) -> dict[str, subprocess.CompletedProcess]:
    """A repro script run as it is (``clean.py``) and after a plant's source (``planted.py``): what script tests compare."""
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(plant_source + "\n" + text)
    return {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120) for p in (clean, planted)}
