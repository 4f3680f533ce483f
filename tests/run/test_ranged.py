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


# --- a formula evaluated as documented (run.ranged.DOCUMENTED) ------------------------------------


def addcmul_by_two(x, t1, t2):
    return torch.addcmul(x, t1, t2, value=2)


def _addcmul_samples(dtype, device):
    # 2 * 3e38 is past float32's largest value, times 0 a NaN, where the exact result is 1: the documented
    # input + value * tensor1 * tensor2, left to right; the other elements are ordinary (one as large as the
    # inputs, so the result is no structural zero at their scale)
    x = torch.tensor([1.0, 1e33, 3.0, -1.0], dtype=dtype, device=device)
    t1 = torch.tensor([3e38, 1.5, -2.0, 1e30], dtype=dtype, device=device)
    t2 = torch.tensor([0.0, 2.0, 0.25, 0.0], dtype=dtype, device=device)
    return [(x, t1, t2)]


def test_torch_evaluates_addcmul_left_to_right_as_documented():
    x, t1, t2 = _addcmul_samples(torch.float32, "cpu")[0]
    assert torch.isnan(addcmul_by_two(x, t1, t2)[0])  # torch 2.13 CPU: (2 * 3e38) * 0
    with Overflowing(torch.finfo(torch.float32).max):
        ranged = addcmul_by_two(x.double(), t1.double(), t2.double())
    assert torch.isnan(ranged[0]) and ranged[2:].tolist() == [2.0, -1.0]


def test_an_intermediate_of_the_documented_formula_overflowing_is_not_a_finding():
    result = torchsleuth.check(addcmul_by_two, _addcmul_samples, dtypes="float32", variants="functional", **QUICK)
    assert result.sweep.statuses.get("pass", 0) >= 1, result.sweep.statuses
    assert result.clean, result.message()


def addcmul_scaling_early(self, tensor1, tensor2, *, value=1):
    """addcmul that scales ``value * tensor1`` by 1e10 before the product in float32 (undone after): an intermediate
    the documented formula does not have, past float32's range from |value * tensor1| > 3.4e28."""
    if self.dtype != torch.float32:
        return self + value * tensor1 * tensor2
    return self + (value * tensor1 * 1e10) * tensor2 / 1e10


def test_an_addcmul_overflowing_where_the_documented_formula_does_not_is_still_found(plant):
    plant("addcmul", addcmul_scaling_early)
    result = torchsleuth.check(addcmul_by_two, _addcmul_samples, dtypes="float32", variants="functional", **QUICK)
    found = [f for f in result.sweep.findings if f.reference == "precision"]
    assert found and found[0].op == "aten.addcmul.default", result.message()
    assert found[0].mismatch.worst_index == (3,), found[0].mismatch  # 2e30 * 1e10 overflows; (2e30 * 0) does not


def addcdiv_by_pi(x, t1, t2):
    return torch.addcdiv(x, t1, t2, value=3.14)


def _addcdiv_samples(dtype, device):
    # 3.14 * 1.4e-45 rounds to a float32 subnormal, 3 * 1.4e-45, and / -1.4e-45 gives -3 where the exact result is -3.14:
    # the documented input + value * tensor1 / tensor2 evaluated left to right in float32
    tiny = torch.finfo(torch.float32).smallest_normal * 2.0 ** -23
    x = torch.tensor([tiny, 1.0, 5.0], dtype=dtype, device=device)
    t1 = torch.tensor([tiny, 2.0, 1.0], dtype=dtype, device=device)
    t2 = torch.tensor([-tiny, 4.0, 8.0], dtype=dtype, device=device)
    return [(x, t1, t2)]


def test_a_documented_formula_losing_digits_to_a_subnormal_intermediate_is_not_a_finding():
    x, t1, t2 = _addcdiv_samples(torch.float32, "cpu")[0]
    assert addcdiv_by_pi(x, t1, t2)[0].item() == -3.0  # torch 2.13 CPU; exact -3.14
    result = torchsleuth.check(addcdiv_by_pi, _addcdiv_samples, dtypes="float32", variants="functional", **QUICK)
    assert result.clean, result.message()
