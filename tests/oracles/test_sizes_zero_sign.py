"""The sizes oracle judges the sign of a zero only where the op's definition fixes it.

clamp picks one of its arguments by comparison, and -0.0 and +0.0 compare
equal: clamp of -0.0 at a +0.0 bound may give either zero (torch 2.13's
vectorised body gives +0.0, its scalar tail -0.0), so that is no finding.
neg is arithmetic: IEEE fixes neg(+0.0) = -0.0, so a kernel giving +0.0 in
some lengths is still found, and named with the lengths.
"""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, search
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.sweep import depth

# The case of a pointed clamp run on torch 2.13 where the body and the tail part on the sign of a zero.
CLAMP_TIE = ("dim:input@2>23;dim:args[0]@2>23;special:input=nonfinite;special:args[0]=nonfinite@1;size:23>1;size:5>2;"
             "values:args[0]=zeros;size:10>5;size:2>1").split(";")


def test_clamp_of_a_negative_zero_at_a_positive_zero_bound_may_give_either_zero():
    tie = torch.tensor([-0.0] * 16)
    body, alone = torch.clamp(tie, torch.zeros(16)), torch.clamp(tie[:1], torch.zeros(1))
    if bool(torch.signbit(body[0])) == bool(torch.signbit(alone[0])):
        pytest.skip("this torch gives the same zero in every length: nothing to excuse")
    case = Case(op="clamp", variant="functional", dtype="float32", device="cpu", sample=2, edits=tuple(CLAMP_TIE), oracle="sizes")
    outcome = run_case(case)
    assert outcome.status == "pass", [f.summary for f in outcome.findings]


def pointed(op: str) -> SweepConfig:
    """``torchsleuth ops --ops OP`` in this process, in float32, with the sizes oracle alone."""
    config = SweepConfig(ops=resolve_ops(op), dtypes=("float32",), workers=0, search=search.names(), shrink=False, oracles=("sizes",))
    return depth(config, deep=True, given={"oracles"})


def neg_with_a_positive_zero_in_long_tensors(self):
    """neg, but +0.0 for neg(+0.0) in a tensor of 16 elements or more (IEEE: -0.0)."""
    out = torch.mul(self, -1.0).contiguous()
    if out.numel() >= 16:
        out.view(-1)[out.view(-1) == 0] = 0.0
    return out


@pytest.mark.slow
def test_neg_giving_the_wrong_sign_of_zero_in_long_tensors_is_still_found(plant, run_sweep):
    plant("neg", neg_with_a_positive_zero_in_long_tensors)
    result = run_sweep(pointed("neg"))
    found = [f for f in result.findings if f.kind == "size_variance"]
    assert found, [f.summary for f in result.findings]
    f = found[0]
    assert f.op == "aten.neg.default" and f.reference == "size"
    assert "is 0 there and -0.0 alone" in f.summary and "wrong at lengths 16, 17" in f.summary, f.summary


@pytest.mark.slow
def test_a_pointed_clamp_run_has_no_sign_of_zero_finding(run_sweep):
    result = run_sweep(pointed("clamp"))
    assert not [f.summary for f in result.findings if f.kind == "size_variance"]
