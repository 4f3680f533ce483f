"""The bounds search: indices and divisors the CPU refuses, planned only where a bad index asserts, and found through
the refusal differential when a (simulated) device kernel lacks its bounds check (tests/refusal_plants.py)."""

from __future__ import annotations

import pytest
import torch

from refusal_plants import UNCHECKED

from torchsleuth.config import SweepConfig
from torchsleuth.search import plan
from torchsleuth.search.edits import apply
from torchsleuth.store.sqlite import Store
from torchsleuth.sweep import depth, sweep
from torchsleuth.run.samples import samples_of
from torchsleuth.errors import UsageError


def _sample():
    return next(s for s in samples_of("index_select", "float32") if s.input.dim() == 2)


def test_bounds_plans_only_where_a_bad_index_asserts_and_sets_one_element(asserting):
    sample = _sample()
    found = plan(("bounds",), "index_select", "functional", "float32", sample, "cuda")
    assert ("bound:args[1]=past",) in found and ("bound:args[1]=wrap32",) in found
    edited = apply(sample, ("bound:args[1]=past",), op="index_select")
    index, own = edited.args[1], sample.args[1]
    assert int(index.reshape(-1)[0]) == sample.input.numel() and torch.equal(index.reshape(-1)[1:], own.reshape(-1)[1:])
    wrapped = apply(sample, ("bound:args[1]=wrap32",), op="index_select").args[1]
    assert int(wrapped.reshape(-1)[0]) == 2**32 + int(own.reshape(-1)[0])
    assert plan(("bounds",), "index_select", "functional", "int64", sample, "cuda") == [("bound:args[1]=zero",)]
    with pytest.raises(UsageError):
        apply(sample, ("bound:args[1]=far",), op="index_select")


def test_bounds_plans_nothing_on_the_cpu():
    assert plan(("bounds",), "index_select", "functional", "float32", _sample(), "cpu") == []


def _unchecked(tmp_path, search):
    config = depth(SweepConfig(ops=("index_select",), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                               workers=0, shrink=False, search=search), deep=True, given={"oracles"})
    namespace: dict = {}
    exec(compile(UNCHECKED, "plant", "exec"), namespace)
    try:
        sweep(config, db=tmp_path / f"{'-'.join(search) or 'none'}.db")
    finally:
        namespace["_library"]._destroy()
    store = Store(tmp_path / f"{'-'.join(search) or 'none'}.db")
    return [f for f in store.findings(store.runs()[-1].id) if f.kind == "unchecked_input"]


@pytest.mark.slow
def test_a_kernel_without_its_bounds_check_is_found_through_the_bounds_search_and_missed_without_it(asserting, tmp_path):
    found = _unchecked(tmp_path, ("bounds",))
    assert found and all(f.opinfo == "index_select" for f in found)
    edits = {e for f in found for e in f.case_id.split("|") if e.startswith("bound:")}
    assert {"bound:args[1]=past", "bound:args[1]=negative"} <= edits, edits
    assert any("index out of range" in f.summary for f in found)
    assert not _unchecked(tmp_path, ())  # OpInfo's own indices and the contiguous layout: nothing the CPU refuses
