"""A storage too large to carry inline, that is a sample's entries tiled along a dim (the large oracle's stretched
tensors), is carried as those entries and tiled back by the repro script: its values, not seeded stand-ins.

Without it, a finding past 2^23 entries had a script that rebuilt other values and passed (a CPU adaptive average
pooling over a span, whose error needs the sample's own values).
"""

from __future__ import annotations

import base64

import torch

from torchsleuth.run import call
from torchsleuth.scripts.kit import rebuild


def carried(t: torch.Tensor, guards: int = 0):
    storage = torch.cat([t.reshape(-1), torch.full((guards,), float("nan"), dtype=t.dtype)]) if guards else t.reshape(-1)
    return call.tensor_spec("input", t, "contiguous", storage, (tuple(t.shape), tuple(t.stride()), 0))


def rebuilt(spec) -> torch.Tensor:
    data = base64.b85encode(spec.data).decode() if spec.data is not None else None
    return rebuild(spec.dtype, "cpu", spec.storage_numel, spec.shape, spec.stride, spec.storage_offset, data, tiled=spec.tiled)


def test_a_tiled_tensor_too_large_to_inline_is_carried_as_its_period_and_rebuilt_bit_for_bit(monkeypatch):
    monkeypatch.setattr(call, "INLINE_BYTES", 4096)
    sample = torch.randn(2, 3, 7)
    sample[0, 0, 3] = float("nan")  # bits, not values, are compared
    t = sample.repeat(1, 1, 100).narrow(2, 0, 695).contiguous()
    spec = carried(t, guards=4)
    assert spec.tiled == (2, 7) and spec.storage_numel == t.numel() + 4
    back = rebuilt(spec)
    assert back.shape == t.shape and torch.equal(back.view(torch.int32), t.view(torch.int32))
    assert back.untyped_storage().nbytes() == spec.storage_numel * 4  # the guard values come back too


def test_a_tensor_that_is_not_tiled_keeps_its_seeded_stand_in(monkeypatch):
    monkeypatch.setattr(call, "INLINE_BYTES", 4096)
    spec = carried(torch.randn(2, 3, 695))
    assert spec.tiled == () and spec.data is None
    transposed = torch.randn(7, 2).repeat(100, 1).t()  # not contiguous: not carried tiled
    assert carried(transposed).tiled == ()
