"""judge/compare.py and judge/tolerance.py: what counts as equal, and what a mismatch reports."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing._comparison import default_tolerances

from torchsleuth.judge import tolerance as tolerance_module
from torchsleuth.judge.compare import bytes_of, compare, compare_leaf, flatten
from torchsleuth.judge.records import Mismatch
from torchsleuth.judge.tolerance import Tolerance, accumulation_dtype, slack_factor, table
from torchsleuth.run.transfer import gathered

INF, NAN = math.inf, math.nan


def leaf(actual, expected, **kwargs) -> Mismatch | None:
    kwargs.setdefault("tolerance", table)
    return compare_leaf("out", actual, expected, **kwargs)


def fixed(atol: float, rtol: float):
    """A tolerance callable with no scale term, so that ``allowed`` is easy to compute."""
    return lambda dtype: Tolerance(atol=atol, rtol=rtol)


# --- NaN and infinities --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_nan_matches_nan_and_inf_the_same_inf(dtype):
    values = torch.tensor([NAN, INF, -INF, 0.0, 1.5], dtype=dtype)
    assert leaf(values.clone(), values) is None


@pytest.mark.parametrize(
    "actual, expected",
    [(INF, -INF), (-INF, INF), (1.0, INF), (INF, 1.0), (-INF, -1e30), (3.0e38, INF), (NAN, 1.0), (1.0, NAN), (NAN, INF), (INF, NAN)],
)
def test_infinity_and_nan_only_match_themselves(actual, expected):
    m = leaf(torch.tensor([0.0, actual]), torch.tensor([0.0, expected]))
    assert m is not None and m.attribute == "values"
    assert (m.mismatched, m.numel, m.worst_index) == (1, 2, (1,))
    assert m.max_abs_err == INF  # never NaN, never a finite number


def test_huge_tolerance_does_not_admit_infinity():
    m = leaf(torch.tensor([INF]), torch.tensor([1.0]), tolerance=fixed(1e300, 1e300))
    assert m is not None
    assert leaf(torch.tensor([1.0]), torch.tensor([INF]), tolerance=fixed(1e300, 1e300)) is not None


def test_complex_nan_and_inf():
    z = torch.tensor([complex(NAN, 0.0), complex(INF, 1.0), complex(1.0, -INF)], dtype=torch.complex64)
    assert leaf(z.clone(), z) is None
    other = z.clone()
    other[1] = complex(-INF, 1.0)
    m = leaf(other, z)
    assert m is not None and m.worst_index == (1,) and m.mismatched == 1


# --- exact dtypes --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_integers_must_match_exactly(dtype):
    e = torch.tensor([1, 2, 3, 100], dtype=dtype)
    assert leaf(e.clone(), e) is None
    a = e.clone()
    a[2] = 4
    m = leaf(a, e)
    assert m is not None and (m.attribute, m.mismatched, m.numel, m.worst_index) == ("values", 1, 4, (2,))
    assert (m.expected, m.actual, m.max_abs_err, m.allowed) == ("3", "4", 1.0, 0.0)
    # even a generous float tolerance does not loosen integers
    assert leaf(a, e, tolerance=fixed(10.0, 10.0)) is not None


def test_large_int64_differences_are_not_rounded_away():
    e = torch.tensor([2**60], dtype=torch.int64)
    m = leaf(e + 1, e)
    assert m is not None and m.max_abs_err == 1.0


def test_bool_must_match_exactly():
    e = torch.tensor([True, False, True])
    assert leaf(e.clone(), e) is None
    m = leaf(torch.tensor([True, True, True]), e)
    assert m is not None and (m.mismatched, m.worst_index, m.expected, m.actual) == (1, (1,), "False", "True")


def test_python_scalars():
    assert leaf(3, 3) is None and leaf(2.5, 2.5) is None and leaf(NAN, NAN) is None
    assert leaf(3, 4) is not None
    assert leaf(1.0, 1.0 + 1e-9) is None  # within float tolerance
    assert leaf(1.0, 1.5) is not None
    assert leaf(True, True) is None and leaf(True, False).attribute == "value"
    assert leaf("a", "a") is None and leaf("a", "b").attribute == "value"
    assert leaf(None, None) is None and leaf(None, 0).attribute == "value"


# --- metadata before values --------------------------------------------------------------


def test_shape_is_checked_before_values():
    m = leaf(torch.full((2, 3), NAN), torch.zeros(3, 2))
    assert (m.attribute, m.expected, m.actual) == ("shape", "[3, 2]", "[2, 3]")
    assert m.mismatched == 0 and m.max_abs_err is None


def test_dtype_is_checked_before_values():
    m = leaf(torch.tensor([5.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float32))
    assert (m.attribute, m.expected, m.actual) == ("dtype", "float32", "float64")
    # the same values in another dtype agree when the dtype is not checked
    assert leaf(torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float32), check_dtype=False) is None
    assert leaf(torch.tensor([5.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float32), check_dtype=False).attribute == "values"


def test_tensor_against_non_tensor_is_a_type_mismatch():
    m = leaf(torch.tensor(1.0), 1.0)
    assert (m.attribute, m.expected, m.actual) == ("type", "float", "Tensor")
    assert leaf(1.0, torch.tensor(1.0)).attribute == "type"


def test_structure_is_checked_before_leaves():
    a = flatten((torch.zeros(2), torch.zeros(2)))
    e = flatten((torch.zeros(2),))
    found = compare(a, e, tolerance=table)
    assert len(found) == 1 and found[0].attribute == "structure"


def test_compare_reports_each_mismatched_leaf_with_its_path():
    e = flatten((torch.zeros(3), torch.ones(2), torch.arange(4)))
    a = flatten((torch.zeros(3), torch.tensor([1.0, 9.0]), torch.tensor([0, 1, 2, 0])))
    found = compare(a, e, tolerance=table)
    assert [m.path for m in found] == [e[1][0], e[2][0]]
    assert len({p for p, _ in e}) == 3  # the paths name the leaves apart
    assert compare(e, e, tolerance=table) == []


def test_sparse_tensors_are_compared_densely():
    dense = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    assert leaf(dense.to_sparse(), dense) is None
    assert leaf(dense.to_sparse(), dense + torch.eye(2)) is not None


# --- the mismatch record -------------------------------------------------------------------


def test_mismatch_fields_for_a_planted_difference():
    e = torch.arange(12.0).reshape(3, 4)
    a = e.clone()
    a[1, 2] += 1.0  # expected 6: allowed 0.1 + 0.01 * 6 = 0.16; missed by 0.84
    a[2, 3] += 0.5  # expected 11: allowed 0.21; missed by 0.29
    a[0, 1] += 0.05  # within tolerance
    m = leaf(a, e, tolerance=fixed(0.1, 0.01))
    assert (m.path, m.attribute) == ("out", "values")
    assert (m.mismatched, m.numel, m.worst_index) == (2, 12, (1, 2))
    assert (m.expected, m.actual) == ("6", "7")
    assert m.max_abs_err == pytest.approx(1.0)
    assert m.allowed == pytest.approx(0.16)
    assert (m.atol, m.rtol) == (0.1, 0.01)
    text = m.describe()
    assert "2/12" in text and "[1, 2]" in text and "0.16" in text


def test_worst_index_is_the_element_furthest_beyond_what_it_was_allowed():
    # element 0 is off by more, but is allowed more (rtol on a large value)
    e = torch.tensor([1000.0, 1.0])
    a = torch.tensor([1012.0, 4.0])  # beyond what was allowed: 12 - 10 = 2, and 3 - 0.01
    m = leaf(a, e, tolerance=fixed(0.0, 0.01))
    assert (m.mismatched, m.worst_index, m.max_abs_err) == (2, (1,), pytest.approx(3.0))
    assert m.allowed == pytest.approx(0.01)
    m = leaf(torch.tensor([1005.0, 3.0]), e, tolerance=fixed(0.0, 0.01))
    assert (m.mismatched, m.worst_index) == (1, (1,))


def test_nan_where_a_number_was_expected_is_the_worst():
    e = torch.tensor([1.0, 2.0, 3.0])
    m = leaf(torch.tensor([100.0, NAN, 3.0]), e)
    assert (m.mismatched, m.worst_index, m.actual, m.max_abs_err) == (2, (1,), "nan", INF)


def test_the_table_tolerance_is_used_per_dtype():
    # 1e-3 relative: within float16's rtol, far outside float32's
    e = torch.tensor([1.0, 2.0])
    a = e * (1 + 5e-4)
    assert leaf(a.half(), e.half()) is None
    m = leaf(a, e)
    assert m is not None and (m.atol, m.rtol) == default_tolerances(torch.float32)[::-1]


def test_a_dropped_element_shows_beside_large_ones_in_bfloat16():
    # the table tolerance is relative to each element, not to the largest
    e = torch.tensor([100.0, 3.0, 2.0], dtype=torch.bfloat16)
    a = torch.tensor([100.0, 0.0, 0.0], dtype=torch.bfloat16)
    m = leaf(a, e, tolerance=table)
    assert m is not None and m.mismatched == 2


# --- slack --------------------------------------------------------------------------------


def test_slack_widens_per_element():
    e = torch.tensor([1.0, 2.0, 3.0])
    a = torch.tensor([1.0, 2.5, 3.5])
    assert len(compare([("out", a)], [("out", e)], tolerance=fixed(0.0, 0.0))) == 1
    slack = {"out": torch.tensor([0.0, 1.0, 1.0])}
    assert compare([("out", a)], [("out", e)], tolerance=fixed(0.0, 0.0), slack=slack) == []
    partial = {"out": torch.tensor([0.0, 1.0, 0.0])}
    (m,) = compare([("out", a)], [("out", e)], tolerance=fixed(0.0, 0.0), slack=partial)
    assert (m.mismatched, m.worst_index) == (1, (2,))
    # slack is per path: another leaf's slack does not help
    assert len(compare([("out", a)], [("out", e)], tolerance=fixed(0.0, 0.0), slack={"other": torch.ones(3)})) == 1


def test_slack_loosens_integers_where_given():
    e = torch.tensor([3, 4, 5])
    a = torch.tensor([3, 5, 5])
    assert leaf(a, e) is not None
    assert leaf(a, e, slack=torch.tensor([0.0, 1.0, 0.0])) is None
    assert leaf(a, e, slack=torch.tensor([1.0, 0.0, 1.0])) is not None


def test_slack_does_not_admit_nan_or_inf():
    e = torch.tensor([1.0, INF])
    assert leaf(torch.tensor([NAN, INF]), e, slack=torch.tensor([1e30, 1e30])) is not None
    assert leaf(torch.tensor([1.0, -INF]), e, slack=torch.tensor([1e30, 1e30])) is not None


# --- bitwise ------------------------------------------------------------------------------


def nan_with_payload(payload: int) -> torch.Tensor:
    return torch.tensor([0x7FC00000 | payload], dtype=torch.int32).view(torch.float32)


def test_bitwise_catches_signed_zero():
    pos, neg = torch.tensor([1.0, 0.0]), torch.tensor([1.0, -0.0])
    assert leaf(neg, pos) is None  # equal as numbers
    m = leaf(neg, pos, bitwise=True)
    assert m is not None and (m.mismatched, m.numel, m.worst_index, m.allowed) == (1, 2, (1,), 0.0)
    assert leaf(pos.clone(), pos, bitwise=True) is None


def test_bitwise_catches_nan_payloads():
    a, e = nan_with_payload(1), nan_with_payload(2)
    assert torch.isnan(a).all() and torch.isnan(e).all()
    assert leaf(a, e) is None  # NaN matches NaN
    m = leaf(a, e, bitwise=True)
    assert m is not None and m.worst_index == (0,)
    assert leaf(a.clone(), a, bitwise=True) is None


def test_bitwise_on_integers_bool_and_strided_views():
    e = torch.arange(12).reshape(3, 4)
    a = e.clone()
    a[2, 1] = -1
    m = leaf(a.t(), e.t(), bitwise=True)
    assert (m.mismatched, m.worst_index) == (1, (1, 2))
    assert leaf(torch.tensor([True, False]), torch.tensor([True, True]), bitwise=True).worst_index == (1,)
    assert leaf(e.t(), e.t().contiguous(), bitwise=True) is None
    assert leaf(torch.zeros(0, 3), torch.zeros(0, 3), bitwise=True) is None
    assert leaf(torch.zeros(2), torch.zeros(2, dtype=torch.float64), bitwise=True).attribute == "dtype"


def test_bytes_of_reads_elements_in_logical_order():
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t()
    assert torch.equal(bytes_of(t), torch.tensor([1.0, 3.0, 2.0, 4.0]).view(torch.uint8).reshape(4, 4))


# --- the tolerance table ------------------------------------------------------------------

FLOATING = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32, torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_table_matches_torch_testing(dtype):
    rtol, atol = default_tolerances(dtype)
    t = table(dtype)
    assert (t.atol, t.rtol) == (atol, rtol)
    assert tolerance_module.TABLE[dtype] == (atol, rtol)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool], ids=str)
def test_exact_dtypes_get_no_tolerance(dtype):
    assert default_tolerances(dtype) == (0.0, 0.0)
    assert table(dtype) == Tolerance(atol=0.0, rtol=0.0)
    assert table(dtype, override=(1.0, 1.0)) == Tolerance(atol=0.0, rtol=0.0)


def test_overrides_only_widen():
    base = table(torch.float32)
    wider = table(torch.float32, override=(1e-3, 1e-2))
    assert (wider.atol, wider.rtol) == (1e-3, 1e-2)
    narrower = table(torch.float32, override=(1e-9, 1e-9))
    assert (narrower.atol, narrower.rtol) == (base.atol, base.rtol)
    mixed = table(torch.float32, override=(1e-9, 1e-2))
    assert (mixed.atol, mixed.rtol) == (base.atol, 1e-2)


def test_accumulation_dtypes():
    assert accumulation_dtype(torch.float16) == torch.float32
    assert accumulation_dtype(torch.bfloat16) == torch.float32
    assert accumulation_dtype(torch.complex32) == torch.complex64
    for dtype in (torch.float32, torch.float64, torch.complex64, torch.int64):
        assert accumulation_dtype(dtype) == dtype


def test_slack_factor_grows_with_reduction_length_for_float32():
    lengths = [1, 4, 100, 10_000, 1_000_000]
    factors = [slack_factor(torch.float32, n) for n in lengths]
    assert factors == sorted(factors) and len(set(factors)) == len(factors)
    # sqrt(n) growth: 100x the length, ~10x the factor
    assert factors[4] / factors[3] == pytest.approx(10.0, rel=0.01)
    assert slack_factor(torch.float32, 1) == pytest.approx(2 * tolerance_module.SLACK)
    assert slack_factor(torch.float32, 0) == slack_factor(torch.float32, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_slack_factor_barely_grows_when_accumulating_in_float32(dtype):
    short, long = slack_factor(dtype, 1), slack_factor(dtype, 10_000)
    assert short >= tolerance_module.SLACK
    assert long > short  # it grows...
    assert long < 1.1 * short  # ...but not materially: float32 accumulation is far finer than the dtype
    assert slack_factor(torch.float32, 10_000) > 40 * short


def test_slack_factor_for_exact_dtypes_is_constant():
    assert slack_factor(torch.int64, 1) == slack_factor(torch.int64, 10**6) == tolerance_module.SLACK


@pytest.mark.parametrize("actual, expected, agree", [
    (complex(math.inf, math.nan), complex(math.inf, -math.inf), True),  # complex infinity both ways (sinc's inf+nanj)
    (complex(math.inf, 1.0), complex(math.inf, 1.0000001), True),  # the finite part within the tolerance rule
    (complex(math.inf, 1.0), complex(math.inf, 2.0), False),  # the finite part wrong beside an infinite one
    (complex(math.inf, 0.0), complex(-math.inf, 0.0), False),  # opposite infinities
    (complex(math.nan, 0.0), complex(1.0, 0.0), False),  # NaN where the reference is finite
    (complex(1.0, 1.0), complex(1.0, 1.5), False),
])
def test_complex_values_with_a_nonfinite_part_are_compared_part_by_part(actual, expected, agree):
    from torchsleuth.judge.compare import compare_leaf
    from torchsleuth.judge.tolerance import table

    a = torch.tensor([actual], dtype=torch.complex64)
    e = torch.tensor([expected], dtype=torch.complex128)
    assert (compare_leaf("out", a, e, tolerance=table, check_dtype=False) is None) == agree


def test_gathered_copies_are_each_tensor_with_its_values_and_shape():
    # to_host sends a split's thousands of outputs this way, one copy per dtype: cut back, each is what it was
    base = torch.arange(24.0).reshape(4, 6)
    tensors = [base.t(), base[:, 1], torch.tensor(5.0), torch.empty(0, 3), *base.split(1, dim=1)]
    copies = gathered(tensors, "cpu")
    assert len(copies) == len(tensors)
    for t, c in zip(tensors, copies):
        assert c.shape == t.shape and c.dtype == t.dtype and torch.equal(c, t)
    base.zero_()  # copies, not views of the sources
    assert copies[0].sum() == sum(range(24)) and copies[-1].tolist() == [[5.0], [11.0], [17.0], [23.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64, torch.int64, torch.bool])
def test_two_snapshots_of_a_storage_are_the_same_bytes_exactly_when_no_element_changed(dtype):
    from torchsleuth.judge.context import changed, same_bytes

    before = torch.arange(12).to(dtype)
    assert same_bytes(before, before.clone()) and not bool(changed(before, before.clone()).any())
    after = before.clone()
    after[7] = 1 if dtype in (torch.int64, torch.bool) and after[7] == 0 else 0
    assert not same_bytes(before, after) and changed(before, after).nonzero().flatten().tolist() == [7]
    if dtype.is_floating_point:  # bits, not values: a zero's sign and a NaN's payload are changes
        signed = before.clone()
        signed[0] = -0.0
        assert not same_bytes(before, signed)
        nan, other_nan = before.clone(), before.clone()
        nan[3], other_nan[3] = float("nan"), -float("nan")
        assert not same_bytes(nan, other_nan) and same_bytes(nan, nan.clone())
    # what cannot be asked in one comparison is left to ``changed``: not the same bytes by this answer
    other = before.to(torch.complex128 if dtype.is_complex else torch.float64)
    assert not same_bytes(before[::2], before.clone()[::2]) and not same_bytes(before, other)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64, torch.complex32], ids=str)
def test_at_no_tolerance_equal_values_pass_and_one_element_off_is_found_the_same_through_either_path(dtype):
    # complex32 has no torch.equal kernel: its leaves take the element-wise path (a whole-catalog run found chalf)
    # equal values (a zero of either sign, infinities) pass at once; a NaN takes the element-wise path and matches a NaN
    values = torch.tensor([0.0, -0.0, 1.5, INF, -INF, 3.0]).to(dtype)
    exact = fixed(0.0, 0.0)
    assert leaf(values, values.clone(), tolerance=exact) is None
    assert leaf(values, torch.tensor([-0.0, 0.0, 1.5, INF, -INF, 3.0]).to(dtype), tolerance=exact) is None
    with_nan = values.clone()
    with_nan[5] = NAN
    assert leaf(with_nan, with_nan.clone(), tolerance=exact) is None
    off = values.clone()
    off[2] = 1.75
    found = leaf(off, values, tolerance=exact)
    assert found is not None and found.mismatched == 1 and found.worst_index == (2,)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_call_leaving_a_host_copy_it_was_never_given_invalid_is_an_out_of_view_write(monkeypatch, when):
    # A kernel that writes outside its memory can overwrite torch's bookkeeping of another storage (lu_unpack's out=,
    # bench/search-cost.md): the judge's host copies of the call's storages were left flagged so that reading them
    # raises. Planted as that flag, set on one copy by the call: a finding naming the op, the path and the copy, not
    # a failure inside torchsleuth. Unplanted, the same case passes.
    from torchsleuth.cases.records import Case
    from torchsleuth.engine import run_case
    from torchsleuth.run import call

    case = Case(op="tril", variant="out", dtype="float32", device="cpu", sample=0)
    assert run_case(case).status == "pass"
    execute = call.execute

    def corrupting(prepared):
        ran = execute(prepared)
        torch._C._set_throw_on_mutable_data_ptr(getattr(ran, when)["out"])  # the state a stray write left it in
        return ran

    monkeypatch.setattr(call, "execute", corrupting)
    outcome = run_case(case)
    assert outcome.status == "finding", outcome.reason
    [finding] = outcome.findings
    assert finding.kind == "out_of_view_write" and finding.opinfo == "tril" and finding.case_id == case.id
    assert f"the copy of out's storage taken {when} the call" in finding.summary and "writes over memory outside its tensors" in finding.summary
