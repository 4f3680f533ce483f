"""Scans and the tolerance rule (judge.tolerance, the scans' term): a scan that accumulates float32 in float32, as
CUDA's cumsum does, is rounding; one that accumulates float16 in float16, or drops a term, is a finding.

The cases are those an H100's pointed cumsum run flagged before the term (bench/time-target.md): a long dim from the
``long`` search, shrunk."""

from __future__ import annotations

import torch

from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.judge.tolerance import scan_slack

LONG = "cumsum|functional|{dtype}|cpu|s3|contiguous|dim:input@1>1025;size:1025>512;size:5>2"
OFFSET = "cumsum|functional|{dtype}|cpu|s0|contiguous|dim:input@0>258;seq:input@0=offset;size:258>129;size:129>64;size:5>1"


def sequential(x, dim, dtype=None, *, drop: bool = False):
    """cumsum accumulated in the input's own dtype, one term after another (``drop``: the 11th term left out in float32,
    the dtype judged; float64, the reference's, computed right)."""
    y = x.movedim(dim, -1) if x.dim() else x.reshape(1)
    out, acc = torch.empty_like(y), torch.zeros(y.shape[:-1], dtype=y.dtype)
    for i in range(y.shape[-1]):
        if not (drop and i == 10 and x.dtype == torch.float32):
            acc = acc + y[..., i]
        out[..., i] = acc
    return (out.movedim(-1, dim) if x.dim() else out.reshape(())).to(dtype or x.dtype)


def outcome(case: str, dtype: str):
    return run_case(Case.parse(case.format(dtype=dtype)))


def test_a_scan_accumulating_float32_in_float32_is_rounding_not_a_finding(plant):
    plant("cumsum", sequential)
    for case in (LONG, OFFSET):
        judged = outcome(case, "float32")
        assert judged.status == "pass", [f.summary for f in judged.findings]


def test_a_scan_accumulating_float16_in_float16_is_found(plant):
    plant("cumsum", sequential)
    judged = outcome(OFFSET, "float16")
    assert judged.findings and {f.kind for f in judged.findings} == {"mismatch"}
    assert all(f.op == "aten.cumsum.default" and f.dtype == "float16" for f in judged.findings)


def test_a_scan_that_drops_a_term_is_found_in_float32(plant):
    plant("cumsum", lambda x, dim, dtype=None: sequential(x, dim, dtype, drop=True))
    judged = outcome(OFFSET, "float32")
    assert judged.findings and all(f.kind == "mismatch" and f.op == "aten.cumsum.default" for f in judged.findings)


def test_torchs_own_cumsum_is_clean_on_the_same_cases():
    assert outcome(LONG, "float32").status == "pass" and outcome(OFFSET, "float16").status == "pass"


def test_the_scans_term_grows_with_the_root_of_the_length_at_the_accumulation_types_roundoff():
    assert scan_slack(torch.float32, 400) == 2 * scan_slack(torch.float32, 100)
    assert scan_slack(torch.float16, 100) == scan_slack(torch.float32, 100)  # float16 accumulates in float32 (at::acc_type)
