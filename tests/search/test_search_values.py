"""The values search (search.values): its special sets, the ``special:`` edit, its plan, and a planted bug only it finds.

The planted bug is an ``exp`` that overflows early (inf from 88 on, where
float32 holds exp up to 88.72) in the vector body of a contiguous float32
tensor only. OpInfo's samples never reach 88, so the planned cases pass;
the search's ``overflow`` set puts 88.42 in the body and the tail, and the
finding's case id carries the edit that triggers it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, SweepResult, resolve_ops
from torchsleuth.cases import opinfo
from torchsleuth.errors import UsageError
from torchsleuth.report import repro
from torchsleuth.search import edits
from torchsleuth.run.samples import samples_of
from torchsleuth.search import value_sets, values
from torchsleuth.run.tree import sample_tensors

FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
COMPLEX = (torch.complex64, torch.complex128)
INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
# 2 * Vec::size() elements a step, for every dtype and instruction set of the CPU
STEPS = (8, 16, 32, 64, 128)


def same(a, b) -> bool:
    """Equal as values of a set: NaN is NaN, and -0.0 is not 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def holds(elements: torch.Tensor, value) -> bool:
    return any(same(e, value) for e in elements.tolist())


# --- the special sets --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX + INTEGERS + (torch.bool,), ids=str)
def test_every_set_is_small_and_held_exactly_by_its_dtype(dtype):
    assert value_sets.names(dtype)
    for name in value_sets.names(dtype):
        held = value_sets.values(name, dtype)
        assert 1 <= len(held) <= value_sets.MAX_SET, (name, held)
        assert not any(same(a, b) for i, a in enumerate(held) for b in held[i + 1:]), f"{name} repeats a value: {held}"
        part = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)
        wide = torch.float64 if part.is_floating_point else torch.int64 if part != torch.bool else torch.bool
        back = torch.tensor(held, dtype=wide).to(part).to(wide).tolist()
        assert all(same(a, b) for a, b in zip(back, held)), f"{dtype} does not hold {name}: {held} -> {back}"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_overflow_set_sits_clearly_on_each_side_of_each_threshold(dtype):
    info = torch.finfo(dtype)
    below_exp, exp_only, negative, sinh_too, subnormal, zero, negative_below = value_sets.values("overflow", dtype)
    # in logs, with a margin of 5% of the value: exp(x) overflows past log(max), sinh and cosh past log(2 max)
    top, margin = math.log(info.max), 0.05
    assert below_exp < top - margin
    assert top + margin < exp_only < top + math.log(2) - margin and negative == -exp_only
    assert sinh_too > top + math.log(2) + margin and negative_below == -below_exp
    smallest = info.smallest_normal * info.eps
    assert math.log(smallest) + margin < subnormal < math.log(info.smallest_normal) - margin
    assert zero < math.log(smallest) - math.log(2) - margin  # exp rounds to 0


def test_the_sets_follow_each_dtypes_limits():
    assert 65504.0 in value_sets.values("extreme", torch.float16)
    assert 3.4028234663852886e38 in value_sets.values("extreme", torch.float32)
    assert value_sets.values("rounding", torch.float32)[-2:] == (0.4999999701976776, 8388609.0)
    assert value_sets.values("rounding", torch.bfloat16)[-1] == 129.0
    assert value_sets.values("rounding", torch.float16)[-1] == 1025.0
    assert value_sets.values("overflow", torch.float64)[0] > 709
    assert value_sets.values("int", torch.int8) == (-128, 127, -127, 126, 0, -1, 1)
    assert value_sets.values("int", torch.uint8) == (0, 255, 1, 254)
    assert 2 ** 24 + 1 in value_sets.values("wide", torch.int32) and 2 ** 53 + 1 in value_sets.values("wide", torch.int64)
    assert value_sets.names(torch.int16) == ("int",)  # nothing wider than float32 holds
    assert value_sets.names(torch.bool) == ("bool",)
    assert value_sets.values("int", torch.float32) == ()


# --- the edit ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX + (torch.int64, torch.uint8, torch.bool), ids=str)
def test_each_special_value_sits_in_the_vector_body_and_the_scalar_tail(dtype):
    n = values.SHORTEST
    for name in value_sets.names(dtype):
        held = value_sets.values(name, dtype)
        for rotation in range(len(held)):
            x = values.filled(torch.zeros(3, 5, n, dtype=dtype)[0], name, rotation)
            assert x.shape == (5, n) and x.dtype == dtype and x.is_contiguous()
            parts = (x.real, x.imag) if dtype.is_complex else (x,)
            for part in parts:
                row = part[-1].to(torch.float64 if dtype.is_floating_point or dtype.is_complex else torch.int64)
                for step in STEPS:
                    body, tail = row[:n - n % step], row[n - n % step:]
                    for value in held:
                        assert holds(body, value) and holds(tail, value), (name, rotation, step, value)
                # every lane of a vector meets every value (the cycle is coprime with the width)
                lanes = row[:n - n % 16].reshape(-1, 16)
                assert all(holds(lanes[:, lane], value) for lane in range(16) for value in held), name


def test_complex_tensors_get_special_values_in_both_parts_paired_differently():
    x = values.filled(torch.zeros(7, dtype=torch.complex64), "nonfinite")
    real, imag = x.real.tolist(), x.imag.tolist()
    assert math.isnan(real[0]) and imag[0] == 0.0 and real[1] == math.inf and str(imag[1]) == "-0.0"
    assert not all(same(a, b) for a, b in zip(real, imag))


def test_the_edit_replaces_one_tensors_values_after_the_dim_edit():
    sample = samples_of("add", "float32")[2]  # input (5, 1), other (5,)
    before = sample_tensors(sample)["input"].clone()
    edited = edits.apply(sample, ("dim:args[0]@0>51", "special:args[0]=overflow@3", "special:input=nonfinite"))
    tensors = sample_tensors(edited)
    assert tensors["args[0]"].shape == (51,) and tensors["input"].shape == (5, 1)
    assert tensors["args[0]"][0].item() == value_sets.values("overflow", torch.float32)[3]
    assert math.isnan(tensors["input"][0, 0].item()) and tensors["input"][1, 0].item() == math.inf
    assert torch.equal(sample_tensors(sample)["input"], before)  # the sample itself is not changed
    assert edited.args[0].shape == (51,) and torch.add(edited.input, *edited.args).shape == (5, 51)


@pytest.mark.parametrize("edit, words", [
    ("special:input=huge", "unknown special set 'huge'"),
    ("special:input=int", "unknown special set 'int'"),
    ("special:weight=nonfinite", "no tensor 'weight'"),
    ("special:input=nonfinite@x", "whole number"),
])
def test_a_bad_special_edit_is_a_usage_error(edit, words):
    with pytest.raises(UsageError, match=words):
        edits.apply(samples_of("add", "float32")[2], (edit,))


# --- the plan -------------------------------------------------------------------------------------


def fresh_samples(op: str, dtype: str) -> list:
    """The op's samples made again (not the cached objects)."""
    return opinfo.samples(opinfo.get(op), getattr(torch, dtype))


@pytest.mark.parametrize("op", ["exp", "add", "where", "sum", "softmax", "matmul", "index_select"])
def test_the_plan_is_deterministic(op):
    first = [values.plan(op, "functional", "float32", s) for s in fresh_samples(op, "float32")]
    again = [values.plan(op, "functional", "float32", s) for s in fresh_samples(op, "float32")]
    assert first == again and any(first)


@pytest.mark.parametrize("op", ["add", "mul", "where", "clamp", "addcmul", "lerp"])
def test_growing_a_pointwise_call_keeps_it_valid_and_straddles_every_step(op):
    function = opinfo.get(op).op
    for sample in samples_of(op, "float32"):
        for planned in values.plan(op, "functional", "float32", sample):
            edited = edits.apply(sample, planned)
            result = function(edited.input, *edited.args, **edited.kwargs)  # raises if the shapes broke
            shape = torch.broadcast_shapes(*(t.shape for t in sample_tensors(edited).values()))
            assert result.shape == shape
            if any(e.startswith("dim:") for e in planned):
                outer = math.prod(shape[:-1])
                assert result.numel() >= values.SHORTEST
                assert result.numel() % values.STEP == values.STEP - math.gcd(outer, values.STEP), (planned, shape)


def test_a_short_unary_call_grows_to_a_body_and_a_full_tail_for_every_step():
    sample = samples_of("exp", "float32")[0]  # (20,)
    planned = values.plan("exp", "functional", "float32", sample)
    assert [p[0] for p in planned] == ["dim:input@0>255"] * 4
    assert [p[1] for p in planned] == [values.special("input", n) for n in ("nonfinite", "extreme", "overflow", "rounding")]


def test_operands_get_rotated_sets_so_huge_meets_tiny_both_ways():
    sample = samples_of("div.no_rounding_mode", "float32")[5]  # (5, 10, 5) / (5, 10, 5)
    planned = values.plan("div.no_rounding_mode", "functional", "float32", sample)
    assert (*planned[1][:2], "special:input=extreme", "special:args[0]=extreme@1") == planned[1]
    edited = edits.apply(sample, planned[1])
    ratio = (edited.input.double() / edited.args[0].double()).abs()
    assert ratio.max() > 1e70 and ratio.min() < 1e-70
    assert planned[-1][-2:] == ("special:input=extreme", "special:args[0]=nonfinite@1")  # the cross case


def test_the_plan_leaves_indices_and_draws_alone():
    for sample in samples_of("index_select", "float32"):
        for planned in values.plan("index_select", "functional", "float32", sample):
            assert all(e.startswith("special:input=") for e in planned)  # not the index (args[1])
    assert not any(values.plan("index_select", "functional", "int64", s) for s in samples_of("index_select", "int64"))
    assert not any(values.plan("gather", "functional", "int64", s) for s in samples_of("gather", "int64"))
    assert not any(values.plan("bernoulli", "functional", "float32", s) for s in samples_of("bernoulli", "float32"))
    assert values.plan("exp", "method", "float32", samples_of("exp", "float32")[0]) == []
    # an integer pointwise op's integer operands are values
    assert {e.split("=")[1] for p in values.plan("add", "functional", "int64", samples_of("add", "int64")[5]) for e in p
            if e.startswith("special:")} == {"int", "wide", "int@1", "wide@1"}


def test_the_sets_each_kind_of_call_gets():
    def sets(op, variant, index=0, dtype="float32"):
        planned = values.plan(op, variant, dtype, samples_of(op, dtype)[index])
        return {e.split("=")[1].split("@")[0] for p in planned for e in p if e.startswith("special:")}

    assert sets("sinh", "functional") == {"nonfinite", "extreme", "overflow", "rounding"}
    assert sets("sinh", "backward") == {"nonfinite"}  # a gradient multiplies values past the range by ones below 1
    assert sets("sum", "functional", 10) == {"nonfinite", "overflow", "rounding"}  # huge sums overflow in any order
    assert sets("matmul", "functional", 3) == {"nonfinite"} and sets("matmul", "backward", 3) == set()
    # complex infinities have no one right form: finite sets only
    assert sets("sinh", "functional", dtype="complex64") == {"rounding", "overflow"} and not sets("matmul", "functional", 3, "complex64")
    assert values.plan("exp", "out", "float32", samples_of("exp", "float32")[0]) == []


# --- the planted bug only the search finds ---------------------------------------------------------


def exp_overflowing_early_in_the_vector_body(x: torch.Tensor) -> torch.Tensor:
    """exp, but inf from 88 on in the vector body of a contiguous float32 tensor (the first n - n % 16 elements)."""
    right = (torch.special.expm1(x.double()) + 1).to(x.dtype)  # no call to aten::exp
    if x.dtype != torch.float32 or not x.is_contiguous() or x.dim() == 0:
        return right
    flat = right.reshape(-1).clone()
    body = x.numel() - x.numel() % 16
    flat[:body] = torch.where(x.reshape(-1)[:body] > 88, torch.tensor(math.inf), flat[:body])
    return flat.reshape(x.shape)


def searched(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops("exp"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed"),
                samples=3, workers=0, search=("values",))
    return SweepConfig(**(spec | extra))


def listing(result: SweepResult) -> str:
    return "\n".join([f"statuses {result.statuses}; reasons {result.reasons}"] + [f"  {f.case_id}: {f.summary}" for f in result.findings])


def test_an_overflow_in_the_vector_body_only_is_found_by_the_values_search(plant, run_sweep):
    plant("exp", exp_overflowing_early_in_the_vector_body)
    result = run_sweep(searched())
    assert result.findings, listing(result)
    for f in result.findings:
        assert (f.op, f.opinfo, f.kind, f.reference) == ("aten.exp.default", "exp", "mismatch", "precision"), listing(result)
        assert "special:input=overflow" in f.case_id, listing(result)  # the trigger, in the case id
        assert f.mismatch.actual == "inf"
        assert all(t.data is not None for t in f.call.tensors)  # the edited values go inline into the repro script
    # OpInfo's own values never reach 88: without the search the same sweep is clean
    assert not run_sweep(searched(search=())).findings


def test_the_values_search_over_the_real_kernel_is_clean(run_sweep):
    result = run_sweep(searched())
    assert not result.findings, listing(result)
    searched_cases = sum(len(values.plan("exp", "functional", "float32", s)) for s in samples_of("exp", "float32"))
    assert searched_cases >= 8 and set(result.statuses) == {"pass"} and result.statuses["pass"] > searched_cases, listing(result)


# --- the same special values, judged by the sizes oracle (Oracle.on_values) ------------------------


def nextafter_by_bits(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float32 nextafter without aten::nextafter: one step of the bit pattern toward ``y``."""
    x, y = torch.broadcast_tensors(x, y)
    bits = x.contiguous().view(torch.int32)
    away = (y > x) == (x > 0)  # a step away from zero grows the magnitude's bits
    stepped = torch.where(away, bits + 1, bits - 1).view(torch.float32)
    tiny = torch.full_like(x, 1.401298464324817e-45)
    stepped = torch.where(x == 0, torch.where(y > 0, tiny, -tiny), stepped)
    stepped = torch.where(x == y, y, stepped)
    return torch.where(torch.isnan(x) | torch.isnan(y), torch.full_like(x, math.nan), stepped)


def nextafter_nan_at_subnormals_in_the_vector_body(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """nextafter, but NaN for a subnormal ``x`` in the vector body of a float32 result (its first n - n % 16 elements)."""
    right = nextafter_by_bits(x, y)
    if right.dtype != torch.float32 or right.dim() == 0:
        return right
    flat, inputs = right.reshape(-1).clone(), torch.broadcast_tensors(x, y)[0].reshape(-1)
    body = flat.numel() - flat.numel() % 16
    subnormal = (inputs[:body] != 0) & (inputs[:body].abs() < torch.finfo(torch.float32).smallest_normal)
    flat[:body] = torch.where(subnormal, torch.tensor(math.nan), flat[:body])
    return flat.reshape(right.shape)


@pytest.mark.slow
def test_a_vector_body_bug_of_an_op_without_a_float64_reference_is_found_by_the_sizes_oracle_on_special_values(plant, run_sweep, tmp_path):
    # nextafter is judged in its own dtype (its float64 result means something else), so neither the
    # references nor the contracts see a bug its contiguous call has too: the sizes oracle, which puts the
    # same special value alone, does, on the value search's edits
    plant("nextafter", nextafter_nan_at_subnormals_in_the_vector_body)
    # no shrink stage: this test reads the findings as found (shrinking a sizes finding is test_oracle_sizes.py's), and
    # shrinking the fourteen here replayed the planted kernel some 25,000 times, most of the test's time
    config = SweepConfig(ops=resolve_ops("nextafter"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                         samples=0, workers=0, search=("values",), oracles=("sizes",), shrink=False)
    result = run_sweep(config)
    assert result.findings, listing(result)
    for f in result.findings:
        assert f.opinfo == "nextafter" and f.case_id.endswith("|@sizes"), listing(result)
        assert "special:" in f.case_id and "nan" in f.summary.lower(), listing(result)
    # its script rebuilds the special values: exit 1 with the plant, 0 without
    finding = result.findings[0]
    text = repro.script(finding)
    plant_source = "\n".join(["import math", "import torch", inspect.getsource(nextafter_by_bits),
                               inspect.getsource(nextafter_nan_at_subnormals_in_the_vector_body),
                               '_lib = torch.library.Library("aten", "IMPL")',
                               "_lib.impl('nextafter', nextafter_nan_at_subnormals_in_the_vector_body, 'CPU')", "", ""])
    (tmp_path / "clean.py").write_text(text)
    (tmp_path / "planted.py").write_text(plant_source + text)
    runs = {name: subprocess.run([sys.executable, str(tmp_path / name)], capture_output=True, text=True, timeout=120)
            for name in ("clean.py", "planted.py")}
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr
    # without the value search, or without the oracle, the same sweep is clean
    assert not run_sweep(dataclasses.replace(config, search=())).findings
    assert not run_sweep(dataclasses.replace(config, oracles=())).findings


def test_the_sizes_oracle_on_special_values_is_clean_over_the_real_kernel(run_sweep):
    config = SweepConfig(ops=resolve_ops("nextafter"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                         samples=0, workers=0, search=("values",), oracles=("sizes",))
    result = run_sweep(config)
    assert not result.findings, listing(result)
    assert result.statuses.get("pass", 0) > 10, listing(result)


def test_cases_of_one_op_setting_the_same_values_are_kin_whatever_their_sample_sizes_layouts_variant_and_dtype():
    overflow = "special:input=overflow;special:args[0]=overflow@1"
    s0 = f"special.laguerre_polynomial_l|functional|float64|cuda|s0|contiguous|{overflow}"
    s4 = f"special.laguerre_polynomial_l|out|float64|cuda|s4|out=offset|dim:input@2>23;dim:args[0]@1>23;{overflow}"
    int64 = f"special.laguerre_polynomial_l|functional|int64|cuda|s2|contiguous|{overflow}"
    assert edits.kin(s0) == edits.kin(s4) == edits.kin(int64) == f"special.laguerre_polynomial_l|{overflow}"
    assert edits.kin(s0.replace("overflow", "rounding")) != edits.kin(s0)
    assert edits.kin(s0.replace("laguerre", "legendre")) != edits.kin(s0)  # another op's same values are not kin
    assert edits.kin("abs|functional|float32|cpu|s1|input=transposed") is None  # sets no values
    assert edits.kin("abs|functional|float32|cpu|s1|contiguous|size:5>2") is None  # sizes only
    assert edits.kin("not a case id") is None
