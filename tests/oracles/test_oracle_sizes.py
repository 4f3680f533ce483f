"""The ``sizes`` oracle: an element's result must not depend on the tensor around it.

Planted: a pointwise kernel whose scalar tail (the last ``n % 8`` elements)
computes wrongly, the same wrong only for non-contiguous inputs (a strided
path's tail), a binary kernel wrong only when its operands' strides differ,
and a reduction kernel wrong on the rows past a multiple of 8 of a batch.
Each must be found, named (op, layout, lengths or batches), shrunk without
turning flaky, and its repro script must exit 1 with the plant and 0
without. Real kernels of a handful of pointwise ops and reductions stay
clean in every layout form, one-ULP differences between SLEEF and libm
included.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case, Unit
from torchsleuth.judge import calls
from torchsleuth.oracles.sizes import judging
from torchsleuth.oracles.sizes import oracle as sizes
from torchsleuth.run import lengths
from torchsleuth.engine import run_case, run_unit
from torchsleuth.report import repro

def planting(op: str, kernel) -> str:
    """Source that registers ``kernel`` (a function of this module) for ``op``: prepended to a repro script."""
    return "\n".join([
        "import warnings", "import torch", "", inspect.getsource(kernel),
        '_lib = torch.library.Library("aten", "IMPL")',
        "with warnings.catch_warnings():",
        '    warnings.simplefilter("ignore")',
        f"    _lib.impl({op!r}, {kernel.__name__}, 'CPU')", "", "",
    ])


def exp2_with_a_wrong_tail(self):
    """exp2 through another kernel, correct for the first n - n % 8 elements, off by 0.5 after them."""
    out = torch.pow(2.0, self).contiguous()
    n = out.numel()
    body = n - n % 8
    if body < n:
        out.view(-1)[body:] += 0.5
    return out


def exp2_with_a_wrong_strided_tail(self):
    """exp2 through another kernel, off by 0.5 on the last n % 8 elements of a non-contiguous input only."""
    out = torch.pow(2.0, self).contiguous()
    n = out.numel()
    if not self.is_contiguous() and n % 8:
        out.view(-1)[n - n % 8:] += 0.5
    return out


def hypot_wrong_on_mixed_strides(self, other):
    """hypot through other kernels, off by 0.5 on the last n % 8 elements when its operands' strides differ."""
    out = torch.sqrt(self * self + other * other).contiguous()
    n = out.numel()
    if self.stride() != other.stride() and n % 8:
        out.view(-1)[n - n % 8:] += 0.5
    return out


def exp2_refusing_non_contiguous_inputs(self):
    """exp2 through another kernel, raising (loudly) on a non-contiguous input."""
    if not self.is_contiguous():
        raise RuntimeError("this exp2 wants a contiguous input")
    return torch.pow(2.0, self)


def amax_wrong_past_eight_rows(self, dim=(), keepdim=False):
    """amax through sort (another kernel), wrong on the output elements past a multiple of 8."""
    dims = sorted(d % self.dim() for d in ([dim] if isinstance(dim, int) else dim or range(self.dim())))
    out = self
    for d in reversed(dims):
        out = out.sort(dim=d).values.select(d, -1)
        if keepdim:
            out = out.unsqueeze(d)
    out = out.clone()
    n = out.numel()
    if n > 8 and n % 8:
        out.view(-1)[n - n % 8:] += 1  # the bug: the rows of the tail
    return out


def sweep_config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=3, workers=0, oracles=("sizes",)) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def of_kind(result, kind="size_variance"):
    return [f for f in result.findings if f.kind == kind]


def deep_outcomes(op: str, dtype: str, **extra):
    events = run_unit(Unit(op=op, dtype=dtype, device="cpu"), sweep_config(op, dtypes=(dtype,), **extra))
    return [o for kind, o in events if kind == "outcome" and o.case.oracle == "sizes"]


# --- the configurations ---------------------------------------------------------------------


def test_lengths_straddle_vector_widths_on_the_cpu_and_block_sizes_on_a_gpu():
    cpu, gpu = lengths.lengths("cpu"), lengths.lengths("cuda:0")
    assert 1 in cpu and {7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257} <= set(cpu)
    assert {127, 128, 129, 1023, 1024, 1025, 4095, 4096, 4097, 65537} <= set(gpu)
    assert max(cpu) < max(gpu)


def test_tiling_repeats_the_samples_values_and_keeps_a_zero_dim_tensor_as_it_is():
    x = torch.arange(6.0).reshape(2, 3)
    scalar = torch.tensor(2.0)
    tiles = lengths.tiling({"input": x, "args[0]": scalar}, 20)
    assert tiles.distinct == 6 and tiles.shape == (2, 3)
    assert tiles.tiled["input"].tolist() == [float(i % 6) for i in range(20)]
    assert tiles.kept == {"args[0]": scalar}
    nine = tiles.length(9)["input"]
    assert nine.shape == (9,) and nine.is_contiguous() and nine.storage_offset() == 0
    moved = tiles.length(20, "offset")["input"]
    assert moved.storage_offset() == lengths.layouts.OFFSET and torch.equal(moved, tiles.tiled["input"])
    assert lengths.tiling({"input": torch.empty(0, 3)}, 20) == "its tensor arguments are empty"


def test_layout_forms_are_the_same_values_strided_or_transposed_in_poisoned_storage():
    x, y = torch.arange(5.0), torch.arange(5.0) * 10
    tiles = lengths.tiling({"input": x, "other": y}, 20)
    assert tiles.forms() == ("strided", "transposed", "transposed-first")
    assert lengths.tiling({"input": x}, 20).forms() == ("strided", "transposed")
    strided = tiles.form(9, "strided")["input"]
    assert strided.shape == (9,) and strided.stride() == (2,) and tiles.count(9, "strided") == 9
    assert strided.tolist() == [float(i % 5) for i in range(9)]
    gaps = torch.as_strided(strided, (8,), (2,), strided.storage_offset() + 1)
    assert bool(gaps.isnan().all())  # the gaps are the main sweep's poison
    grid = tiles.form(9, "transposed")
    assert grid["input"].shape == (9, 2) and grid["input"].stride() == (1, 9) and grid["other"].stride() == (1, 9)
    assert tiles.count(9, "transposed") == 18
    assert grid["input"].reshape(-1).tolist() == [float(i % 5) for i in range(18)]  # row-major: value (2i + j) % distinct
    mixed = tiles.form(9, "transposed-first")
    assert mixed["input"].stride() == (1, 9) and mixed["other"].stride() == (2, 1)
    assert torch.equal(mixed["other"], grid["other"])


def test_rows_are_the_input_rolled_and_batched_in_both_memory_orders():
    x = torch.arange(4.0)
    rows = lengths.rows(x, 3)
    assert [r.tolist() for r in rows] == [[0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1]]
    outer = lengths.batched(rows, front=True, rows_inner=False)
    inner = lengths.batched(rows, front=True, rows_inner=True)
    assert torch.equal(outer, inner) and outer.shape == (3, 4)
    assert outer.stride() == (4, 1) and inner.stride() == (1, 3)
    back = lengths.batched(rows, front=False, rows_inner=True)
    assert back.shape == (4, 3) and back.stride() == (3, 1)


def test_ulps_count_representable_floats_and_class_changes_are_told_apart():
    one = torch.tensor([1.0], dtype=torch.float32)
    assert int(calls.ulps(torch.nextafter(one, torch.tensor([2.0])), one)) == 1
    assert int(calls.ulps(torch.tensor([-0.0]), torch.tensor([0.0]))) == 0
    assert int(calls.ulps(torch.tensor([1e-45]), torch.tensor([-1e-45]))) == 2
    a = torch.tensor([float("nan"), 1.0, float("inf"), -0.0, 2.0])
    e = torch.tensor([1.0, 1.0, 3.0e38, 0.0, 2.0000002])
    assert calls.class_change(a, e).tolist() == [True, False, True, True, False]
    assert calls.class_change(a, e, signed_zero=False).tolist() == [True, False, True, False, False]


def test_only_ufuncs_and_reductions_are_planned_and_only_functional_samples_with_elements():
    unit = Unit(op="sin", dtype="float32", device="cpu")
    assert sizes.plan(unit, "functional", 0) == ["sizes"]
    assert sizes.plan(unit, "inplace", 0) == []
    assert sizes.plan(Unit(op="mm", dtype="float32", device="cpu"), "functional", 0) == []
    assert sizes.plan(Unit(op="sum", dtype="float32", device="cpu"), "functional", 5) == ["sizes"]


def test_an_op_that_is_neither_is_skipped_with_its_reason():
    outcome = run_case(Case(op="cumsum", variant="functional", dtype="float32", device="cpu", sample=1, oracle="sizes"))
    assert outcome.status == "skip" and "neither pointwise nor a reduction" in outcome.reason and "cumsum" in outcome.reason


def test_a_case_with_a_layout_is_left_to_the_main_sweep():
    case = Case(op="sin", variant="functional", dtype="float32", device="cpu", sample=0, layouts=(("input", "transposed"),), oracle="sizes")
    outcome = run_case(case)
    assert outcome.status == "skip" and "lays out its own tensors" in outcome.reason


# --- planted ----------------------------------------------------------------------------------


def test_a_wrong_scalar_tail_is_a_size_variance_naming_the_op_and_the_lengths(plant, run_sweep):
    plant("exp2", exp2_with_a_wrong_tail)
    result = run_sweep(sweep_config("exp2", shrink=False))
    found = of_kind(result)
    assert found, result.findings
    for f in found:
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant, f.dtype) == ("size_variance", "size", "aten.exp2.default", "exp2", "functional", "float32")
        assert f.summary.startswith("exp2 [float32] gives an element another value in length "), f.summary
        # every length with a vector body is wrong against the element alone (itself all tail);
        # lengths 1 and 7, all tail like the element alone, agree with it
        assert "wrong at lengths 8, 9, 15, 16, 17, 31, 32, 33" in f.summary, f.summary
        assert "right at lengths 1, 7" in f.summary, f.summary
        assert f.mismatch is not None and f.mismatch.attribute == "values" and f.call is not None


def test_a_wrong_strided_tail_is_a_size_variance_naming_the_op_the_layout_and_the_lengths(plant, run_sweep):
    plant("exp2", exp2_with_a_wrong_strided_tail)
    result = run_sweep(sweep_config("exp2", shrink=False))
    found = of_kind(result)
    assert found, result.findings
    for f in found:
        assert (f.kind, f.reference, f.op, f.dtype) == ("size_variance", "size", "aten.exp2.default", "float32")
        assert f.summary.startswith("exp2 [float32] gives an element another value in strided length 7 (every other element) "
                                    "than in length 1 (the element alone)"), f.summary
        # wrong where a non-contiguous input's numel is not a multiple of 8: strided n, transposed 2n
        odd = "7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 255, 257"
        assert (f"wrong at strided lengths {odd} (every other element) and at "
                f"transposed lengths {odd} (n x 2, columns of n in memory); ") in f.summary, f.summary
        every = ", ".join(map(str, lengths.CPU_LENGTHS))
        assert f"right at lengths {every} and at strided lengths 8, 16," in f.summary, f.summary
        assert "strided length 9 (every other element)" in f.detail


def test_a_kernel_wrong_only_on_mixed_strides_is_caught_by_the_one_transposed_operand(plant):
    plant("hypot", hypot_wrong_on_mixed_strides)
    found = [f for o in deep_outcomes("hypot", "float32", samples=1) for f in o.findings]
    assert found
    for f in found:
        assert f.kind == "size_variance" and f.op == "aten.hypot.default", f.summary
        mixed = "(n x 2) with input transposed, the others contiguous"
        assert "another value in length 7 (7 x 2) with input transposed, the others contiguous than in length 1" in f.summary, f.summary
        assert f"wrong at lengths 7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 255, 257 {mixed};" in f.summary, f.summary
        assert "at strided lengths 7, 8, 9," in f.summary.split("; right ")[1]  # every operand strided alike: right


def test_a_layout_form_that_raises_is_dropped_and_noted_not_a_skip(plant):
    plant("exp2", exp2_refusing_non_contiguous_inputs)
    outcomes = deep_outcomes("exp2", "float32", samples=1)
    assert outcomes and all(o.status == "pass" for o in outcomes), [(o.status, o.reason) for o in outcomes]
    assert "strided length 7 (every other element) raised: RuntimeError: this exp2 wants a contiguous input" in outcomes[0].reason
    assert "transposed length 7 (7 x 2, columns of 7 in memory) raised" in outcomes[0].reason


def test_a_planted_size_variance_shrinks_and_replays_without_turning_flaky(plant, run_sweep):
    plant("exp2", exp2_with_a_wrong_tail)
    result = run_sweep(sweep_config("exp2", samples=1))
    found = of_kind(result)
    assert found and not [f for f in result.flaky if f.kind == "size_variance"]
    for f in found:
        shrunk = result.shrunk[f.id]
        assert shrunk.status == "shrunk", shrunk
        assert Case.parse(shrunk.case_id).oracle == "sizes"
        assert result.reported(f).kind == "size_variance"
    group = next(g for g in result.groups if any(f.id in g.findings for f in found))
    assert "exp2" in group.diagnosis and "depends on the tensor around it" in group.diagnosis, group.diagnosis


def test_a_reduction_wrong_on_the_tail_of_its_rows_is_a_size_variance(plant):
    plant("amax", amax_wrong_past_eight_rows)
    outcomes = deep_outcomes("amax", "float32", samples=0)
    found = [f for o in outcomes for f in o.findings]
    assert found, [(o.case.id, o.status, o.reason) for o in outcomes]
    for f in found:
        assert f.kind == "size_variance" and f.op == "aten.amax.default"
        assert "than in each row alone" in f.summary, f.summary
        assert "wrong in batches of 9, 15, 17, 31, 33 rows; right in batches of 7, 8, 16, 32 rows" in f.summary, f.summary


@pytest.mark.slow
@pytest.mark.parametrize("op, kernel, says", [
    ("exp2", exp2_with_a_wrong_tail, "length 9"),
    ("exp2", exp2_with_a_wrong_strided_tail, "strided length 9 (every other element)"),
    ("hypot", hypot_wrong_on_mixed_strides, "length 9 (9 x 2) with input transposed, the others contiguous"),
    ("amax", amax_wrong_past_eight_rows, "a batch of 9 rows (outermost in memory)"),
])
def test_the_planted_findings_repro_exits_1_with_the_plant_and_0_without(plant, tmp_path, op, kernel, says):
    plant(op, kernel)
    outcomes = deep_outcomes(op, "float32", samples=0 if op == "amax" else 1)
    finding = next(f for o in outcomes for f in o.findings)
    text = repro.script(finding)
    assert repro.script(dataclasses.replace(finding, detail="")) == text  # the script reads Finding.data, never the prose
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(planting(op, kernel) + text)
    runs = {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120) for p in (clean, planted)}
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "BUG PRESENT" in runs["planted.py"].stdout
    assert f"{says}: out: " in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


@pytest.mark.slow
def test_a_reduction_script_reads_where_the_batch_went_from_the_record_not_the_prose(plant, tmp_path):
    """The rows per batch and the side the batch dim went to come from ``Finding.data``: blanked prose changes nothing."""
    from torchsleuth.judge.plugin import decode_detail
    from torchsleuth.oracles.sizes.detail import Detail

    plant("amax", amax_wrong_past_eight_rows)
    finding = dataclasses.replace(next(f for o in deep_outcomes("amax", "float32", samples=0) for f in o.findings), detail="")
    detail = decode_detail(Detail, finding)
    assert detail.reduction and detail.sizes == lengths.row_counts("cpu")
    assert "a batch of 9 rows (outermost in memory)" in detail.wrong
    text = repro.script(finding)
    assert f"FRONT = {detail.front!r}" in text and f"ROWS = {detail.sizes!r}" in text
    clean, planted = tmp_path / "clean.py", tmp_path / "planted.py"
    clean.write_text(text)
    planted.write_text(planting("amax", amax_wrong_past_eight_rows) + text)
    runs = {p.name: subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=120) for p in (clean, planted)}
    assert runs["planted.py"].returncode == 1 and "BUG PRESENT" in runs["planted.py"].stdout, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr


def test_a_finding_without_its_record_gets_a_script_that_says_so():
    from torchsleuth.judge.records import Finding
    from torchsleuth.run.records import CallSpec

    call = CallSpec(function="torch.exp2", args_src="T['input']", kwargs_src="", variant="functional", tensors=())
    finding = Finding(id="f-1", kind="size_variance", op="aten.exp2.default", opinfo="exp2", variant="functional", dtype="float32",
                      device="cpu", reference="size", case_id="exp2|functional|float32|cpu|s0|contiguous|@sizes", layouts=(),
                      summary="exp2 gives an element another value", mismatch=None, call=call, detail="rows stacked along a new first dim; ")
    text = repro.script(finding)
    assert "carries no record" in text and "sys.exit(2)" in text


# --- clean --------------------------------------------------------------------------------------

CLEAN = ("sin", "sigmoid", "add", "mul", "clamp", "where", "nn.functional.gelu", "abs", "sum", "amax", "argmax", "mean")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64"])
def test_real_kernels_are_clean(dtype, monkeypatch):
    judged_in = set()
    compare = judging.Check.compare

    def spied(self, place, *args, **kwargs):
        judged_in.add(place.kind)
        return compare(self, place, *args, **kwargs)

    monkeypatch.setattr(judging.Check, "compare", spied)
    outcomes = [o for op in CLEAN for o in deep_outcomes(op, dtype, samples=2)]
    assert not [f.summary for o in outcomes for f in o.findings]
    assert not [o.reason for o in outcomes if o.status == "error" or (o.status == "pass" and "raised" in o.reason)]  # no form dropped
    judged = {o.case.op for o in outcomes if o.status == "pass"}
    assert len(judged) >= len(CLEAN) - 3, sorted(set(CLEAN) - judged)  # a few have no sample this oracle applies to
    assert {"length", "offset", "strided", "transposed", "transposed-first", "outer", "inner"} <= judged_in


def test_nans_that_differ_only_in_their_bits_are_noted_not_reported():
    # torch 2.13's vectorised bfloat16 rsqrt of a negative number gives the NaN 0xffff,
    # its scalar tail 0x7fc0: the same class of value, so no finding
    case = Case(op="rsqrt", variant="functional", dtype="bfloat16", device="cpu", sample=0, edits=("values:input=small",), oracle="sizes")
    outcome = run_case(case)
    assert outcome.status == "pass", (outcome.reason, [f.summary for f in outcome.findings])
