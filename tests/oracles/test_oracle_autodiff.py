"""The ``autodiff`` oracle: derivatives agree across forward mode, reverse mode, double backward and finite differences.

Planted through ``torch.library`` on the Autograd CPU key, with a
``torch.autograd.Function`` whose forward computes the right value below
autograd: sin with a wrong forward-mode formula (jvp), sin whose jvp is
wrong only for a non-contiguous tangent (it ignores strides), and tanh whose
backward is right but whose own derivative (double backward) has the wrong
sign. Each must be found by a sweep pointed at the op, named (op, mode,
argument, layout), and its repro script must exit 1 with the plant and 0
without, also with the finding's prose blanked. Real kernels stay clean,
kinks (abs and relu at 0, the value search's special values) included.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from conftest import run_with_and_without, script_main
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case, Unit
from torchsleuth.engine import run_case, run_unit
from torchsleuth.judge.plugin import BUILTIN, decode_detail
from torchsleuth.oracles.autodiff import helpers
from torchsleuth.oracles.autodiff import oracle as autodiff
from torchsleuth.oracles.autodiff.detail import DOUBLE_BACKWARD, FINITE, FORWARD_MODE, MODES, Detail
from torchsleuth.report import repro

SIN_JVP_PLANT = '''
import warnings
import torch


class _Sin(torch.autograd.Function):
    """sin, its value and backward right, its forward-mode formula off by half the tangent."""

    @staticmethod
    def forward(x):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x) + 0.5 * t  # the bug


_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("sin", lambda x: _Sin.apply(x), "AutogradCPU")
'''

STRIDED_JVP_PLANT = SIN_JVP_PLANT.replace(
    "return t * torch.cos(x) + 0.5 * t  # the bug",
    "flat = t.as_strided(t.shape, torch.empty(t.shape).stride())  # the bug: reads the tangent's memory as if contiguous\n"
    "        return flat * torch.cos(x)")

TANH_DOUBLE_BACKWARD_PLANT = '''
import warnings
import torch


class _TanhBackward(torch.autograd.Function):
    """tanh's backward, g * (1 - tanh(x)^2): right, and so is its jvp; its own derivative in x has the wrong sign."""

    @staticmethod
    def forward(ctx, g, x):
        ctx.save_for_backward(g, x)
        ctx.save_for_forward(g, x)
        y = torch.tanh(x)
        return g * (1 - y * y)

    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        y = torch.tanh(x)
        return gg * (1 - y * y), gg * g * 2 * y * (1 - y * y)  # the bug: d/dx is -2 y (1 - y^2)

    @staticmethod
    def jvp(ctx, g_t, x_t):
        g, x = ctx.saved_tensors
        y = torch.tanh(x)
        return g_t * (1 - y * y) - g * 2 * y * (1 - y * y) * x_t


class _Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        with torch._C._AutoDispatchBelowAutograd():
            return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _TanhBackward.apply(g, x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        y = torch.tanh(x)
        return x_t * (1 - y * y)


_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("tanh", lambda x: _Tanh.apply(x), "AutogradCPU")
'''


@pytest.fixture
def planted():
    """``planted(source)`` runs a plant's source in this process; its Autograd kernel is gone when the test ends."""
    namespaces = []

    def plant(source: str):
        namespace = {"__name__": "autodiff_plant"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(source, "plant.py", "exec"), namespace)
        namespaces.append(namespace)

    try:
        yield plant
    finally:
        for namespace in namespaces:
            namespace["_lib"]._destroy()


def sweep_config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=1, workers=0, oracles=("autodiff",),
                shrink=False) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def gradient_findings(result):
    return [f for f in result.findings if f.kind == "gradient_mismatch"]


def outcomes(op: str, dtype: str = "float32", **extra):
    events = run_unit(Unit(op=op, dtype=dtype, device="cpu"), sweep_config(op, dtypes=(dtype,), **extra))
    return [o for kind, o in events if kind == "outcome" and o.case.oracle.startswith("autodiff")]


# --- planning and the pieces ----------------------------------------------------------------------


def test_it_is_registered_cheap_judging_special_values_and_sampled_by_catalog_runs():
    oracle = BUILTIN.get("autodiff")
    assert oracle.cost == "cheap" and oracle.on_values and oracle.sampled
    assert "autodiff" in BUILTIN.sampled()


def test_both_forms_are_planned_for_functional_floating_units_only():
    unit = Unit(op="sin", dtype="float32", device="cpu")
    assert autodiff.plan(unit, "functional", 0) == ["autodiff:forward", "autodiff:second"]
    assert autodiff.plan(unit, "inplace", 0) == [] and autodiff.plan(unit, "backward", 0) == []
    assert autodiff.plan(Unit(op="sin", dtype="int64", device="cpu"), "functional", 0) == []
    assert autodiff.plan(Unit(op="normal", dtype="float32", device="cpu"), "functional", 0) == []  # random: nothing to differentiate


def test_finite_differences_find_the_kinks_and_nothing_else():
    x = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    v = torch.tensor([0.5, 0.5, -0.5], dtype=torch.float64)
    ((estimate, error, smooth),) = helpers.finite_differences(lambda t, w: [torch.abs(x + t * v + (0 if w is None else w))], [1e-4 * v.flip(0)])
    assert smooth.tolist() == [True, False, True]  # abs at 0 has no derivative along v
    assert torch.allclose(estimate[smooth], torch.tensor([-0.5, -0.5], dtype=torch.float64)) and bool((error[smooth] < 1e-6).all())
    ((_, _, smooth),) = helpers.finite_differences(lambda t, w: [torch.floor(torch.tensor([0.99999999, 0.5], dtype=torch.float64) + t)], [])
    assert smooth.tolist() == [False, True]  # floor jumps within a step: unstable quotients
    ties, v, w = torch.tensor([3.0, 3.0, 3.0], dtype=torch.float64), torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0.3, 0.1, -0.2])
    ((_, _, smooth),) = helpers.finite_differences(lambda t, s: [torch.sort(ties + t * v + (0 if s is None else s)).values], [1e-4 * w])
    assert smooth.tolist() == [False, False, False]  # the median of a tie has one-sided quotients that agree, but no derivative


def test_the_tangent_follows_the_layout_and_size_of_its_tensor():
    x = torch.full((3, 4), 1e5).t()
    v = helpers.tangent(x, 7)
    assert v.stride() == x.stride() and torch.equal(v, helpers.tangent(x.contiguous(), 7))
    assert float(v.abs().mean()) > 10 and float(helpers.tangent(torch.ones(3, 4), 7).abs().mean()) < 2  # large elements: a larger step


def test_nothing_that_depends_on_a_value_that_is_not_finite_is_judged():
    x = torch.tensor([[1.0, float("inf")], [2.0, 3.0]], dtype=torch.float64)
    taint = helpers.tainted(lambda W: [W["input"].sum(1), W["input"] * 2], {"input": x})
    assert taint[0].tolist() == [True, False] and taint[1].tolist() == [[False, True], [False, False]]
    assert helpers.tainted(lambda W: [W["input"]], {"input": torch.ones(2)}) is None


def test_only_the_special_values_exact_in_every_dtype_are_judged():
    assert autodiff.unfair_sets(("dim:input@1>51", "special:input=nonfinite", "special:args[0]=extreme@1")) == ["extreme"]
    edits = ("special:input=overflow",)
    outcome = run_case(Case(op="exp", variant="functional", dtype="float32", device="cpu", sample=0, edits=edits, oracle="autodiff:second"))
    assert outcome.status == "skip" and "special values (overflow)" in outcome.reason


def test_two_modes_in_a_narrow_dtype_disagree_only_where_one_is_off_its_own_float64_value():
    a64, b64 = {"out": torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)}, {"out": torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)}
    a = {"out": torch.tensor([1.0, 1.0 + 2 ** -7, 1.5], dtype=torch.bfloat16)}
    b = {"out": torch.tensor([1.0 + 2 ** -7, 1.0 - 2 ** -8, 1.0], dtype=torch.bfloat16)}
    assert helpers.lopsided(a, b, a64, b64)["out"].tolist() == [False, False, True]  # rounding both ways; one mode far off


def test_a_random_op_is_skipped_with_its_reason():
    outcome = run_case(Case(op="nn.functional.dropout", variant="functional", dtype="float32", device="cpu", sample=2, oracle="autodiff:forward"))
    assert outcome.status == "skip" and "random" in outcome.reason


# --- planted ----------------------------------------------------------------------------------------


def test_a_wrong_forward_mode_formula_is_found_by_a_sweep_naming_op_mode_and_argument(planted, run_sweep):
    planted(SIN_JVP_PLANT)
    found = gradient_findings(run_sweep(sweep_config("sin")))
    assert found, "nothing found"
    f = found[0]
    assert (f.op, f.reference, f.case_id.rsplit("@", 1)[1]) == ("aten.sin.default", "reverse-mode", "autodiff:forward")
    assert f.summary.startswith("forward-mode derivative of sin [float32] with respect to input differs from reverse mode by "), f.summary
    assert "siding with reverse mode" in f.summary
    detail = decode_detail(Detail, f)
    assert (detail.check, detail.mode, detail.argument, detail.form) == (MODES, FORWARD_MODE, "input", "forward")


def test_a_forward_mode_formula_wrong_only_for_strided_tangents_is_found_on_the_laid_out_configuration(planted, run_sweep):
    planted(STRIDED_JVP_PLANT)
    found = gradient_findings(run_sweep(sweep_config("sin")))
    assert found, "nothing found"
    f = found[0]
    assert f.layouts == (("input", "transposed"),) and "|input=transposed|" in f.case_id
    assert "forward-mode derivative of sin [float32] with respect to a transposed input" in f.summary, f.summary
    assert decode_detail(Detail, f).layout == "transposed"
    # its case replays the laid-out configuration alone, and finds it again
    again = run_case(Case.parse(f.case_id))
    assert again.status == "finding" and again.findings[0].summary == f.summary


def test_a_wrong_double_backward_is_found_against_finite_differences_and_forward_over_reverse(planted, run_sweep):
    planted(TANH_DOUBLE_BACKWARD_PLANT)
    found = gradient_findings(run_sweep(sweep_config("tanh")))
    assert [f.case_id.rsplit("@", 1)[1] for f in found] == ["autodiff:second"], [f.summary for f in found]
    f = found[0]
    assert f.op == "aten.tanh.default" and f.reference == "finite-differences"
    assert f.summary.startswith("second derivative of tanh [float32] with respect to input: double backward gives "), f.summary
    assert "where float64 finite differences give" in f.summary and "forward over reverse gives" in f.summary
    detail = decode_detail(Detail, f)
    assert (detail.check, detail.mode, detail.argument, detail.output) == (FINITE, DOUBLE_BACKWARD, "input", "grad[input]")


def test_a_planted_finding_shrinks_and_replays_without_turning_flaky(planted, run_sweep):
    planted(SIN_JVP_PLANT)
    result = run_sweep(sweep_config("sin", shrink=True))
    found = gradient_findings(result)
    assert found and not [f for f in result.flaky if f.kind == "gradient_mismatch"]
    shrunk = result.shrunk[found[0].id]
    assert shrunk.status == "shrunk", shrunk
    assert result.reported(found[0]).kind == "gradient_mismatch"


@pytest.mark.slow
@pytest.mark.parametrize("op, source, says", [
    ("sin", SIN_JVP_PLANT, "forward mode (J v)"),
    ("sin", STRIDED_JVP_PLANT, "forward mode (J v)"),
    ("tanh", TANH_DOUBLE_BACKWARD_PLANT, "double backward"),
])
def test_the_planted_findings_script_exits_1_with_the_plant_and_0_without_and_reads_its_record(planted, tmp_path, op, source, says):
    planted(source)
    finding = next(f for o in outcomes(op) for f in o.findings)
    text = repro.script(finding)
    assert text == repro.script(dataclasses.replace(finding, detail=""))  # the prose is for a reader: nothing comes from it
    runs = run_with_and_without(text, source, tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "BUG PRESENT" in runs["planted.py"].stdout and says in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr
    assert "float64 finite differences" in runs["clean.py"].stdout
    # a finding without its record (stored before findings carried one) gets a script that says why it cannot check
    assert "No repro could be generated" in repro.script(dataclasses.replace(finding, data=""))


@pytest.mark.parametrize("op, source, says", [
    ("sin", SIN_JVP_PLANT, "forward mode (J v)"),
    ("tanh", TANH_DOUBLE_BACKWARD_PLANT, "double backward"),
])
def test_a_script_run_in_this_process_fails_with_the_plant_and_passes_without(capsys, op, source, says):
    """A first- and a second-order finding's script (its checks, autodiff.mains) run here, where the test above runs
    it in fresh interpreters; the plant's Autograd kernel removed, the same main passes."""
    namespace = {"__name__": "autodiff_plant"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "plant.py", "exec"), namespace)
    try:
        finding = next(f for o in outcomes(op) for f in o.findings)
        main = script_main(repro.script(finding))
        assert main() == 1
    finally:
        namespace["_lib"]._destroy()
    out = capsys.readouterr().out
    assert "BUG PRESENT" in out and says in out, out
    assert main() == 0, capsys.readouterr().out


# --- clean --------------------------------------------------------------------------------------------


def test_the_same_sweeps_without_the_plants_are_clean(run_sweep):
    result = run_sweep(sweep_config("sin,tanh"))
    assert not gradient_findings(result)


@pytest.mark.parametrize("op", ["abs", "nn.functional.relu"])
def test_kinks_at_zero_are_no_finding(op):
    # the value search puts 0 and -0 (and NaN, infinities, +-1) in the tensor: at 0 abs and relu have no derivative
    found = outcomes(op, search=("values",), samples=3)
    assert not [f.summary for o in found for f in o.findings]
    assert not [o.reason for o in found if o.status == "error"]
    assert any("at a kink" in o.reason for o in found if o.case.edits), [(o.case.id, o.status, o.reason) for o in found]


def test_a_hand_made_kink_is_left_out_of_every_comparison():
    x = torch.tensor([[0.0, 1.0, -2.0], [0.0, 0.5, 0.0]], dtype=torch.float64)
    call = torch.nn.functional.relu
    v = helpers.tangent(x, 1)
    fd = helpers.output_differences(lambda T: call(T["input"]), {"input": x}, "input", v, helpers.shifts(x, 1, helpers.SHIFTS))
    ((_, _, smooth),) = fd
    assert smooth.tolist() == [[False, True, True], [False, True, False]]


CLEAN = ("sin", "exp", "tanh", "sigmoid", "nn.functional.softplus", "softmax", "matmul", "sum", "prod", "cumsum", "max.reduction_no_dim",
         "sort", "var", "atan2", "nn.functional.layer_norm")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_real_kernels_are_clean(dtype):
    found = [o for op in CLEAN for o in outcomes(op, dtype, samples=2)]
    assert not [f.summary for o in found for f in o.findings]
    assert not [o.reason for o in found if o.status == "error"]
    assert sum(o.status == "pass" for o in found) >= 20, [(o.case.id, o.status, o.reason) for o in found]


@pytest.mark.parametrize("op, dtype", [("cholesky", "float64"), ("linalg.pinv.hermitian", "float64"), ("_batch_norm_with_update", "float32")])
def test_what_opinfos_gradcheck_differentiates_is_what_the_oracle_differentiates(run_sweep, op, dtype):
    # cholesky reads a hermitian input (OpInfo's gradcheck_wrapper makes it so): a finite difference along any
    # tangent leaves its domain; batch norm's saved statistics are outputs no mode differentiates, by definition.
    # Both gave "forward and reverse mode agree but differ from finite differences" before
    config = SweepConfig(ops=resolve_ops(op), dtypes=(dtype,), variants=("functional",), layouts=("contiguous",), samples=0,
                         workers=0, search=(), oracles=("autodiff",))
    result = run_sweep(config)
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) > 0, result.statuses


def test_an_op_defined_by_its_storage_is_judged_on_its_own_layout_only(run_sweep):
    # as_strided of a strided view reads the view's storage, gaps included; x + h v is a fresh contiguous tensor,
    # so finite differences of a laid-out input differentiate another function (found as false positives before)
    config = SweepConfig(ops=resolve_ops("as_strided"), dtypes=("float64",), variants=("functional",), layouts=("contiguous",),
                         samples=0, workers=0, search=("values",), oracles=("autodiff",))
    result = run_sweep(config)
    assert not result.findings, [f.summary for f in result.findings]
    assert result.statuses.get("pass", 0) > 0, result.statuses


# --- on CUDA, and where the float64 reference's sizes differ -----------------------------------------


def test_a_slack_sized_unlike_the_leaf_it_is_for_is_left_out_and_the_values_are_still_compared(monkeypatch):
    # native_batch_norm's saved statistics are empty in its float64 run on the CPU and not on CUDA: the rule's slack
    # for that leaf cannot describe the compared values, and adding it to the oracle's own slack raised
    from torchsleuth.cases import opinfo
    from torchsleuth.judge import calls
    from torchsleuth.judge.context import Context
    from torchsleuth.run import call

    entry = opinfo.get("neg")
    sample = opinfo.samples(entry, torch.float32)[0]
    case = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0)
    prepared = call.prepare(case, opinfo.functions(entry)["functional"], sample)
    result = call.compute(prepared)
    judged = calls.Judged(prepared, result, override=None, function_name="torch.neg", op="aten.neg.default")
    monkeypatch.setattr(Context, "slack", lambda self, scale, jumps=False: {"out": torch.zeros(0, dtype=torch.float64)})
    off = result + 1.0
    found = judged.context.differs(off, result, scale=2.0, extra={"out": torch.full(result.shape, 1e-3, dtype=torch.float64)})
    assert [(m.path, m.attribute) for m in found] == [("out", "values")]
    assert not judged.context.differs(result + 1e-4, result, scale=2.0, extra={"out": torch.full(result.shape, 1e-3, dtype=torch.float64)})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_wrong_forward_mode_formula_on_cuda_is_found_and_no_case_fails(planted, run_sweep):
    # siding between the modes compared the forward mode on the CPU with the reverse mode left on the device
    planted(SIN_JVP_PLANT.replace('"AutogradCPU"', '"AutogradCUDA"'))
    result = run_sweep(sweep_config("sin", device="cuda"))
    assert "error" not in result.statuses, result.reasons
    found = gradient_findings(result)
    assert found and {(f.op, f.reference) for f in found} == {("aten.sin.default", "reverse-mode")}
    assert all("siding with reverse mode" in f.summary for f in found)
