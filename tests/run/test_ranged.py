"""The float64 run overflowing like the dtype (run.ranged): a call's own intermediates past a narrow dtype's range are
excused against float64; a kernel whose infinity no intermediate explains is still found."""

from __future__ import annotations

import torch

import torchsleuth
from torchsleuth.run.ranged import Overflowing

QUICK = dict(layouts="contiguous", oracles="none", search="none", shrink=False)


def _pow_samples(dtype, device):
    # pow's exponent gradient is grad * (x**y * log(x)): 7.49**5.45 = 58336 fits float16, times log(7.49) = 2.01 it
    # does not, though the gradient is finite wherever the output gradient is below 0.56
    x = torch.tensor([7.4921875] * 8 + [2.0, 1.5], dtype=dtype, device=device)
    y = torch.tensor([5.44921875] * 8 + [3.0, 0.5], dtype=dtype, device=device)
    return [(x, y)]


def test_overflowing_turns_float64_intermediates_past_the_range_into_infinities():
    x = torch.tensor([7.4921875, 2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([5.44921875, 3.0], dtype=torch.float64, requires_grad=True)
    with Overflowing(torch.finfo(torch.float16).max):
        (grad,) = torch.autograd.grad(torch.pow(x, y), y, torch.tensor([-0.39, 1.0], dtype=torch.float64))
    assert torch.isinf(grad[0]) and grad[0] < 0 and torch.isfinite(grad[1])
    (plain,) = torch.autograd.grad(torch.pow(x, y), y, torch.tensor([-0.39, 1.0], dtype=torch.float64))
    assert torch.isfinite(plain).all()  # float64 alone: -46048


def test_a_backward_graph_overflowing_its_dtype_is_not_a_finding():
    result = torchsleuth.check(torch.pow, _pow_samples, dtypes="float16", variants="backward", **QUICK)
    assert result.sweep.statuses.get("pass", 0) >= 1, result.sweep.statuses
    assert result.clean, result.message()


def _overflow_early(x):
    """Wrong in float16 only: an infinity wherever the result passes 1000, far inside float16's range."""
    y = x * 300
    if x.dtype != torch.float16:
        return y
    return torch.where(y.abs() > 1000, y.sign() * float("inf"), y)


def test_an_infinity_no_intermediate_explains_is_still_found():
    samples = [torch.tensor([1.0, 5.0, -7.0, 0.5])]
    result = torchsleuth.check(_overflow_early, samples, dtypes="float16", variants="functional", **QUICK)
    found = [f for f in result.sweep.findings if f.reference == "precision"]
    assert found and all(f.dtype == "float16" for f in found), result.message()
    assert "_overflow_early" in result.groups[0].summary
