"""The vmap oracle and overflow: where a batched result and a result alone may both be right (vmap.orders).

On torch 2.13, the gradient of a broadcast argument of ``mul`` sums over the
broadcast dims in another order under vmap; where the terms' magnitudes add
up past float32's range, one order gives +inf, another -inf or a finite sum:
no finding. ``add`` with ``alpha`` evaluates ``input + alpha * other`` left to
right in float16 alone (``alpha * other`` overflows), and exactly under vmap:
no finding. A batching rule of the same reduction that overflows where the
terms cannot is still found.
"""

from __future__ import annotations

import pytest

import test_oracle_vmap
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case

batching_plant = test_oracle_vmap.batching_plant  # the fixture: batching_plant(source) runs a plant's source until the test ends

# Cases of pointed runs on torch 2.13 whose batch and samples alone part on an overflow.
MUL_GRAD = Case(op="mul", variant="functional", dtype="float32", device="cpu", sample=7, oracle="vmap:grad",
                edits=tuple("dim:input@2>23;dim:args[0]@2>23;special:input=extreme;special:args[0]=extreme@1;size:23>1;values:input=zeros"
                            .split(";")))
MUL_GRAD_FLOAT64 = Case.parse("mul|functional|float64|cpu|s7|contiguous|dim:input@2>23;dim:args[0]@2>23;special:input=extreme;"
                              "special:args[0]=extreme@1;size:23>11;size:11>5;values:input=zeros|@vmap:grad")
ADD_ALPHA = Case(op="add", variant="functional", dtype="float16", device="cpu", sample=9, oracle="vmap:forward",
                 edits=tuple("dim:input@1>51;dim:args[0]@1>51;special:input=extreme;special:args[0]=extreme@1;size:51>25;size:25>12;size:5>2"
                             .split(";")))

SUM_PLANT = '''
import warnings
import torch
import torch._C._functorch as _functorch

_lib = torch.library.Library("aten", "IMPL")
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)


def _sum_batched(self, dim, keepdim=False, dtype=None):
    """sum over dims under vmap, right but for an infinity wherever the sum passes 1e30 (its terms need not)."""
    level = _functorch.maybe_get_level(self)
    x, bdim = _functorch._unwrap_batched(self, level)
    x = x.movedim(bdim, 0)
    dims = [d % self.dim() + 1 for d in (dim if dim else range(self.dim()))]
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        out = torch.ops.aten.sum.dim_IntList(x, dims, keepdim, dtype=dtype)
        out = torch.where(out.abs() > 1e30, torch.full_like(out, float("inf")), out)
    return _functorch._add_batch_dim(out, 0, level)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("sum.dim_IntList", _sum_batched, "FuncTorchBatched")
'''


@pytest.mark.slow
@pytest.mark.parametrize("case", [MUL_GRAD, MUL_GRAD_FLOAT64], ids=["float32", "float64"])
def test_a_broadcast_gradient_summed_in_another_order_past_the_range_is_no_finding(case):
    outcome = run_case(case)  # float64: 7.17e307 batched, inf alone; no wider value says which order is right
    assert outcome.status == "pass", [f.summary for f in outcome.findings]
    assert "a sum whose terms add up past the dtype's range" in outcome.reason, outcome.reason


@pytest.mark.slow
def test_a_documented_formula_overflowing_alone_and_exact_under_vmap_is_no_finding():
    outcome = run_case(ADD_ALPHA)
    assert outcome.status == "pass", [f.summary for f in outcome.findings]
    assert "overflow as the op's documented formula does" in outcome.reason, outcome.reason


@pytest.mark.slow
def test_a_batched_sum_overflowing_where_its_terms_cannot_is_still_found(batching_plant):
    batching_plant(SUM_PLANT)
    outcome = run_case(MUL_GRAD)
    assert outcome.status == "finding", outcome.reason
    f = outcome.findings[0]
    assert (f.kind, f.reference, f.op) == ("gradient_mismatch", "vmap", "aten.mul.Tensor"), f.summary
    assert f.summary.startswith("vmap of the gradient (vjp) of mul [float32]") and " batched, " in f.summary, f.summary
