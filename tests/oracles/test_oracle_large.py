"""The ``large`` oracle: elements past a 32-bit boundary get what small tensors get.

The real boundaries (2^31 and 2^32 elements, 2^31 bytes) need gigabytes; the
tests move them down to 2^16 and 2^17 (``bounds.BOUNDS``), which exercises
the same tiling, positions and judging, and plant a kernel whose offsets
wrap at the lower one: past it, each element is read from the element
2^16 before (``neg``; ``index_select`` and ``index_copy_`` for the indexing
probes; ``arange`` and ``eye`` for the creation probes, whose index past
2^16 wraps to a negative one). The rows probes (65535 to 65537 rows) are
small enough to run for real, against a ``_softmax`` that never computes
the rows past 65535. The real sizes ran on an H200 and are recorded in
bench/.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.oracles.large import bounds, creation
from torchsleuth.oracles.large import index as large_index
from torchsleuth.oracles.large import oracle as large
from torchsleuth.oracles.large import stretched
from torchsleuth.errors import UsageError
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
    monkeypatch.setattr(bounds, "BOUNDS", (WRAP, 2 * WRAP))


def config(ops: str, dtype: str = "float32", oracles: tuple[str, ...] = ("large",)) -> SweepConfig:
    return SweepConfig(ops=resolve_ops(ops), dtypes=(dtype,), variants=("functional",), layouts=("contiguous",), samples=2,
                       workers=0, oracles=oracles, shrink=False)


def test_the_probes_are_planned_once_per_op_and_dtype_for_pointwise_functional_calls():
    from torchsleuth.cases.records import Unit

    unit = Unit(op="neg", dtype="float32", device="cpu")
    assert large.plan(unit, "functional", 0) == ["large:2^31", "large:2^32", "large:bytes"]
    assert large.plan(unit, "functional", 1) == [] and large.plan(unit, "inplace", 0) == []
    assert large.plan(Unit(op="neg", dtype="int8", device="cpu"), "functional", 0) == ["large:2^31", "large:2^32"]  # bytes = elements
    rows = ["large:rows=65535", "large:rows=65536", "large:rows=65537"]
    spans = ["large:span=8388611", "large:span=16777219"]  # float32 only
    assert large.plan(Unit(op="linalg.svd", dtype="float32", device="cpu"), "functional", 0) == rows + spans  # neither pointwise nor a reduction
    assert large.plan(Unit(op="softmax", dtype="float32", device="cpu"), "functional", 0) == rows + spans
    assert large.plan(Unit(op="softmax", dtype="float64", device="cpu"), "functional", 0) == rows
    assert large.plan(Unit(op="sum", dtype="float32", device="cpu"), "functional", 0) == [f"large:length={n}" for n in stretched.REDUCTION_LENGTHS] + spans
    index = ["large:index=2^31", "large:index=2^32", "large:index=bytes"]
    assert large.plan(Unit(op="index_select", dtype="float32", device="cpu"), "functional", 0) == rows + spans + index
    assert large.plan(Unit(op="index_select", dtype="float32", device="cpu"), "functional", 0, "index") == index
    assert large.plan(Unit(op="index_add", dtype="int8", device="cpu"), "functional", 0, "index") == index[:2]  # bytes = elements
    assert large.plan(Unit(op="take", dtype="bool", device="cpu"), "functional", 0, "index") == []  # two values: a misread may hold the right one
    with pytest.raises(UsageError, match="known: elements, length, rows, span, index, creation"):
        large.plan(unit, "functional", 0, "rows,columns")


def test_positions_read_both_sides_of_every_boundary_and_the_ends():
    n = (1 << 32) + bounds.PAD
    read = set(bounds.positions(n).tolist())
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
    monkeypatch.setattr(bounds, "free_bytes", lambda device: 1 << 30)
    result = run_sweep(config("neg"))
    assert not result.findings and result.statuses.get("skip", 0) == 3
    assert any("GiB" in reason and "free on cpu" in reason for reason in result.reasons["skip"]), result.reasons


@pytest.mark.slow
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
    assert lengths <= set(stretched.REDUCTION_LENGTHS) and max(lengths) > 32768


def test_real_reductions_stay_clean_over_long_rows(run_sweep):
    # var is left out: its twenty stretched cases take twenty seconds of the suite, and the catalog runs it (bench/deep-large.md)
    result = run_sweep(config("sum,mean,amax,argmax,logsumexp"))
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) >= 25 and "error" not in result.statuses, (result.statuses, result.reasons)


# --- rows: dim 0 tiled to 65535, 65536, 65537 ---------------------------------------------------


def softmax_dropping_rows_past_65535(self, dim, half_to_float):
    """softmax through other kernels that, in float32, never computes the rows past the 65535th (a grid's y stops there)."""
    out = (self - self.amax(dim, keepdim=True)).exp()
    out = out / out.sum(dim, keepdim=True)
    if self.dtype == torch.float32 and self.dim() >= 2 and self.shape[0] > 65535:
        out[65535:] = 0  # the bug
    return out


SOFTMAX_PLANT = """
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")


def _softmax(self, dim, half_to_float):
    out = (self - self.amax(dim, keepdim=True)).exp()
    out = out / out.sum(dim, keepdim=True)
    if self.dtype == torch.float32 and self.dim() >= 2 and self.shape[0] > 65535:
        out[65535:] = 0
    return out


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("_softmax", _softmax, "CPU")
"""


def test_an_op_wrong_past_65535_rows_is_found_on_the_stretched_case_naming_the_row_count(plant, run_sweep):
    plant("_softmax", softmax_dropping_rows_past_65535)
    result = run_sweep(config("softmax", oracles=("large:rows",)))
    found = [f for f in result.findings if f.op == "aten._softmax.default"]
    assert found, result.reasons
    # judged as any case is, on a sample with dim 0 of its input tiled: the precision reference
    assert all(f.kind == "mismatch" and f.reference == "precision" and "|dim:input@0>" in f.case_id for f in found), [f.case_id for f in found]
    assert {int(f.case_id.rsplit(">", 1)[1]) for f in found} == {65536, 65537}  # 65535 rows are right
    assert all(f.mismatch.worst_index[0] >= 65535 for f in found), [f.mismatch.describe() for f in found]


def test_real_ops_stay_clean_over_65537_rows():
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    for op in ("softmax", "log_softmax", "cumsum", "sort", "topk", "index_select", "nn.functional.embedding", "nn.functional.layer_norm"):
        outcome = run_case(Case(op=op, variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65537"))
        assert outcome.status == "pass" and "@0>65537" in outcome.reason, (op, outcome.reason, [f.summary for f in outcome.findings])


def test_rows_that_are_not_independent_are_not_stretched():
    """cov and pdist grow with the square of the rows (2^32 elements at 65536), softmax along dim 0 is a long reduction."""
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    for op in ("cov", "nn.functional.pdist"):
        outcome = run_case(Case(op=op, variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65536"))
        assert outcome.status == "skip" and "not its result tiled likewise" in outcome.reason, (op, outcome.reason)
    outcome = run_case(Case(op="softmax", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65536"))
    sample = int(outcome.reason.split("|s", 1)[1].split("|", 1)[0])
    from torchsleuth.engine import samples_of

    assert outcome.status == "pass" and samples_of("softmax", "float32")[sample].args[0] % 2 == 1  # along dim 1, not 0


def test_rows_that_a_copy_of_themselves_cannot_tell_apart_are_not_taken_for_independent():
    """Batch norm in training normalises by every row's statistics: rows twice over give its result twice over, but
    rows with other values beside them do not; its training sample (s0) is passed over for an evaluation one."""
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case, samples_of

    case = Case(op="nn.functional.batch_norm", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65535")
    outcome = run_case(case)
    sample = int(outcome.reason.split("|s", 1)[1].split("|", 1)[0])
    assert samples_of("nn.functional.batch_norm", "float32")[0].kwargs["training"]
    assert outcome.status == "pass" and not samples_of("nn.functional.batch_norm", "float32")[sample].kwargs.get("training"), outcome.reason


def softmax_off_everywhere_in_float32(self, dim, half_to_float):
    """softmax a thousandth too large in float32 at every size: the sample's own bug, not the row count's."""
    out = (self - self.amax(dim, keepdim=True)).exp()
    out = out / out.sum(dim, keepdim=True)
    return out * 1.001 if self.dtype == torch.float32 else out


def test_a_finding_that_every_row_shares_with_the_sample_is_not_the_row_counts(plant):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("_softmax", softmax_off_everywhere_in_float32)
    stretched = run_case(Case.parse("softmax|functional|float32|cpu|s2|contiguous|dim:input@0>65536"))
    assert stretched.findings, stretched.reason  # the judge sees it on the stretched case ...
    outcome = run_case(Case(op="softmax", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65536"))
    assert outcome.status == "pass" and "does not come from the row count" in outcome.reason, outcome.reason  # ... but not past row 65535


def test_a_crash_in_the_oracles_own_calls_gets_a_script_that_says_so():
    from torchsleuth.judge.records import Finding

    finding = Finding(id="f-0", kind="crash", op="lu_unpack", opinfo="lu_unpack", variant="functional", dtype="float32", device="cpu",
                      reference="isolation", case_id="lu_unpack|functional|float32|cpu|s0|contiguous|@large:rows=65535", layouts=(),
                      summary="lu_unpack crashes", mismatch=None, call=None, detail="the worker died of SIGABRT")
    text = repro.script(finding)
    assert "where was not recorded" in text and "dim 0 doubled" in text and "sys.exit(2)" in text
    # where the pool recorded the place the worker died (workers.faults), the script names it
    place = "run/call.py:240 compute < oracles/large/oracle.py:120 probe"
    text = repro.script(dataclasses.replace(finding, detail=f"the worker died of SIGABRT at {place}"))
    assert f"at {place} (the innermost frames" in text and "not recorded" not in text and "sys.exit(2)" in text


@pytest.mark.slow
def test_the_repro_of_a_rows_finding_exits_1_with_the_plant_and_0_without(plant, tmp_path):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("_softmax", softmax_dropping_rows_past_65535)
    outcome = run_case(Case(op="softmax", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:rows=65536"))
    assert outcome.findings, outcome.reason
    assert_repro(tmp_path, repro.script(outcome.findings[0]), SOFTMAX_PLANT)


def assert_repro(tmp_path, text: str, plant_source: str) -> None:
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(plant_source + "\n" + text)
    runs = {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120) for p in (clean, planted)}
    assert runs["planted.py"].returncode == 1 and "BUG PRESENT" in runs["planted.py"].stdout, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


# --- indexing: gathers and scatters over tensors past the boundaries --------------------------------


def index_select_wrapping_past(self, dim, index):
    """index_select through x[idx] (another kernel) whose offsets, on a tensor past 2^16 elements, wrap at 2^16."""
    index = index.reshape(-1)
    if self.numel() > WRAP:
        index = torch.where(index >= WRAP, index - WRAP, index)  # the bug
    if self.dim() == 0:
        return self.reshape(1)[index].reshape(())
    return self.movedim(dim, 0)[index].movedim(0, dim).contiguous()


def index_copy_wrapping_past(self, dim, index, source):
    """index_copy_ through index_put_ whose offsets, on a tensor past 2^16 elements, wrap at 2^16."""
    if self.numel() > WRAP:
        index = torch.where(index >= WRAP, index - WRAP, index)  # the bug
    if self.dim() == 0:
        return self.copy_(source.reshape(()))
    self.movedim(dim, 0).index_put_((index,), source.movedim(dim, 0) if source.dim() else source)
    return self


INDEX_SELECT_PLANT = f"""
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")


def _index_select(self, dim, index):
    index = index.reshape(-1)
    if self.numel() > {WRAP}:
        index = torch.where(index >= {WRAP}, index - {WRAP}, index)
    return self.movedim(dim, 0)[index].movedim(0, dim).contiguous()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("index_select", _index_select, "CPU")
"""


def test_a_gather_whose_offsets_wrap_is_found_naming_the_op_and_the_boundary(plant, run_sweep, small_bounds):
    plant("index_select", index_select_wrapping_past)
    result = run_sweep(config("index_select", oracles=("large:index",)))
    found = {f.case_id.rsplit("@", 1)[1]: f for f in result.findings if f.kind == "large_size"}
    assert set(found) == {"large:index=2^31", "large:index=2^32"}, result.reasons  # the bytes probe has 2^14 elements
    f = found["large:index=2^31"]
    assert f.op == "aten.index_select.default" and f.reference == "large" and f.opinfo == "index_select"
    assert "past 2^31 elements" in f.summary and "index_select" in f.summary and f.mismatch.worst_index[0] >= WRAP, f.summary
    assert "past 2^32 elements" in found["large:index=2^32"].summary


def test_a_scatter_whose_offsets_wrap_is_found(plant, run_sweep, small_bounds):
    plant("index_copy_", index_copy_wrapping_past)
    result = run_sweep(config("index_copy", oracles=("large:index",)))
    found = [f for f in result.findings if f.case_id.endswith("@large:index=2^31")]
    assert found and found[0].op == "aten.index_copy_.default" and found[0].kind == "large_size", result.reasons
    assert "past 2^31 elements" in found[0].summary and found[0].mismatch.worst_index[0] >= WRAP, found[0].summary


def test_real_indexing_kernels_are_clean_past_the_boundaries(small_bounds):
    from torchsleuth.cases.records import Case, Unit
    from torchsleuth.engine import run_case

    for op in large_index.FORMS:
        for dtype in ("float32", "bfloat16", "int8"):
            for probe in large.plan(Unit(op=op, dtype=dtype, device="cpu"), "functional", 0, "index"):
                outcome = run_case(Case(op=op, variant="functional", dtype=dtype, device="cpu", sample=0, oracle=probe))
                if op == "nn.functional.embedding" and dtype == "int8":
                    # a dtype OpInfo does not declare: replayed all the same (findings in probed dtypes must replay)
                    assert outcome.status in ("pass", "raised"), outcome.reason
                    continue
                assert outcome.status == "pass" and "positions checked" in outcome.reason, (op, dtype, probe, outcome.reason,
                                                                                            [f.summary for f in outcome.findings])


def test_an_index_probe_that_does_not_fit_in_memory_is_skipped_saying_how_much_it_needed(monkeypatch, run_sweep):
    monkeypatch.setattr(bounds, "free_bytes", lambda device: 1 << 30)
    result = run_sweep(config("take", oracles=("large:index",)))
    skipped = sum(count for reason, count in result.reasons.get("skip", {}).items() if "GiB" in reason and "free on cpu" in reason)
    assert not result.findings and skipped == 3, result.reasons


@pytest.mark.slow
def test_the_repro_of_an_index_finding_exits_1_with_the_plant_and_0_without(plant, tmp_path, small_bounds):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("index_select", index_select_wrapping_past)
    outcome = run_case(Case(op="index_select", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:index=2^31"))
    assert outcome.findings, outcome.reason
    assert_repro(tmp_path, repro.script(outcome.findings[0]), INDEX_SELECT_PLANT)


@pytest.mark.slow
@pytest.mark.parametrize("op, probe, kernel, plant_source", [
    ("neg", "large:2^31", neg_wrapping_past, WRAP_PLANT),
    ("index_select", "large:index=2^31", index_select_wrapping_past, INDEX_SELECT_PLANT),
])
def test_a_script_reads_the_findings_record_not_its_prose(plant, tmp_path, small_bounds, op, probe, kernel, plant_source):
    """The element and index scripts take the length, values and positions from ``Finding.data``: with the prose
    ``detail`` blanked the script is the same, and still exits 1 with the plant and 0 without."""
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case
    from torchsleuth.judge.plugin import decode_detail
    from torchsleuth.oracles.large.detail import Detail

    plant(op, kernel)
    finding = run_case(Case(op=op, variant="functional", dtype="float32", device="cpu", sample=0, oracle=probe)).findings[0]
    detail = decode_detail(Detail, finding)
    assert detail.probe == ("index" if "index" in probe else "elements") and detail.elements == WRAP + bounds.PAD
    assert any(p >= WRAP for p in detail.positions)
    blank = dataclasses.replace(finding, detail="")
    text = repro.script(blank)
    assert text == repro.script(finding)
    assert_repro(tmp_path, text, plant_source)


def test_a_finding_without_its_record_gets_a_script_that_says_so():
    from torchsleuth.judge.records import Finding

    finding = Finding(id="f-1", kind="large_size", op="aten.neg.default", opinfo="neg", variant="functional", dtype="float32",
                      device="cpu", reference="large", case_id="neg|functional|float32|cpu|s0|contiguous|@large:2^31", layouts=(),
                      summary="neg is wrong past 2^31 elements", mismatch=None, call=None, detail="2147487744 elements tiled from 7 values")
    text = repro.script(finding)
    assert "carries no record" in text and "sys.exit(2)" in text


# --- creation: factories past the boundaries ------------------------------------------------------


def arange_wrapping_past(start, end, step=1, *, out):
    """arange whose index, past 2^16, wraps to a negative one (a signed 17-bit index): element i gets start + step * (i - 2^17)."""
    n = math.ceil((float(end) - float(start)) / float(step))
    i = torch.ones(n, dtype=torch.int64).cumsum(0) - 1  # not arange: that is this kernel
    i = torch.where(i >= WRAP, i - 2 * WRAP, i)  # the bug
    out.resize_(n).copy_(start + step * i)
    return out


def eye_wrapping_past(n, m, *, out):
    """eye whose diagonal offsets past 2^16 wrap: their 1 lands 2^16 elements early, off the diagonal."""
    out.resize_(n, m).zero_()
    offset = (torch.ones(min(n, m), dtype=torch.int64).cumsum(0) - 1) * (m + 1)
    out.view(-1)[torch.where(offset >= WRAP, offset - WRAP, offset)] = 1  # the bug
    return out


ARANGE_PLANT = f"""
import math
import warnings
import torch

_lib = torch.library.Library("aten", "IMPL")


def _arange(start, end, step=1, *, out):
    n = math.ceil((float(end) - float(start)) / float(step))
    i = torch.ones(n, dtype=torch.int64).cumsum(0) - 1
    i = torch.where(i >= {WRAP}, i - {2 * WRAP}, i)
    out.resize_(n).copy_(start + step * i)
    return out


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("arange.start_out", _arange, "CPU")
"""


def test_the_creation_probes_are_planned_for_the_catalogs_creation_ops_in_the_dtypes_their_formula_holds():
    from torchsleuth.cases.records import Unit

    def planned(op, dtype):
        return large.plan(Unit(op=op, dtype=dtype, device="cpu"), "functional", 0, "creation")

    probes = ["large:creation=2^31", "large:creation=2^32", "large:creation=bytes"]
    assert set(creation.FORMS) <= set(creation.catalog_ops())  # every form is a creation op of the catalog
    assert {"arange", "linspace", "eye", "tril_indices", "full", "zeros_like", "randn", "empty"} <= set(creation.catalog_ops())
    assert not {"to", "cat", "neg", "meshgrid.list_of_tensors"} & set(creation.catalog_ops())  # options, but a view; tensors in
    assert planned("arange", "float32") == planned("arange", "int64") == planned("linspace", "complex64") == probes
    assert planned("eye", "bool") == planned("full", "uint8") == probes[:2]  # bytes = elements
    assert planned("arange", "int32") == planned("linspace", "int64") == []  # not every index's value fits: nothing to tell a wrap by
    assert planned("randn", "float32") == planned("empty", "float32") == planned("zeros_like", "float32") == []  # no form
    assert "large:creation=2^31" in large.plan(Unit(op="arange", dtype="float32", device="cpu"), "functional", 0)  # in every --large


def test_an_arange_whose_index_wraps_is_found_naming_the_op_the_position_and_the_boundary(plant, run_sweep, small_bounds):
    plant("arange.start_out", arange_wrapping_past)
    result = run_sweep(config("arange", oracles=("large:creation",)))
    found = {f.case_id.rsplit("@", 1)[1]: f for f in result.findings if f.kind == "large_size"}
    assert set(found) == {"large:creation=2^31", "large:creation=2^32"}, result.reasons  # the bytes probe has 2^14 elements
    f = found["large:creation=2^31"]
    assert f.op == "aten.arange.start_step" and f.opinfo == "arange" and f.reference == "large" and f.mismatch.worst_index[0] >= WRAP
    position = f.mismatch.worst_index[0]
    assert f.summary.startswith("arange [float32] of 69632 elements") and "past 2^31 elements" in f.summary, f.summary
    assert f"at element {position} where i.double() * S gives {float(position)}" in f.summary, f.summary
    assert float(f.mismatch.actual) == position - 2 * WRAP and "past 2^32 elements" in found["large:creation=2^32"].summary


def test_an_eye_whose_diagonal_wraps_is_found_on_the_diagonal_or_where_its_1_landed(plant, small_bounds):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("eye.m_out", eye_wrapping_past)
    outcome = run_case(Case(op="eye", variant="functional", dtype="bool", device="cpu", sample=0, oracle="large:creation=2^31"))
    assert outcome.status == "finding", outcome.reason
    f = outcome.findings[0]
    row, column = divmod(f.mismatch.worst_index[0], 264)  # eye(264): 69696 elements
    assert f.op == "aten.eye.default" and row == column and f.mismatch.worst_index[0] >= WRAP and f.mismatch.actual == "False", f.summary
    assert f"(row {row}, column {column}) where i // K == i % K gives True" in f.summary, f.summary


def test_real_factories_are_made_right_past_the_boundaries(small_bounds):
    """Every form in the dtypes that tell its kernels apart (float16 linspace is left out: on the CPU it is wrong past 65520
    elements, bench/deep-large.md)."""
    from torchsleuth.cases import opinfo
    from torchsleuth.cases.records import Case, Unit
    from torchsleuth.engine import run_case

    for op in creation.FORMS:
        declared = {str(d).removeprefix("torch.") for d in opinfo.dtypes(opinfo.get(op), "cpu")}
        for dtype in declared & {"float32", "bfloat16", "int64", "int32", "bool", "complex64"}:
            for probe in large.plan(Unit(op=op, dtype=dtype, device="cpu"), "functional", 0, "creation")[:1]:
                outcome = run_case(Case(op=op, variant="functional", dtype=dtype, device="cpu", sample=0, oracle=probe))
                assert outcome.status == "pass" and "positions checked" in outcome.reason, (op, dtype, probe, outcome.reason,
                                                                                            [f.summary for f in outcome.findings])


def test_a_creation_probe_that_does_not_fit_in_memory_is_skipped_saying_how_much_it_needed(monkeypatch, run_sweep):
    monkeypatch.setattr(bounds, "free_bytes", lambda device: 1 << 30)
    result = run_sweep(config("eye", dtype="bool", oracles=("large:creation",)))
    skipped = sum(count for reason, count in result.reasons.get("skip", {}).items() if "GiB" in reason and "free on cpu" in reason)
    assert not result.findings and skipped == 2, result.reasons


def test_an_unknown_large_form_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from torchsleuth.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["ops", "--ops", "arange", "--large", "nonsense"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --large form 'nonsense'; known: elements, length, rows, span, index, creation" in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_repro_of_a_creation_finding_exits_1_with_the_plant_and_0_without(plant, tmp_path, small_bounds):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    plant("arange.start_out", arange_wrapping_past)
    outcome = run_case(Case(op="arange", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:creation=2^31"))
    assert outcome.findings, outcome.reason
    text = repro.script(outcome.findings[0])
    assert text == repro.script(dataclasses.replace(outcome.findings[0], detail=""))  # the record, not the prose
    assert_repro(tmp_path, text, ARANGE_PLANT)


# --- spans: a dim past 2^23 and 2^24 entries (tests: past 2^11, where a float16 index goes wrong) -----------------


SPAN = (1 << 11) + 3  # indices 2049 and 2051 among them: float16 rounds them to 2048 and 2052


def flip_indexing_in_float16(self, dims):
    """flip through index_select whose float32 kernel computes the source position in float16 (float32 past 2^24 entries,
    moved down): exact up to 2048 entries along a flipped dim, a neighbour read past it."""
    out = self
    for d in dims:
        n = out.shape[d]
        source = n - 1 - torch.arange(n)
        if self.dtype == torch.float32:
            source = source.to(torch.float16).to(torch.int64).clamp(0, n - 1)  # the bug
        out = out.index_select(d, source)
    return out.clone()


@pytest.fixture
def small_span(monkeypatch):
    from torchsleuth.oracles.large import span

    monkeypatch.setattr(span, "LENGTHS", (SPAN,))
    return span


def test_span_probes_are_planned_in_float32_for_every_op_but_the_ufuncs(small_span):
    from torchsleuth.cases.records import Unit

    def planned(op, dtype):
        return large.plan(Unit(op=op, dtype=dtype, device="cpu"), "functional", 0, "span")

    assert planned("flip", "float32") == [f"large:span={SPAN}"] and planned("cumsum", "float32") == [f"large:span={SPAN}"]
    assert planned("flip", "float64") == [] and planned("sin", "float32") == [] and planned("add", "float32") == []


@pytest.mark.slow
def test_an_index_computed_in_a_narrow_float_is_found_past_its_span_naming_the_op_and_the_length(plant, run_sweep, small_span):
    plant("flip", flip_indexing_in_float16)
    result = run_sweep(config("flip", oracles=("large:span",)))
    found = [f for f in result.findings if f.op == "aten.flip.default"]
    assert found, result.reasons
    # judged as any case is, on the sample with a dim of its input tiled past 2^11: the precision reference
    assert all(f.kind == "mismatch" and f.case_id.endswith(f">{SPAN}") and "flip" in f.summary for f in found), [f.case_id for f in found]


@pytest.mark.slow
def test_real_ops_are_clean_along_a_span(run_sweep, small_span):
    result = run_sweep(config("flip,cumsum,sort,softmax,roll,nn.functional.max_pool1d", oracles=("large:span",)))
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) >= 8, result.statuses


def test_a_span_probe_that_does_not_fit_in_memory_is_skipped_saying_how_much_it_needed(monkeypatch, run_sweep, small_span):
    monkeypatch.setattr(bounds, "free_bytes", lambda device: 1 << 10)
    result = run_sweep(config("flip", oracles=("large:span",)))
    assert result.statuses.get("skip", 0) >= 1 and not result.findings
    assert any("GiB free on cpu" in reason for reason in result.reasons.get("skip", {})), result.reasons


def test_a_span_probe_past_the_runs_deadline_tries_one_dim_and_says_which_it_left(small_span):
    # cumsum's sample 0 has a 2-D input: the probe tries its longer dim, and the deadline (long past) leaves the other
    from torchsleuth.cases.records import Case, Unit
    from torchsleuth.engine import run_case, run_unit
    from torchsleuth.run import deadline

    outcomes = [p for kind, p in run_unit(Unit(op="cumsum", dtype="float32", device="cpu"), config("cumsum", oracles=("large:span",)))
                if kind == "outcome" and p.case.oracle.startswith("large:span")]
    [whole] = [o for o in outcomes if o.case.sample == 0]
    assert "left untried" not in whole.reason and whole.reason.count("dim:input@") >= 2, whole.reason
    with deadline.running(deadline.Clock(deadline=1.0)):
        cut = run_case(Case.parse(whole.case.id))
    assert cut.status == whole.status and cut.reason.count("dim:input@") == 1 and "left untried: the time target ran out" in cut.reason
    assert not deadline.passed()  # outside a unit's case: no deadline


def test_a_span_probe_skips_a_dim_whose_results_would_pass_its_bound_saying_so(monkeypatch, small_span):
    # bicubic interpolation of sample 0 ([2, 3, 4, 4] to 3 x 3): each entry of the channel dim adds nine result elements,
    # one of a spatial dim none; with the bound at 10,000 the channel dim (9 x 2051) is skipped and the others judged
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case

    case = Case.parse(f"nn.functional.interpolate.bicubic|functional|float32|cpu|s0|contiguous|@large:span={SPAN}")
    monkeypatch.setattr(small_span, "MAX_ELEMENTS", 10_000)
    bounded = run_case(case)
    assert bounded.status == "pass" and f"dim 1 tiled to {SPAN}: its results would hold about {9 * SPAN} elements, past 10000" in bounded.reason
    assert f"dim:input@2>{SPAN}" in bounded.reason and f"dim:input@3>{SPAN}" in bounded.reason, bounded.reason
    monkeypatch.setattr(small_span, "MAX_ELEMENTS", 1 << 26)
    whole = run_case(case)
    assert whole.status == "pass" and f"dim:input@1>{SPAN}" in whole.reason and "results would hold" not in whole.reason, whole.reason


def test_a_span_probe_tries_no_further_dim_that_as_long_as_the_last_would_end_past_the_deadline(monkeypatch, small_span):
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case
    from torchsleuth.run import deadline

    class Slow:  # every dim seems to take 100 s
        now = 0.0

        def monotonic(self):
            Slow.now += 100.0
            return Slow.now

    case = Case.parse(f"cumsum|functional|float32|cpu|s0|contiguous|@large:span={SPAN}")
    monkeypatch.setattr(small_span, "time", Slow())
    with deadline.running(deadline.Clock(deadline=time.time() + 3600, end=time.time() + 60)):
        cut = run_case(case)
    assert cut.reason.count("dim:input@") == 1 and "left untried: the time target ran out" in cut.reason, cut.reason
    with deadline.running(deadline.Clock(deadline=time.time() + 3600, end=time.time() + 3600)):
        whole = run_case(case)
    assert whole.reason.count("dim:input@") >= 2 and "left untried" not in whole.reason, whole.reason
