"""Shared fixtures: planting a kernel for one test, and sweeping into a fresh store; and what tests in several folders share
(``from conftest import ...``: pytest puts this folder on ``sys.path`` when it loads this file)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings

import pytest
import torch

from torchsleuth import SweepConfig, SweepResult, sweep
from torchsleuth.drill.override import override
from torchsleuth.run.imports import IMPORTED


# The files whose tests take longest on 2 cores, the longest first (`pytest -n 2 --dist loadfile --durations=60`, this
# machine, 2026-12-07: 266 s down to 60 s each). pytest-xdist's loadfile hands out whole files in collection order;
# collected in folder order these came last, and the run ended on one of them while the other process idled. Handed
# out first, the short files fill in beside them.
LONGEST_FILES = (
    "shard/test_shard_targeted.py", "watch/test_watch_sharded.py", "workers/test_executor_ray.py", "project/test_docs.py",
    "oracles/test_oracle_compile_variant.py", "scripts/test_crash_steps.py", "oracles/test_oracle_compile_chains.py",
    "search/test_rounding_and_sequence_plants.py", "shard/test_shard_ranks.py", "store/test_resume.py",
    "commands/test_terminal_output.py", "shrink/test_attribute.py",
)


def pytest_collection_modifyitems(config, items):
    """The longest files' tests first (``LONGEST_FILES``), each file's tests in their own order, the rest as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}

    def key(item) -> int:
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        return rank.get(path, len(rank))

    items.sort(key=key)  # stable: within a file, and among the rest, the collection's order


@pytest.fixture(autouse=True, scope="session")
def names_cache(tmp_path_factory):
    """The names a full load caches (torchsleuth.names) go to the session's folder, not the user's cache folder."""
    os.environ["TORCHSLEUTH_CACHE"] = str(tmp_path_factory.mktemp("names-cache"))


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
def autograd_plant():
    """``autograd_plant(op, function)``: ``function`` as ``op``'s AutogradCPU kernel until the test ends (an
    ``autograd.Function`` whose forward runs below autograd: its derivative formulas replace aten's)."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield lambda op, function: library.impl(op, function, "AutogradCPU")
        finally:
            library._destroy()


@pytest.fixture
def run_sweep(tmp_path):
    """Sweeps ``config`` into a store of its own (a shared store would resume the last run)."""
    counter = itertools.count()

    def run(config: SweepConfig) -> SweepResult:
        return sweep(config, db=str(tmp_path / f"runs-{next(counter)}.db"))

    return run


def run_with_and_without(text: str, plant_source: str, tmp_path, timeout: float = 120) -> dict[str, subprocess.CompletedProcess]:
    """A repro script run as it is (``clean.py``) and after a plant's source (``planted.py``): what script tests compare
    (``timeout``: seconds each may take; a script that compiles needs more)."""
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(plant_source + "\n" + text)
    return {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=timeout) for p in (clean, planted)}



def script_main(text: str):
    """A repro script's ``main``, defined in this process (its module run as ``repro``, so that nothing runs yet): the
    fast tier's way to run a script the slow tier runs in fresh interpreters, its helpers measured here."""
    namespace = {"__name__": "repro"}
    exec(compile(text, "repro.py", "exec"), namespace)
    return namespace["main"]

# Reads a tensor's storage as if it were contiguous: the bug of a kernel that ignores strides.
AS_IF_CONTIGUOUS = '''
import warnings

import torch


def as_if_contiguous(t):
    strides, step = [], 1
    for n in reversed(t.shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return t.as_strided(t.shape, strides, t.storage_offset())
'''


def plant_file(path, source: str):
    """Writes ``source`` (a module defining ``library``) to ``path`` and yields the path; after the test, the kernels the
    CLI's ``--import`` of it registered are unregistered."""
    path.write_text(source)
    yield str(path)
    loaded = IMPORTED.pop(str(path), None)
    if loaded is not None:
        loaded["library"]._destroy()


@pytest.fixture
def asserting(monkeypatch):
    """The CPU counted among the devices where a bad index asserts (run.references.ASSERTING), a device simulated for
    the refusal differential's tests: its refused cases are set aside, then replayed (tests/refusal_plants.py)."""
    from torchsleuth.run import references

    monkeypatch.setattr(references, "ASSERTING", frozenset({"cpu", "cuda"}))
