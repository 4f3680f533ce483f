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

import warnings

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.oracles.autodiff import helpers


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


@pytest.fixture
def clamp_plant():
    namespace = {"__name__": "autodiff_plant"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(CLAMP_JVP_PLANT, "plant.py", "exec"), namespace)
    try:
        yield
    finally:
        namespace["_lib"]._destroy()


@pytest.mark.slow
def test_a_clamp_whose_forward_mode_is_wrong_away_from_the_ties_is_still_found(clamp_plant, run_sweep):
    config = SweepConfig(ops=resolve_ops("clamp"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=3,
                         workers=0, oracles=("autodiff",), shrink=False)
    found = [f for f in run_sweep(config).findings if f.kind == "gradient_mismatch"]
    assert found, "the planted clamp forward-mode derivative was not found"
    assert any(f.op == "aten.clamp.Tensor" and "forward-mode derivative of clamp [float32] with respect to input" in f.summary
               for f in found), [f.summary for f in found]
