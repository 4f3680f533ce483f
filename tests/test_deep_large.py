"""The ``large`` oracle: elements past a 32-bit boundary get what small tensors get.

The real boundaries (2^31 and 2^32 elements, 2^31 bytes) need gigabytes; the
tests move them down to 2^16 and 2^17 (``large.BOUNDS``), which exercises
the same tiling, positions and judging, and plant a kernel whose offsets
wrap at the lower one: past it, each element is read from the element
2^16 before. The real sizes ran on an H200 and are recorded in bench/.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.deep import large
from torchsleuth.report import repro

WRAP = 1 << 16

WRAP_PLANT = f'''
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")


def _neg(self):
    out = self.mul(-1)
    flat = out.view(-1)
    if flat.numel() > {WRAP}:
        flat[{WRAP}:] = flat[:flat.numel() - {WRAP}].clone()  # the bug: the offset wraps
    return out


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("neg", _neg, "CPU")
'''


def neg_wrapping_past(self):
    out = self.mul(-1)  # neg through another kernel
    flat = out.view(-1)
    if flat.numel() > WRAP:
        flat[WRAP:] = flat[:flat.numel() - WRAP].clone()  # elements past the boundary read from 2^16 before
    return out


@pytest.fixture
def small_bounds(monkeypatch):
    monkeypatch.setattr(large, "BOUNDS", (WRAP, 2 * WRAP))


def config(ops: str, dtype: str = "float32") -> SweepConfig:
    return SweepConfig(ops=resolve_ops(ops), dtypes=(dtype,), variants=("functional",), layouts=("contiguous",), samples=2,
                       workers=0, oracles=("large",), shrink=False)


def test_the_probes_are_planned_once_per_op_and_dtype_for_pointwise_functional_calls():
    from torchsleuth.cases.records import Unit

    unit = Unit(op="neg", dtype="float32", device="cpu")
    assert large.plan(unit, "functional", 0) == ["large:2^31", "large:2^32", "large:bytes"]
    assert large.plan(unit, "functional", 1) == [] and large.plan(unit, "inplace", 0) == []
    assert large.plan(Unit(op="neg", dtype="int8", device="cpu"), "functional", 0) == ["large:2^31", "large:2^32"]  # bytes = elements
    assert large.plan(Unit(op="linalg.svd", dtype="float32", device="cpu"), "functional", 0) == []


def test_positions_read_both_sides_of_every_boundary_and_the_ends():
    n = (1 << 32) + large.PAD
    read = set(large._positions(n).tolist())
    assert {0, n - 1, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32} <= read
    assert all(0 <= p < n for p in read) and len(read) > 20


def test_a_kernel_whose_offsets_wrap_is_found_naming_the_op_and_the_position(plant, run_sweep, small_bounds):
    plant("neg", neg_wrapping_past)
    result = run_sweep(config("neg"))
    found = [f for f in result.findings if f.kind == "large_size"]
    assert found, result.reasons
    f = found[0]
    assert f.op == "aten.neg.default" and f.reference == "large" and f.case_id.endswith("|@large:2^31")
    assert f.mismatch.worst_index[0] >= WRAP and "past 2^31 elements" in f.summary and "neg" in f.summary


def test_real_kernels_are_clean_past_the_boundaries(run_sweep, small_bounds):
    result = run_sweep(config("neg,sin,add,mul,sigmoid,clamp,where"))
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) >= 14 and "error" not in result.statuses, result.reasons


def test_a_probe_that_does_not_fit_in_memory_is_skipped_saying_how_much_it_needed(monkeypatch, run_sweep):
    monkeypatch.setattr(large, "_free_bytes", lambda device: 1 << 30)
    result = run_sweep(config("neg"))
    assert not result.findings and result.statuses.get("skip", 0) == 3
    assert any("GiB" in reason and "free on cpu" in reason for reason in result.reasons["skip"]), result.reasons


def test_the_repro_exits_1_with_the_plant_and_0_without(plant, tmp_path, small_bounds):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("neg", neg_wrapping_past)
    outcome = run_case(Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:2^31"))
    finding = outcome.findings[0]
    text = repro.script(finding)
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(WRAP_PLANT + "\n" + text)
    runs = {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120) for p in (clean, planted)}
    assert runs["planted.py"].returncode == 1 and "BUG PRESENT" in runs["planted.py"].stdout, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


def sum_losing_past_32768_in_float32(self, dim=None, keepdim=False, dtype=None):
    """sum through cumsum (another kernel) that, in float32, never sees the elements past the 32768th."""
    x = self.clone()
    if x.dtype == torch.float32 and x.numel() > 32768:
        x.view(-1)[32768:] = 0  # the bug: a 16-bit count of what is summed
    dims = sorted({d % x.dim() for d in (dim or range(x.dim()))}) if x.dim() else []
    out = x
    for d in reversed(dims):
        out = out.cumsum(d).select(d, -1)
        if keepdim:
            out = out.unsqueeze(d)
    return out.to(dtype) if dtype is not None else out


def test_a_reduction_that_loses_elements_past_32768_is_found_on_the_stretched_case(plant, run_sweep):
    plant("sum.dim_IntList", sum_losing_past_32768_in_float32)
    result = run_sweep(config("sum"))
    found = [f for f in result.findings if f.op.startswith("aten.sum")]  # sum.default reaches dim_IntList
    assert found, result.reasons
    f = found[0]
    # judged as any case is, on the sample with its input's longest dim tiled: the precision reference
    assert f.kind == "mismatch" and f.reference == "precision" and "|dim:input@" in f.case_id, (f.kind, f.reference, f.case_id)
    lengths = {int(g.case_id.rsplit(">", 1)[1]) for g in found}
    assert lengths <= set(large.REDUCTION_LENGTHS) and max(lengths) > 32768


def test_real_reductions_stay_clean_over_long_rows(run_sweep):
    result = run_sweep(config("sum,mean,amax,argmax,logsumexp,var"))
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) >= 30 and "error" not in result.statuses, result.reasons
