"""Arbitration past float64 (judge.arbiter): where float32 and float64 disagree on a function the exact reference knows,
the exact value decides whose error it is. A float64 kernel planted wrong must not be reported as float32's finding
(and is the exact oracle's, in float64); a float32 kernel planted wrong is still found; a float64 case of an op with no
exact function says it was judged only for consistency."""

from __future__ import annotations

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.judge import arbiter
from torchsleuth.store.runs import open_store
from torchsleuth.sweep import depth


def erfc_off_in(dtype: torch.dtype):
    """erfc whose ``dtype`` kernel is off by a tenth below x = -0.5; the other dtypes' are right."""
    def kernel(x):
        out = torch.ops.aten.erfc.out(x, out=torch.empty_like(x))
        return torch.where(x < -0.5, out * 1.1, out) if x.dtype == dtype else out
    return kernel


def pointed(op: str, oracles=()) -> SweepConfig:
    return depth(SweepConfig(ops=resolve_ops(op), dtypes=("float32", "float64"), workers=0, oracles=oracles, search=(),
                             layouts=("contiguous",), variants=("functional",)),
                 deep=True, given={"oracles", "search", "layouts", "variants"})


def precision_findings(result, dtype: str) -> list:
    return [f for f in result.findings if f.reference == "precision" and f.dtype == dtype]


@pytest.mark.slow
def test_float64_wrong_where_float32_is_right_is_not_float32s_finding(plant, run_sweep, tmp_path, monkeypatch):
    plant("erfc", erfc_off_in(torch.float64))
    result = run_sweep(pointed("erfc", oracles=("exact",)))
    assert not precision_findings(result, "float32"), [f.summary for f in precision_findings(result, "float32")]
    exact = [f for f in result.findings if f.reference == "arbitrary-precision"]
    assert exact and all(f.dtype == "float64" and f.op == "aten.erfc.default" for f in exact)  # float64's own finding
    store = open_store(str(tmp_path / "runs-0.db"))
    reasons = [reason for case_id, _, reason, _ in store.outcome_rows(result.run.id) if "float32" in case_id]
    assert any("float64 is wrong at" in r and "agrees with float32" in r for r in reasons)
    assert result.coverage.float64("exact") == ("erfc",) and not result.coverage.float64("consistency")
    # the same run without arbitration blames float32 for float64's error: what the test above is about
    monkeypatch.setattr(arbiter, "MOST", 0)
    blamed = precision_findings(run_sweep(pointed("erfc")), "float32")
    assert blamed and blamed[0].op == "aten.erfc.default"


@pytest.mark.slow
def test_float32_wrong_where_float64_is_right_is_still_found(plant, run_sweep):
    plant("erfc", erfc_off_in(torch.float32))
    result = run_sweep(pointed("erfc"))
    found = precision_findings(result, "float32")
    assert found and found[0].op == "aten.erfc.default" and found[0].kind == "mismatch"
    assert result.coverage.float64("consistency") == ("erfc",)  # without the exact oracle, nothing above float64


def test_a_float64_case_without_an_exact_function_says_it_was_judged_only_for_consistency():
    class Case:
        op, variant = "cumsum", "functional"
    assert "judged only for consistency" in arbiter.consistency_only(Case)
    Case.op = "erfc"
    assert arbiter.consistency_only(Case) == ""
