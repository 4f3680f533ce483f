"""A call that leaves a tensor it was given unreadable is a finding of the op's, not a failure of torchsleuth's.

``tril``'s and ``triu``'s out= kernels on a permuted ``out`` write over memory outside it (bench/cpu-sweep.md); now and
then what they overwrite is the out tensor's own storage, which can then no longer be read: the copy of every storage
taken after the call (``run.call.execute``) raised ``RuntimeError: unknown parameter type`` inside torchsleuth, and the
CPU catalog of 2026-12-04 stored four such cases as errors. The planted kernel here computes ``tril`` right and marks
its ``out`` corrupted; reading a marked storage raises as the real corruption does.
"""

from __future__ import annotations

import weakref

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.run import call

# the storages the planted kernel corrupted, by data pointer: a reference to the storage itself (torch keeps one Python
# object per storage), so that a later storage made at the same address once this one is freed is not taken for it
# (the test failed now and then inside torchsleuth, reading a fresh storage of the next case as corrupted)
CORRUPTED: dict[int, weakref.ref] = {}
CORRUPTING: list[bool] = []  # whether it corrupts: set by the test


def tril_out(self, diagonal=0, *, out):
    rows = torch.arange(self.shape[-2]).unsqueeze(-1)
    keep = (torch.arange(self.shape[-1]) - rows) <= diagonal
    out.copy_(torch.where(keep, self, torch.zeros((), dtype=self.dtype)))
    if CORRUPTING:
        CORRUPTED[out.untyped_storage().data_ptr()] = weakref.ref(out.untyped_storage())
    return out



@pytest.fixture
def corrupting_tril(plant, monkeypatch):
    plant("tril.out", tril_out)
    read = call.storage_of

    def storage_of(t):
        marked = CORRUPTED.get(t.untyped_storage().data_ptr())
        if marked is not None and marked() is t.untyped_storage():
            raise RuntimeError("unknown parameter type")
        return read(t)

    monkeypatch.setattr(call, "storage_of", storage_of)
    yield CORRUPTING
    CORRUPTING.clear()
    CORRUPTED.clear()


def sweep(run_sweep):
    return run_sweep(SweepConfig(ops=resolve_ops("tril"), variants=("out",), dtypes=("float32",), layouts=("contiguous", "transposed"),
                                 samples=1, workers=0, shrink=False))


def test_an_out_whose_storage_the_call_leaves_unreadable_is_an_out_of_view_write_on_that_out(corrupting_tril, run_sweep):
    corrupting_tril.append(True)
    result = sweep(run_sweep)
    assert "error" not in result.statuses, result.reasons.get("error")
    assert {f.kind for f in result.findings} == {"out_of_view_write"}
    assert {dict(f.layouts).get("out", "contiguous") for f in result.findings} == {"contiguous", "transposed"}
    assert all("tril" in f.op for f in result.findings)
    assert all("storage cannot be read after the call (RuntimeError: unknown parameter type)" in f.summary for f in result.findings)


def test_the_same_kernel_leaving_its_out_readable_is_clean(corrupting_tril, run_sweep):
    result = sweep(run_sweep)
    assert not result.findings and "error" not in result.statuses
    assert result.statuses.get("pass", 0) > 0
