"""The arguments search (search.arguments): the ``arg:PATH=VALUE`` edit, the values it plans, and a kernel wrong
only at an argument value OpInfo's samples never give, found and named.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.opinfo import Sample
from torchsleuth.cases.records import Case
from torchsleuth.engine import run_case
from torchsleuth.errors import UsageError
from torchsleuth.search import edits
from torchsleuth.run.samples import samples_of
from torchsleuth.search import arguments

LEAKY = "nn.functional.leaky_relu"


def sample(*args, **kwargs) -> Sample:
    return Sample(input=torch.ones(2, 3), args=args, kwargs=kwargs, output_process_fn_grad=lambda x: x)


EXTREMES = [math.inf, -math.inf, torch.finfo(torch.float32).smallest_normal, torch.finfo(torch.float32).max]  # a float32 case's ends


def planned(op: str, s, variant: str = "functional") -> dict[str, list]:
    """Argument path -> the values planned for it, in order."""
    found: dict[str, list] = {}
    for (one,) in arguments.plan(op, variant, "float32", s):
        path, _, text = one.removeprefix("arg:").partition("=")
        found.setdefault(path, []).append(arguments.parse_value(text))
    return found


# --- the edit -------------------------------------------------------------------------


def test_the_edit_sets_a_positional_argument_or_a_keyword_and_leaves_the_sample_alone():
    original = sample(1, 0.5, alpha=2)
    edited = edits.apply(original, ("arg:args[1]=-0.5", "arg:alpha=0", "arg:beta=True"))
    assert edited.args == (1, -0.5) and edited.kwargs == {"alpha": 0, "beta": True}
    assert type(edited.kwargs["alpha"]) is int and edited.input is original.input
    assert original.args == (1, 0.5) and original.kwargs == {"alpha": 2}


@pytest.mark.parametrize("value", [0.0, -0.0, -0.5, 1e-05, 3, -1, True, False, math.inf, -math.inf, complex(1, -2), 0j])
def test_a_value_reads_back_as_written_with_its_type(value):
    edit = arguments.edit("alpha", value)
    assert " " not in edit
    back = edits.apply(sample(), (edit,)).kwargs["alpha"]
    assert type(back) is type(value) and back == value and math.copysign(1, back.real) == math.copysign(1, value.real)


def test_nan_reads_back_as_nan():
    back = edits.apply(sample(), (arguments.edit("eps", math.nan),)).kwargs["eps"]
    assert isinstance(back, float) and math.isnan(back)


@pytest.mark.parametrize("edit", ["arg:alpha", "arg:=1", "arg:alpha=__import__('os')", "arg:alpha=[1]", "arg:alpha=x", "arg:args[2]=1", "arg:args[x]=1"])
def test_a_malformed_edit_is_a_usage_error(edit):
    with pytest.raises(UsageError):
        edits.apply(sample(1, 2), (edit,))


def test_a_case_with_the_edit_replays_from_its_id():
    case = Case(op=LEAKY, variant="functional", dtype="float32", device="cpu", sample=0, edits=("arg:negative_slope=-0.01",))
    assert Case.parse(case.id) == case
    assert run_case(case).status == "pass"


# --- the values --------------------------------------------------------------------


def test_an_argument_the_samples_leave_at_its_default_is_searched_and_inplace_is_left_alone():
    s = samples_of(LEAKY, "float32")[0]
    assert "negative_slope" not in s.kwargs and not s.args  # OpInfo never passes it
    for variant in ("functional", "inplace"):
        assert planned(LEAKY, s, variant) == {"negative_slope": [0.0, -0.01, 0.99, 100.0, *EXTREMES]}


def test_only_the_functional_inplace_and_out_variants_are_searched():
    s = samples_of("addcmul", "float32")[0]
    assert planned("addcmul", s, "out") == planned("addcmul", s, "inplace") == planned("addcmul", s) == {"value": [0, -1, 64, *EXTREMES]}
    assert planned("addcmul", s, "method") == planned("addcmul", s, "backward") == {}


def test_the_plan_is_deterministic():
    for op in (LEAKY, "add", "softmax", "linalg.vector_norm", "nn.functional.normalize"):
        for s in samples_of(op, "float32")[:6]:
            assert arguments.plan(op, "functional", "float32", s) == arguments.plan(op, "functional", "float32", s)


# where each op's samples hold their dim
DIM_AT = {"softmax": "args[0]", "cumsum": "args[0]", "nn.functional.glu": "args[0]", "argmax": "dim",
          "nn.functional.normalize": "dim", "linalg.vector_norm": "dim"}


@pytest.mark.parametrize("op", list(DIM_AT))
def test_dim_edits_stay_in_range_and_spell_the_same_dim_negatively(op):
    path, searched = DIM_AT[op], 0
    for s in samples_of(op, "float32"):
        position = arguments.sample_position(path)
        dim = s.kwargs.get(path) if position is None else s.args[position] if position < len(s.args) else None
        if type(dim) is not int:
            continue
        n = max(s.input.dim(), 1)
        values = planned(op, s)[path]
        assert all(type(d) is int and -n <= d < n for d in values), (s.input.shape, dim, values)
        assert (dim - n if dim >= 0 else dim + n) in values  # the same dim, spelled the other way
        assert {0, n - 1} & {d % n for d in values} - {dim % n} or n == 1  # and the other end
        searched += 1
    assert searched


def test_rules_by_name_and_type():
    values = arguments.values_for
    assert values("norm", "p", 2, 2) == [0, 1, math.inf, -math.inf, 0.5, 3]  # a norm's orders
    assert values("nn.functional.triplet_margin_loss", "p", 2, 2) == [0, 1, math.inf, -math.inf, 0.5, 3]
    assert values("nn.functional.dropout", "p", 0.25, 2) == [0.0, -0.25, 0.75, 4.0]  # a probability: past the midpoint
    assert values("linalg.vector_norm", "keepdim", False, 2) == [True]
    assert values("add", "alpha", 1, 2) == [0, -1, 64]
    assert values("nn.functional.elu", "alpha", 1.0, 2) == [0.0, -1.0, 2.0, 0.5]
    assert values("nn.functional.layer_norm", "eps", 1e-05, 2) == [0.0, -1e-05, 0.99999]  # no 1e5: only cancellation
    assert values("nn.functional.hardtanh", "min_val", 0.0, 2) == [-1.0, 1.0, arguments.SMALL, arguments.LARGE]
    assert values("grid_sampler_2d", "interpolation_mode", 1, 4) == [0, 2]  # codes only: aten checks none
    assert values("cumsum", "dim", 0, 0) == [-1]  # a 0-d input has one dim, spelled 0 and -1
    assert values("softmax", "dim", 1, 3) == [-2, 0, -3]


# --- judged by the references ------------------------------------------------------


def test_edits_that_change_the_result_shape_are_judged_against_the_same_edited_call():
    s = next(i for i, s in enumerate(samples_of("linalg.vector_norm", "float32")) if s.kwargs.get("keepdim") is False and s.input.dim() == 2)
    for edit in ("arg:keepdim=True", "arg:ord=-inf", "arg:ord=0.5"):
        for dtype in ("float32", "float64"):
            outcome = run_case(Case(op="linalg.vector_norm", variant="functional", dtype=dtype, device="cpu", sample=s, edits=(edit,)))
            assert outcome.status == "pass", (edit, dtype, outcome.reason, outcome.findings)


def test_an_edit_that_changes_the_result_dtype_is_judged_in_that_dtype():
    # where(cond, x, 1j) is complex64 for a float32 x; its float64 reference is complex128, rounded to complex64
    index = next(i for i, s in enumerate(samples_of("where", "float32")) if len(s.args) == 2)
    case = Case(op="where", variant="functional", dtype="float32", device="cpu", sample=index, edits=("arg:args[1]=1j",))
    outcome = run_case(case)
    assert outcome.status == "pass", (outcome.reason, outcome.findings)


# --- a planted argument-value bug ------------------------------------------------------


def leaky_relu_wrong_past_slope_one(self, negative_slope=0.01):
    """``leaky_relu`` whose float32 kernel clamps a slope past 1 to 1 (the float64 reference's kernel is right)."""
    slope = 1.0 if self.dtype == torch.float32 and negative_slope > 1 else negative_slope
    return torch.where(self > 0, self, self * slope)


def leaky_config(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops(LEAKY), dtypes=("float32",), variants=("functional",), layouts=("contiguous",), workers=0,
                samples=0, search=("arguments",)) | extra
    return SweepConfig(**spec)


def test_a_kernel_wrong_only_past_a_slope_of_one_is_found_and_named_with_the_value(plant, run_sweep):
    plant("leaky_relu", leaky_relu_wrong_past_slope_one)
    result = run_sweep(leaky_config())
    assert result.findings, result.statuses
    for finding in result.findings:
        assert (finding.kind, finding.reference, finding.op, finding.opinfo) == ("mismatch", "precision", "aten.leaky_relu.default", LEAKY)
        set_args = [e for e in Case.parse(finding.case_id).edits if e.startswith("arg:")]
        assert len(set_args) == 1 and arguments.parse_value(set_args[0].partition("=")[2]) > 1, finding.case_id  # the trigger: a slope past 1
    assert any("arg:negative_slope=100.0" in Case.parse(f.case_id).edits for f in result.findings)
    # OpInfo's samples never pass a slope: without the search the plant goes unseen
    assert not run_sweep(leaky_config(search=())).findings


def test_the_same_searched_run_without_the_plant_is_clean(run_sweep):
    result = run_sweep(leaky_config())
    assert not result.findings and result.statuses.get("pass", 0) >= 4, result.statuses


def test_a_pointwise_op_s_float_arguments_also_go_to_the_dtype_s_ends():
    sample = samples_of(LEAKY, "float16")[0]  # its slope left at the default: searched all the same
    planned = {e[0] for e in arguments.plan(LEAKY, "functional", "float16", sample)}
    info = torch.finfo(torch.float16)
    for value in (math.inf, -math.inf, info.smallest_normal, info.max):
        assert arguments.edit("negative_slope", value) in planned
    assert arguments.extremes("alpha", 1, torch.float32)[-1] == torch.finfo(torch.float32).max  # add's int alpha, a float Scalar
    assert arguments.extremes("dim", 1, torch.float32) == []  # an int that is no Scalar
    # not for an op that is not pointwise (a norm's eps is a guard, not a value the kernel scales by)
    layer_norm = samples_of("nn.functional.layer_norm", "float32")[0]
    assert not any("inf" in e[0] for e in arguments.plan("nn.functional.layer_norm", "functional", "float32", layer_norm))
