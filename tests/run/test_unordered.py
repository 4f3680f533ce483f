"""Writes through repeated indices (run.unordered): told apart by their indices, judged by metadata across layouts.

PyTorch leaves which of two writes to one element lands unspecified for index_put (without accumulate), put,
index_copy and scatter; a transposed source walks in another order, so its call and the contiguous one may keep
different values there, and neither is wrong. Such calls must not be findings; a kernel that ignores its source's
strides on calls whose indices do not repeat still must be.
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.layouts import contiguous_strides
from torchsleuth.run.unordered import repeats

aten = torch.ops.aten


def test_repeats_reads_the_indices_of_each_declared_op():
    x = torch.zeros(3, 4)
    twice, once = torch.tensor([0, 2, 0]), torch.tensor([2, 0, 1])
    assert repeats(aten.index_put.default, (x, [twice], torch.ones(3, 4)), {})
    assert not repeats(aten.index_put.default, (x, [once], torch.ones(3, 4)), {})
    assert not repeats(aten.index_put.default, (x, [twice], torch.ones(3, 4), True), {})  # accumulate: every write counts
    # two index tensors name (row, column) pairs: rows repeat, pairs do not; -1 is the last row
    assert not repeats(aten._unsafe_index_put.default, (x, [twice, torch.tensor([0, 1, 2])], torch.ones(3)), {})
    assert repeats(aten._index_put_impl_.default, (x.clone(), [torch.tensor([2, -1]), torch.tensor([1, 1])], torch.ones(2)), {})
    assert not repeats(aten.index_put.default, (x, [torch.tensor([True, False, True])], torch.ones(2, 4)), {})
    assert repeats(aten.put.default, (x, torch.tensor([0, 11, -1]), torch.ones(3)), {})  # -1 is element 11
    assert not repeats(aten.put.default, (x, torch.tensor([0, 11, -1]), torch.ones(3), True), {})
    assert repeats(aten.index_copy.default, (x, 0, twice, torch.ones(3, 4)), {})
    assert not repeats(aten.index_copy.default, (x, 0, once, torch.ones(3, 4)), {})
    # scatter along dim 0 writes self[index[i][j]][j]: a repeat within one column only
    assert repeats(aten.scatter.src, (x, 0, torch.tensor([[0, 1], [0, 2]]), torch.ones(2, 2)), {})
    assert not repeats(aten.scatter.src, (x, 0, torch.tensor([[0, 0], [1, 1]]), torch.ones(2, 2)), {})
    assert not repeats(aten.scatter.reduce, (x, 0, torch.tensor([[0, 1], [0, 2]]), torch.ones(2, 2)), {"reduce": "add"})
    assert not repeats(aten.add.Tensor, (x, x), {})


def _sweep(run_sweep, ops: str):
    config = SweepConfig(ops=resolve_ops(ops), dtypes=("float32", "float64"), variants=("functional",),
                         layouts=("contiguous", "transposed"), oracles=(), search=(), workers=0)
    return run_sweep(config)


@pytest.mark.slow
def test_schema_made_index_puts_with_repeated_indices_are_clean(run_sweep):
    # the generator's index tensors are in [0, 2), so they repeat; a transposed values argument changes which write lands
    # (in float64 here: 2 findings before run.unordered)
    result = _sweep(run_sweep, "aten._unsafe_index_put")
    assert result.statuses.get("pass", 0) > 0, result.statuses
    assert not result.findings, [f.summary for f in result.findings]


def test_a_kernel_ignoring_its_source_strides_is_still_found_where_indices_do_not_repeat(plant, run_sweep):
    def index_copy(self, dim, index, source):
        flat = source.as_strided(source.shape, contiguous_strides(source.shape), source.storage_offset())
        return self.clone().index_copy_(dim, index, flat)

    plant("index_copy", index_copy)
    result = _sweep(run_sweep, "index_copy")
    assert result.findings, result.statuses
    assert {f.op for f in result.findings} == {"aten.index_copy.default"}
    assert all(dict(f.layouts).get("args[2]") == "transposed" and f.reference == "layout" for f in result.findings), \
        [(f.layouts, f.reference) for f in result.findings]
