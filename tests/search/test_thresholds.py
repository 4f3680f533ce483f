"""The thresholds search (search.thresholds, search.edges, search.boundaries): values led by the function. A float32
exp whose intermediate overflows in the last numbers below exp's own threshold, where the exact result fits, is found
by a run pointed at exp and named with the edit that placed the threshold; the dtype's special values miss it; the real
kernel is clean."""

from __future__ import annotations

import math

import mpmath as mp
import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, search
from torchsleuth.cases.records import Case
from torchsleuth.errors import UsageError
from torchsleuth.oracles.autodiff import ranges
from torchsleuth.oracles.autodiff.oracle import unfair_sets
from torchsleuth.run.samples import samples_of
from torchsleuth.search import boundaries, edges, thresholds, value_sets
from torchsleuth.sweep import depth

SHIFT = 2.0 ** -16


def exp_through_a_shifted_intermediate(x: torch.Tensor) -> torch.Tensor:
    """float32 exp as exp(x + h) * exp(-h), h = 2**-16 (a shift that lets a kernel share a table): the intermediate
    exp(x + h), rounded to float32, overflows for the two numbers just below exp's threshold (88.72282 and 88.72283),
    whose exact exp still fits. Elsewhere it is right to a unit."""
    right = torch.special.expm1(x.double()) + 1  # no call to aten::exp
    if x.dtype != torch.float32:
        return right.to(x.dtype)
    shifted = (torch.special.expm1((x + SHIFT).double()) + 1).to(torch.float32)  # the intermediate, in float32
    return (shifted.double() * math.exp(-SHIFT)).to(torch.float32)


class _ExpShiftedTangent(torch.autograd.Function):
    """exp, its value and reverse mode right; its forward-mode formula takes the tangent times
    ``exp_through_a_shifted_intermediate(x)``, so J v overflows in float32 at the two numbers just below exp's
    threshold, where the exact derivative exp(x) still fits: a derivative formula wrong only at a threshold."""

    @staticmethod
    def forward(x):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.exp(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * exp_through_a_shifted_intermediate(x)


def pointed(op: str, **extra) -> SweepConfig:
    """``torchsleuth ops --ops OP`` in this process, in float32 (every search, the cheap oracles)."""
    return depth(SweepConfig(**{**dict(ops=resolve_ops(op), dtypes=("float32",), workers=0, search=search.names()), **extra}), deep=True)


def listing(result) -> str:
    return "\n".join([f"statuses {result.statuses}"] + [f"  {f.case_id}: {f.summary}" for f in result.findings])


@pytest.mark.slow
def test_an_intermediate_overflowing_just_below_the_threshold_is_found_and_named_with_its_edit(plant, run_sweep):
    plant("exp", exp_through_a_shifted_intermediate)
    result = run_sweep(pointed("exp"))
    assert result.findings, listing(result)
    for f in result.findings:
        assert f.op.startswith("aten.exp"), listing(result)
        assert "edge:input=overflow" in Case.parse(f.case_id).edits, listing(result)  # the trigger: the threshold's set
    functional = [f for f in result.findings if f.case_id.startswith("exp|functional|")]
    assert functional and functional[0].reference == "precision" and functional[0].mismatch.actual == "inf", listing(result)
    # the dtype's special values (88.42, 89.07 in float32) miss the window: without this search the sweep is clean
    others = tuple(name for name in search.names() if name != "thresholds")
    assert not run_sweep(pointed("exp", search=others)).findings


@pytest.mark.slow
def test_a_forward_mode_formula_overflowing_just_below_the_threshold_is_found_by_the_autodiff_oracle(autograd_plant, run_sweep):
    autograd_plant("exp", _ExpShiftedTangent.apply)
    result = run_sweep(pointed("exp", variants=("functional",)))
    forward = [f for f in result.findings if Case.parse(f.case_id).oracle == "autodiff:forward"]
    assert forward, listing(result)
    for f in forward:
        assert "edge:input=overflow" in Case.parse(f.case_id).edits, listing(result)  # the trigger: the threshold's set
        assert f.summary.startswith("forward-mode derivative of exp [float32]"), f.summary
    assert "inf" in forward[0].summary, forward[0].summary


@pytest.mark.slow
def test_the_thresholds_search_over_the_real_kernel_is_clean(run_sweep):
    result = run_sweep(pointed("exp"))
    assert not result.findings, listing(result)
    planned = sum(len(thresholds.plan("exp", v, "float32", s)) for s in samples_of("exp", "float32") for v in thresholds.VARIANTS)
    assert planned >= 8 and result.statuses.get("pass", 0) > planned, listing(result)


def test_the_window_is_where_the_values_search_has_no_value():
    window = [x for x in edges.sets("exp", torch.float32)["overflow"] if math.isinf(exp_through_a_shifted_intermediate(torch.tensor([x])).item())
              and math.isfinite(float(mp.exp(x)))]
    assert window and max(window) < 88.7229
    special = [v for name in value_sets.names(torch.float32) for v in value_sets.values(name, torch.float32)]
    assert not any(min(window) <= v <= max(window) for v in special if math.isfinite(v))


@pytest.mark.parametrize("op, dtype, lowest, highest", [("sinh", torch.float32, 89.41595, 89.41602), ("exp", torch.float16, 11.06, 11.12),
                                                         ("lgamma", torch.float32, 4.08e36, 4.09e36)])
def test_the_overflow_threshold_is_bisected_to_the_dtype_s_own_numbers(op, dtype, lowest, highest):
    points = edges.sets(op, dtype)["overflow" if op != "sinh" else "overflow.2"]
    assert len(points) == 2 * edges.SIDE and all(lowest <= p <= highest for p in points)
    fn, info = edges.FUNCTIONS[op].fn, torch.finfo(dtype)
    last, first = points[edges.SIDE - 1], points[edges.SIDE]  # the last number whose exact result fits, the first past it
    assert edges.key(first, dtype) == edges.key(last, dtype) + 1
    with mp.workprec(200):
        bound = mp.mpf(info.max) + mp.ldexp(mp.mpf(info.eps), math.frexp(info.max)[1] - 2)
        assert abs(fn(mp.mpf(points[0]))) < abs(fn(mp.mpf(last))) < bound <= abs(fn(mp.mpf(first))) < abs(fn(mp.mpf(points[-1])))


def test_poles_zeros_and_saturation_are_found():
    lgamma = edges.sets("lgamma", torch.float32)
    poles = [set(lgamma[name]) for name in lgamma if name.startswith("pole")]
    assert any(torch.nextafter(torch.tensor(-1.0), torch.tensor(0.0)).item() in p for p in poles)  # just right of -1
    assert any(1.0 - 2 ** -24 in lgamma[name] for name in lgamma if name.startswith("sign"))  # the zero at 1, each side
    tanh = edges.sets("tanh", torch.float32)
    assert "unit" in tanh and "same" in tanh
    assert edges.sets("sinh", torch.float32) is edges.sets("sinh", torch.float32)  # computed once per op and dtype
    assert not edges.known("special.zeta") and not edges.known("add")


def test_quotients_are_within_a_unit_of_an_integer_and_aligned_with_their_divisors():
    divisors = boundaries.values("remainder", "divisor", torch.float32)
    for name in boundaries.QUOTIENT_SETS:
        dividends = boundaries.values("remainder", name, torch.float32)
        assert len(dividends) == len(divisors)
        for a, b, k in zip(dividends, divisors, boundaries.MULTIPLES):
            assert abs(mp.mpf(a) / mp.mpf(b) - k) < abs(k) * 2 ** -20  # the exact quotient, within a few units of k
    half = boundaries.values("round.decimals_3", "half", torch.float32)
    assert any(abs(h - 0.0015) < 1e-9 for h in half)
    assert len(set(boundaries.values("add", "magnitude.1", torch.float32))) == boundaries.MOST


def test_plan_and_apply():
    sample = samples_of("remainder", "float32")[0]
    planned = thresholds.plan("remainder", "functional", "float32", sample)
    assert all(e[-2].startswith("edge:input=quotient") and e[-1] == "edge:args[0]=divisor" for e in planned)
    assert not thresholds.plan("remainder", "backward", "float32", sample)  # rounding sets: forward only
    sinh = samples_of("sinh", "float32")[0]
    assert not any("same" in e[-1] for e in thresholds.plan("sinh", "inplace", "float32", sinh))
    assert not any("unit" in e[-1] for e in thresholds.plan("tanh", "backward", "float16", samples_of("tanh", "float16")[0]))
    edited = thresholds.apply(sinh, "input=overflow.2@1", op="sinh")
    values = edges.sets("sinh", torch.float32)["overflow.2"]
    cycle = (*values, values[0]) if len(values) % 2 == 0 else values
    assert edited.input.reshape(-1)[0].item() == cycle[1]
    with pytest.raises(UsageError, match="no set"):
        thresholds.apply(sinh, "input=magnitude.9", op="sinh")
    with pytest.raises(UsageError, match="no tensor"):
        thresholds.apply(sinh, "other=overflow", op="sinh")


def test_the_autodiff_oracle_judges_every_set_and_leaves_out_the_elements_whose_exact_derivative_leaves_the_range():
    assert unfair_sets(("dim:input@0>255", "edge:input=overflow.2", "edge:input=magnitude.3@1", "edge:input=subnormal.2")) == []
    overflow = torch.tensor(edges.sets("exp", torch.float32)["overflow"], dtype=torch.float64)
    last = overflow[edges.SIDE - 1].item()  # exp(x) fits float32, and so does exp(x) * v for |v| <= 1, not for |v| = 2
    one, two = torch.ones_like(overflow), torch.full_like(overflow, 2.0)
    out = ranges.outside("exp", ranges.FIRST, overflow, one, None, torch.float32)
    assert out is not None and not out[edges.SIDE - 1] and ranges.outside("exp", ranges.FIRST, overflow, two, None, torch.float32)[edges.SIDE - 1]
    assert not ranges.outside("exp", ranges.FIRST, overflow, one, None, torch.float64).any()  # float64 holds them all
    with mp.workprec(200):  # exp' = exp'' = exp, by mpmath's differences at a relative step
        assert all(abs(d / mp.exp(mp.mpf(last)) - 1) < mp.mpf(2) ** -100 for d in ranges.derivatives("exp", last))
    tiny = torch.tensor([4.8e37], dtype=torch.float64)  # erfcx'' there is 1e-113: below float32's smallest normal
    assert ranges.outside("special.erfcx", ranges.SECOND, tiny, torch.ones_like(tiny), torch.ones_like(tiny), torch.float32).all()
    assert ranges.outside("add", ranges.FIRST, tiny, tiny, None, torch.float32) is None  # no exact function: the float64 rule
