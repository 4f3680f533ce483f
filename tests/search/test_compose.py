"""Composition (search.compose): every search edit crossed with the layouts and its variants, so a bug that needs an
edit and a layout at once is called. Each planted bug here is missed by the edit alone and by the layout alone, and
found by a run pointed at the op, named with its overload, edit and layout; the same runs over the real kernels are
clean."""

from __future__ import annotations

import itertools

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, search
from torchsleuth.cases.layouts import contiguous_strides
from torchsleuth.cases.records import Case
from torchsleuth.run.samples import samples_of
from torchsleuth.search import compose, ranks
from torchsleuth.sweep import depth


def pointed(op: str, **extra) -> SweepConfig:
    """``torchsleuth ops --ops OP`` in this process, in float32, without the oracles (what they add is not the point)."""
    return depth(SweepConfig(**{**dict(ops=resolve_ops(op), dtypes=("float32",), workers=0, search=search.names()), **extra}),
                 deep=True, given={"oracles"})


def as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """What a kernel that ignores strides reads: ``t``'s storage in order from its offset."""
    return torch.as_strided(t, t.shape, contiguous_strides(tuple(t.shape)), t.storage_offset())


def add_scalar_ignoring_strides(self, other, alpha=1):
    """``aten.add.Scalar`` reading a non-contiguous ``self`` as if it were contiguous (no sample calls this overload,
    and a contiguous call of it is right)."""
    return torch.add(self if self.is_contiguous() else as_if_contiguous(self), other, alpha=alpha)


def leaky_relu_wrong_at_zero_slope_on_views(self, negative_slope=0.01):
    """``leaky_relu`` whose strided kernel takes a slope of exactly 0 for "unset" and passes the negative side through
    (an argument value no sample has, on layouts the samples at the default slope pass)."""
    slope = 1.0 if negative_slope == 0 and not self.is_contiguous() else negative_slope
    return torch.where(self > 0, self, self * slope)


def mul_inplace_wrong_for_channels_last(self, other):
    """In-place ``mul_`` whose channels-last loop writes one element too few (the samples are 1-D to 3-D: no
    channels-last ``self`` reaches it without growing the sample's rank)."""
    result = torch.mul(self, other).contiguous()
    if self.dim() == 4 and not self.is_contiguous() and self.is_contiguous(memory_format=torch.channels_last):
        result.view(-1)[-1] = 0
    return self.copy_(result)


def sum_over_channels_ignoring_channels_last(self, dim, keepdim=False, dtype=None):
    """``sum`` over dim 1 that reads a channels-last 4-D ``self`` as if it were contiguous (the samples are 0-D to 3-D:
    no channels-last tensor reaches it until the ranks search grows the call and moves its dim with it)."""
    if self.dim() == 4 and list(dim or ()) == [1] and not self.is_contiguous() and self.is_contiguous(memory_format=torch.channels_last):
        self = as_if_contiguous(self)
    wide = dtype or (torch.int64 if not (self.is_floating_point() or self.is_complex()) else self.dtype)
    return torch.ops.aten.sum.IntList_out(self, dim, keepdim, dtype=dtype, out=self.new_empty(0, dtype=wide))


PLANTS = {
    "add.Scalar": ("add", add_scalar_ignoring_strides, "aten.add.Scalar", "scalar:args[0]@aten.add.Scalar"),
    "leaky_relu": ("nn.functional.leaky_relu", leaky_relu_wrong_at_zero_slope_on_views, "aten.leaky_relu.default", "arg:negative_slope=0.0"),
    "mul_.Tensor": ("mul", mul_inplace_wrong_for_channels_last, "aten.mul_.Tensor", "rank:4"),
    "sum.dim_IntList": ("sum", sum_over_channels_ignoring_channels_last, "aten.sum.dim_IntList", "rank:4"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kernel", list(PLANTS))
def test_a_bug_that_needs_an_edit_and_a_layout_is_found_and_named_with_both(kernel, plant, run_sweep):
    op, planted, overload, trigger = PLANTS[kernel]
    plant(kernel, planted)
    found = [f for f in run_sweep(pointed(op)).findings if f.op == overload]
    assert found, f"{kernel}: no finding"
    for finding in found:
        case = Case.parse(finding.case_id)
        assert case.layouts and all(layout != "contiguous" for _, layout in case.layouts), finding.case_id  # a layout
        assert any(e.partition(":")[0] == trigger.partition(":")[0] for e in case.edits), finding.case_id  # and the edit
    assert any(trigger in Case.parse(f.case_id).edits for f in found)
    if kernel in ("mul_.Tensor", "sum.dim_IntList"):
        assert all(dict(Case.parse(f.case_id).layouts)["input"].startswith("channels_last") for f in found)  # and its offset twin


@pytest.mark.slow
@pytest.mark.parametrize("kernel", list(PLANTS))
def test_the_same_bug_is_missed_by_the_edits_alone_and_by_the_layouts_alone(kernel, plant, run_sweep, monkeypatch):
    op, planted, overload, _ = PLANTS[kernel]
    plant(kernel, planted)
    assert not [f for f in run_sweep(pointed(op, search=())).findings if f.op == overload]  # the layouts on the samples alone
    monkeypatch.setattr(compose, "levels", lambda *args: [()])  # the edits on contiguous tensors alone, as before composition
    assert not [f for f in run_sweep(pointed(op)).findings if f.op == overload]


@pytest.mark.slow
@pytest.mark.parametrize("op", ["add", "nn.functional.leaky_relu", "mul", "sum"])
def test_the_composed_runs_over_the_real_kernels_are_clean(op, run_sweep):
    result = run_sweep(pointed(op))
    assert not result.findings, [f.case_id for f in result.findings][:5]


def test_the_design_covers_every_edit_with_every_layout_and_every_variant_in_the_fewest_cases():
    levels = {"functional": [(), (("input", "transposed"),), (("input", "strided"),)],
              "inplace": [(), (("input", "strided"),), (("input", "offset"),)],
              "backward": [(), (("input", "transposed"),)]}
    chosen = compose.cover(list(levels), levels.__getitem__, {(v, name) for v in levels for name in ("transposed", "strided", "offset")})
    every_level = {level for found in levels.values() for level in found}
    assert {level for _, level in chosen} == every_level  # every (edit, layout) pair
    assert {variant for variant, level in chosen if level == ()} == set(levels)  # every (edit, variant) pair
    assert all(level in levels[variant] for variant, level in chosen)  # a layout only where the variant lays it out
    assert len(chosen) == len(levels) + len(every_level) - 1  # the fewest: one case per level past the variants
    assert len({variant for variant, level in chosen if level}) > 1  # the variants take the layouts in turn
    # a layout the sample's own cases never had (an edit made it fit) is taken in every variant that holds it
    covered = {("functional", "strided"), ("inplace", "strided"), ("inplace", "offset")}
    first = compose.cover(list(levels), levels.__getitem__, covered)
    assert {v for v, level in first if level == (("input", "transposed"),)} == {"functional", "backward"}
    again = compose.cover(list(levels), levels.__getitem__, covered)  # the next edit: covered now, once is enough
    assert len([v for v, level in again if level == (("input", "transposed"),)]) == 1


def test_a_levels_layouts_move_elements_only_and_an_in_place_self_is_never_expanded():
    sample = next(s for s in samples_of("mul", "float32") if s.input.dim() == 1)
    grown = compose.levels("mul", "inplace", ("rank:4",), sample, ("contiguous", "channels_last", "expanded", "empty", "strided"))
    assert grown[0] == () and {layout for level in grown for _, layout in level} == {"channels_last", "strided"}
    assert compose.levels("mul", "out", ("rank:4",), sample, ("strided",)) == [()]  # out= keeps its outputs contiguous


def test_the_ranks_search_grows_an_elementwise_call_and_keeps_its_values_in_order():
    sample = next(s for s in samples_of("mul", "float32") if s.input.dim() == 1 and s.args[0].dim() == 0)
    assert ranks.plan("mul", "functional", "float32", sample) == [("rank:3",), ("rank:4",), ("rank:5",)]
    grown = ranks.apply(sample, "4")
    assert grown.input.shape == (2, 3, 4, 5) and grown.args[0].dim() == 0  # the 0-d operand is left alone
    n = sample.input.numel()
    assert torch.equal(grown.input.reshape(-1)[: 2 * n], torch.cat([sample.input, sample.input]))
    broadcast = next(s for s in samples_of("mul", "float32") if s.input.dim() == 2 and s.args[0].dim() == 1)
    assert ranks.plan("mul", "functional", "float32", broadcast) == []  # operands of two shapes: not grown
    assert ranks.plan("mul", "out", "float32", sample) == []


def test_the_ranks_search_grows_a_call_over_a_dim_and_moves_its_dim_to_the_channels():
    sample = next(s for s in samples_of("sum", "float32") if s.input.dim() == 2 and isinstance(s.kwargs.get("dim"), (int, list, tuple)))
    assert ranks.plan("sum", "functional", "float32", sample) == [("rank:4",)]  # one rank: every sample grows alike
    grown = ranks.apply(sample, "4", op="sum")
    assert grown.input.shape == (2, 3, 4, 5) and grown.kwargs["dim"] in (1, [1], (1,))
    assert torch.sum(grown.input, **grown.kwargs).shape[0] == 2  # a valid call, over the channels
    scan = next(s for s in samples_of("cumsum", "float32") if s.input.dim() >= 1)
    assert ranks.apply(scan, "4", op="cumsum").args[0] == 1  # a positional dim moves too
    shaped = samples_of("narrow", "float32")[0]  # a start and a length depend on the shape: not grown
    assert ranks.plan("narrow", "functional", "float32", shaped) == []
    every = next((s for s in samples_of("sum", "float32") if s.input.dim() == 2 and not s.args and s.kwargs.get("dim") is None), None)
    assert every is None or ranks.plan("sum", "functional", "float32", every) == []  # no dim named: not an op over a dim


def test_a_pointed_run_says_each_planned_edit_ran_under_each_layout():
    sample = next(s for s in samples_of("add", "float32") if s.input.dim() == 2 and s.input.shape[0] > 1 and s.input.shape[1] > 1)
    edits = ("scalar:args[0]@aten.add.Scalar",)
    layouts = ("contiguous", "transposed", "strided", "offset")
    pairs = search.composed("add", edits, ["functional", "inplace"], sample, layouts)
    seen = {layout for _, laid in pairs for _, layout in laid}
    assert seen == {"transposed", "strided", "offset"}
    assert all(dict(laid).keys() <= {"input"} for _, laid in pairs)  # args[0] is a number now: nothing to lay out
    assert list(itertools.islice((v for v, laid in pairs if not laid), 2)) == ["functional", "inplace"]


@pytest.mark.slow
def test_coverage_counts_an_overload_reached_per_layout_family(run_sweep, monkeypatch):
    """``aten.add.Scalar`` is reached only by searched cases: composed, some of them are laid out; the coverage says so
    per family, where before it counted the overload once, reached by contiguous calls alone."""
    families = dict(next(o for o in run_sweep(pointed("add")).coverage.ops if o.op == "add").families)
    assert {"contiguous", "strides", "offset"} <= set(families["aten.add.Scalar"])
    monkeypatch.setattr(compose, "levels", lambda *args: [()])
    alone = run_sweep(pointed("add")).coverage
    assert dict(next(o for o in alone.ops if o.op == "add").families)["aten.add.Scalar"] == ("contiguous",)
    assert alone.by_family()["contiguous"] >= alone.by_family().get("strides", 0)
