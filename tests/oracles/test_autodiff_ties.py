"""The autodiff oracle gives no verdict at a tie or a kink in any argument, and still finds a wrong derivative elsewhere.

On torch 2.13: clamp's input equal to its ``min`` tensor is a tie where both
one-sided derivatives are valid (forward and reverse mode pick different
ones); at the input equal to both bounds, the function of the input alone is
flat (finite differences say 0) while that of all three is not; pow at
(0, 0) is singular in the exponent (0 ** t is 0 or inf). None of these is a
finding. A clamp whose forward-mode derivative is wrong away from any tie is
still found, and named.
"""

from __future__ import annotations

import pytest
import torch

import test_oracle_autodiff
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.oracles.autodiff import helpers

planted = test_oracle_autodiff.planted  # the fixture: planted(source) runs a plant's source until the test ends
TANH_DOUBLE_BACKWARD_PLANT = test_oracle_autodiff.TANH_DOUBLE_BACKWARD_PLANT


def case(op: str, sample: int, edits: str, form: str) -> Case:
    return Case(op=op, variant="functional", dtype="float32", device="cpu", sample=sample, edits=tuple(edits.split(";")),
                oracle=f"autodiff:{form}")


# Cases of pointed runs on torch 2.13 that reported a rule the math allows.
CLAMP_TIE = case("clamp", 2, "dim:input@2>23;dim:args[0]@2>23;special:input=nonfinite;special:args[0]=nonfinite@1;size:5>1;"
                 "values:input=zeros;values:args[0]=zeros", "forward")
CLAMP_BOTH_BOUNDS = case("clamp", 6, "dim:input@2>23;dim:args[0]@2>23;dim:args[1]@2>23;special:input=nonfinite;special:args[0]=nonfinite@1;"
                         "size:23>11;size:11>5;size:10>2;values:input=zeros;values:args[0]=zeros;size:2>1;values:args[1]=zeros;size:5>1",
                         "forward")
POW_AT_ZERO = case("pow", 7, "dim:input@2>23;dim:args[0]@2>23;special:input=nonfinite;special:args[0]=nonfinite@1;size:23>1;size:10>1;"
                   "values:input=zeros;values:args[0]=zeros", "second")


def test_a_tie_with_another_argument_is_not_smooth_though_the_argument_alone_is_flat():
    def call(T):
        return torch.clamp(T["input"], T["args[0]"], T["args[1]"])

    zero = torch.zeros(3, dtype=torch.float64)
    one = torch.ones(3, dtype=torch.float64)
    (smooth,) = helpers.smooth_elsewhere(call, {"input": zero, "args[0]": zero.clone(), "args[1]": zero.clone()}, "input")
    assert not smooth.any()  # the input at both bounds: moving the bounds with it breaks the tie
    (smooth,) = helpers.smooth_elsewhere(call, {"input": zero, "args[0]": zero.clone(), "args[1]": torch.zeros(3, dtype=torch.int64)}, "input")
    assert not smooth.any()  # an integer upper bound cannot move: the input and the lower bound moved up together break the tie
    (smooth,) = helpers.smooth_elsewhere(call, {"input": zero, "args[0]": -one, "args[1]": one}, "input")
    assert smooth.all()  # strictly inside: smooth in every argument


@pytest.mark.slow
@pytest.mark.parametrize("at", [CLAMP_TIE, CLAMP_BOTH_BOUNDS, POW_AT_ZERO], ids=["clamp-tie", "clamp-both-bounds", "pow-at-zero"])
def test_no_verdict_at_a_tie_or_a_kink_in_any_argument(at):
    outcome = run_case(at)
    assert outcome.status in ("pass", "skip"), [f.summary for f in outcome.findings]


CLAMP_JVP_PLANT = '''
import warnings
import torch


class _Clamp(torch.autograd.Function):
    """clamp with tensor bounds: value and backward right, forward mode half the tangent strictly inside the bounds."""

    @staticmethod
    def forward(x, lo, hi):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.clamp(x, lo, hi)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def masks(x, lo, hi):
        below = x < lo if lo is not None else torch.zeros_like(x, dtype=torch.bool)
        above = (x > hi) & ~below if hi is not None else torch.zeros_like(x, dtype=torch.bool)
        return below, above, ~below & ~above

    @staticmethod
    def backward(ctx, g):
        x, lo, hi = ctx.saved_tensors
        below, above, inside = _Clamp.masks(x, lo, hi)
        return (g * inside, None if lo is None else (g * below).sum_to_size(lo.shape),
                None if hi is None else (g * above).sum_to_size(hi.shape))

    @staticmethod
    def jvp(ctx, tx, tlo, thi):
        x, lo, hi = ctx.saved_tensors
        below, above, inside = _Clamp.masks(x, lo, hi)
        out = 0.5 * tx * inside  # the bug: half the tangent inside the bounds
        if tlo is not None:
            out = out + tlo * below
        if thi is not None:
            out = out + thi * above
        return out


_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("clamp.Tensor", lambda x, min=None, max=None: _Clamp.apply(x, min, max), "AutogradCPU")
'''


@pytest.mark.slow
def test_a_clamp_whose_forward_mode_is_wrong_away_from_the_ties_is_still_found(planted, run_sweep):
    planted(CLAMP_JVP_PLANT)
    config = SweepConfig(ops=resolve_ops("clamp"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=3,
                         workers=0, oracles=("autodiff",), shrink=False)
    found = [f for f in run_sweep(config).findings if f.kind == "gradient_mismatch"]
    assert found, "the planted clamp forward-mode derivative was not found"
    assert any(f.op == "aten.clamp.Tensor" and "forward-mode derivative of clamp [float32] with respect to input" in f.summary
               for f in found), [f.summary for f in found]


# --- a mode's own intermediate past a narrow dtype's range (run.ranged.Largest) ----------------------

# pow in float16, second derivative with respect to a 0-dim exponent: forward over reverse computes x**y * log(x)**2
# (117951 at x = 0.0127, y = -2) past 65504 and gives -inf; double backward stays in range and gives -5468 (exact -5464.67)
POW_FLOAT16 = Case(op="pow", variant="functional", dtype="float16", device="cpu", sample=3, edits=("values:args[0]=small", "size:5>2"),
                   oracle="autodiff:second")


@pytest.mark.slow
def test_a_mode_overflowing_the_dtype_in_its_own_intermediate_is_not_judged_there():
    outcome = run_case(POW_FLOAT16)
    assert outcome.status == "pass", [f.summary for f in outcome.findings]
    assert "forward over reverse in float64 passes float16's range on the way" in outcome.reason, outcome.reason


TANH_INF_PLANT = TANH_DOUBLE_BACKWARD_PLANT.replace(
    "return gg * (1 - y * y), gg * g * 2 * y * (1 - y * y)  # the bug: d/dx is -2 y (1 - y^2)",
    "dx = -gg * g * 2 * y * (1 - y * y)  # right, but an infinity in float16 (nothing on the way is that large)\n"
    "        return gg * (1 - y * y), torch.full_like(dx, float('inf')) if x.dtype == torch.float16 else dx")


@pytest.mark.slow
def test_an_infinity_in_a_narrow_dtype_that_no_intermediate_explains_is_still_found(planted):
    assert TANH_INF_PLANT != TANH_DOUBLE_BACKWARD_PLANT
    planted(TANH_INF_PLANT)
    outcome = run_case(Case(op="tanh", variant="functional", dtype="float16", device="cpu", sample=0, oracle="autodiff:second"))
    assert outcome.status == "finding", outcome.reason
    f = outcome.findings[0]
    assert f.op == "aten.tanh.default" and f.summary.startswith("second derivative of tanh [float16] with respect to input"), f.summary
