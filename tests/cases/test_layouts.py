"""cases/layouts.py: each layout keeps the values, lays them out as documented, and poisons the rest.

Strides are checked against what torch itself lays out fresh (``torch.empty`` in a
memory format, or a permutation of a contiguous tensor), not against a copy of the
layout code. The storage behind every view is read back whole, so the gaps and
guard elements are checked element by element.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest
import torch

from torchsleuth.cases import layouts
from torchsleuth.cases.records import LAYOUTS

SHAPES = [
    (), (1,), (5,), (1, 1), (3, 1), (1, 4), (2, 3), (4, 3), (2, 3, 4), (1, 3, 1), (3, 1, 2),
    (2, 1, 3, 3), (2, 3, 4, 5), (2, 3, 1, 1), (1, 3, 2, 2), (2, 2, 1, 3),
    (1, 2, 3, 2, 2), (2, 3, 2, 3, 2), (2, 1, 1, 2, 1), (1, 2, 1, 1, 3), (2, 2, 2, 1, 1),
]
EMPTY_SHAPES = [(0,), (0, 3), (3, 0, 2)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64]


def sample(shape, dtype, seed=0) -> torch.Tensor:
    """Values without NaN, with no poison value in them, distinct where the dtype allows."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g)).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, generator=g, dtype=dtype)


def storage(t: torch.Tensor) -> torch.Tensor:
    """Every element of ``t``'s storage, as a 1-D tensor of its dtype."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.new_empty(0).set_(t.untyped_storage(), 0, (n,), (1,))


def is_poison(values: torch.Tensor) -> torch.Tensor:
    if values.dtype.is_floating_point or values.dtype.is_complex:
        return torch.isnan(values)
    return values == layouts.poison(values.dtype)


def covered(t: torch.Tensor) -> set[int]:
    """Storage indices the view reaches."""
    n = t.untyped_storage().nbytes() // t.element_size()
    if t.numel() == 0:
        return set()
    return set(torch.arange(n).as_strided(t.shape, t.stride(), t.storage_offset()).reshape(-1).tolist())


def expected_stride(layout: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a fresh tensor laid out as ``layout`` describes."""
    n = len(shape)
    if layout.endswith("_offset"):  # the same strides as the layout without the offset
        return expected_stride(layout.removesuffix("_offset"), shape)
    if layout in ("contiguous", "offset"):
        return torch.empty(shape).stride()
    if layout == "transposed":  # the last two dims swapped in memory
        return torch.empty(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2).stride()
    if layout == "permuted":  # every dim reversed in memory
        return torch.empty(shape[::-1]).permute(*reversed(range(n))).stride()
    if layout == "strided":  # step 2 in every dim of size > 1
        base = torch.empty([s * 2 if s > 1 else s for s in shape])
        return base[tuple(slice(None, None, 2 if s > 1 else 1) for s in shape)].stride()
    if layout == "channels_last":
        return torch.empty(shape, memory_format=torch.channels_last).stride()
    if layout == "channels_last_3d":
        return torch.empty(shape, memory_format=torch.channels_last_3d).stride()
    if layout == "size1_strides":
        return tuple(layouts.SIZE1_STRIDE if s == 1 else st for s, st in zip(shape, torch.empty(shape).stride()))
    raise AssertionError(layout)


GEOMETRIC = ("contiguous", "transposed", "permuted", "strided", "offset", "channels_last", "channels_last_3d", "size1_strides",
             "strided_offset", "transposed_offset", "channels_last_offset")


def test_layout_names_agree():
    assert set(GEOMETRIC) | {"expanded", "expanded_size1", "empty"} == set(LAYOUTS) == set(layouts.DESCRIPTIONS)
    assert layouts.READ_ONLY <= set(LAYOUTS) and layouts.VALUE_CHANGING <= set(LAYOUTS) and layouts.JOINT_ONLY <= set(LAYOUTS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", GEOMETRIC)
def test_geometric_layouts_keep_values_and_lay_them_out_as_documented(layout, dtype):
    tried = 0
    for shape in SHAPES:
        t = sample(shape, dtype)
        if not layouts.applies(layout, t):
            continue
        tried += 1
        out = layouts.apply(layout, t)
        where = f"{layout} of {shape} {dtype}"
        assert out.shape == t.shape and out.dtype == t.dtype and out.device == t.device, where
        assert torch.equal(out, t), where
        assert out.stride() == expected_stride(layout, shape), where
        assert out.storage_offset() == (layouts.OFFSET if layout.endswith("offset") else 0), where
        assert not out.requires_grad, where
        # a storage of its own, never the input's
        assert out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr(), where
    assert tried >= 3, f"{layout}: too few shapes apply"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", GEOMETRIC)
def test_everything_outside_the_view_is_poison(layout, dtype):
    for shape in SHAPES:
        t = sample(shape, dtype)
        if not layouts.applies(layout, t):
            continue
        out = layouts.apply(layout, t)
        where = f"{layout} of {shape} {dtype}"
        whole = storage(out)
        reached = covered(out)
        first, last = min(reached), max(reached)
        # the storage is exactly: [offset poison] view [GUARD poison]
        assert first == out.storage_offset(), where
        assert len(whole) == last + 1 + layouts.GUARD, where
        outside = torch.tensor([i not in reached for i in range(len(whole))])
        assert bool(is_poison(whole[outside]).all()), f"{where}: {whole[outside]}"
        assert bool(is_poison(whole[-layouts.GUARD:]).all()), where
        if layout == "offset":
            assert bool(is_poison(whole[: layouts.OFFSET]).all()), where
        if layout == "strided":
            # there are gaps to poison: every dim of size > 1 skips every other element
            assert len(reached) < last + 1 - first, where


def test_poison_values():
    assert math.isnan(layouts.poison(torch.float32)) and math.isnan(layouts.poison(torch.bfloat16)) and math.isnan(layouts.poison(torch.complex64))
    assert layouts.poison(torch.bool) is True
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        value = layouts.poison(dtype)
        assert value == torch.iinfo(dtype).max - 3
        assert torch.tensor(value, dtype=dtype).item() == value  # representable


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64], ids=str)
def test_poison_fills_gaps_for_every_dtype(dtype):
    out = layouts.apply("strided", sample((3, 4), dtype))
    gaps = storage(out)[torch.tensor([i not in covered(out) for i in range(storage(out).numel())])]
    assert gaps.numel() > layouts.GUARD
    if dtype.is_floating_point or dtype.is_complex:
        assert bool(torch.isnan(gaps).all())
    else:
        assert bool((gaps == layouts.poison(dtype)).all())


def test_strided_has_step_two_in_dims_larger_than_one():
    t = sample((3, 1, 4), torch.float32)
    out = layouts.apply("strided", t)
    # element (i, 0, k) sits at 2*i*(2*4) + 2*k in a (6, 1, 8) base
    assert out.stride() == (16, 8, 2)
    assert storage(out)[16 + 2 * 3].item() == t[1, 0, 3].item()


def test_offset_breaks_alignment():
    assert layouts.OFFSET % 2 == 1
    out = layouts.apply("offset", sample((4, 4), torch.float32))
    assert out.storage_offset() == layouts.OFFSET
    assert out.data_ptr() % 16 != 0


def test_size1_strides_only_changes_size1_dims():
    t = sample((2, 1, 3, 1), torch.float32)
    out = layouts.apply("size1_strides", t)
    assert out.stride() == (3, layouts.SIZE1_STRIDE, 1, layouts.SIZE1_STRIDE)
    assert out.is_contiguous() and torch.equal(out, t)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_expanded_repeats_the_first_slice_of_the_first_nontrivial_dim(dtype):
    tried = 0
    for shape in SHAPES:
        t = sample(shape, dtype, seed=1)
        if not layouts.applies("expanded", t):
            continue
        tried += 1
        dim = next(d for d, s in enumerate(shape) if s > 1)
        out = layouts.apply("expanded", t)
        where = f"expanded of {shape} {dtype}"
        assert out.shape == t.shape and out.dtype == dtype, where
        assert out.stride()[dim] == 0, where
        assert all(st != 0 for d, st in enumerate(out.stride()) if d != dim and shape[d] > 1), where
        first = t.narrow(dim, 0, 1)
        assert torch.equal(out, first.expand(shape)), where
        whole = storage(out)
        assert len(whole) == first.numel() + layouts.GUARD, where
        assert bool(is_poison(whole[-layouts.GUARD:]).all()), where
        assert torch.equal(whole[: first.numel()], first.reshape(-1)), where
    assert tried >= 10


def test_expanded_changes_values_and_is_read_only():
    t = torch.arange(6.0).reshape(2, 3)
    out = layouts.apply("expanded", t)
    assert out.tolist() == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    with pytest.raises(RuntimeError):
        out.add_(1)  # why a written tensor never gets it
    # size-1 leading dims are skipped: the first dim of size > 1 is expanded
    t = torch.arange(6.0).reshape(1, 2, 3)
    assert layouts.apply("expanded", t).stride() == (3, 0, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_sets_the_leading_dim_to_zero(dtype):
    for shape in SHAPES:
        t = sample(shape, dtype)
        if not layouts.applies("empty", t):
            continue
        out = layouts.apply("empty", t)
        where = f"empty of {shape} {dtype}"
        assert out.shape == (0,) + shape[1:] and out.dtype == dtype and out.numel() == 0, where
        whole = storage(out)
        assert len(whole) == layouts.GUARD and bool(is_poison(whole).all()), where


def test_layouts_accept_non_contiguous_inputs():
    t = sample((4, 6), torch.float32).t()[::2]  # shape (3, 4), strides (2, 6)
    assert not t.is_contiguous() and t.shape == (3, 4)
    for layout in GEOMETRIC:
        if layouts.applies(layout, t):
            out = layouts.apply(layout, t)
            assert torch.equal(out, t) and out.stride() == expected_stride(layout, tuple(t.shape)), layout


def test_the_input_is_left_alone():
    t = sample((2, 3, 4), torch.float32)
    before = t.clone()
    for layout in LAYOUTS:
        if layouts.applies(layout, t, written=True):
            layouts.apply(layout, t).fill_(7.0)
    assert torch.equal(t, before) and t.is_contiguous()


# --- applies -------------------------------------------------------------------------------


def torch_channels_last_differs(shape, memory_format) -> bool:
    return not torch.empty(shape, memory_format=memory_format).is_contiguous()


def expected_applies(layout: str, shape: tuple[int, ...]) -> bool:
    n, numel = len(shape), math.prod(shape)
    if layout == "contiguous":
        return True
    if numel == 0:
        return False
    if layout.endswith("_offset"):  # wherever the layout without the offset applies
        return expected_applies(layout.removesuffix("_offset"), shape)
    return {
        "expanded_size1": any(s > 1 for s in shape) and any(s == 1 for s in shape),
        "transposed": n >= 2 and shape[-1] > 1 and shape[-2] > 1,
        "permuted": n >= 3 and not torch.empty(shape[::-1]).permute(*reversed(range(n))).is_contiguous(),
        "strided": numel > 1,
        "offset": True,
        "expanded": any(s > 1 for s in shape),
        "channels_last": n == 4 and torch_channels_last_differs(shape, torch.channels_last),
        "channels_last_3d": n == 5 and torch_channels_last_differs(shape, torch.channels_last_3d),
        "size1_strides": any(s == 1 for s in shape),
        "empty": n >= 1,
    }[layout]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_applies_follows_its_rules(layout):
    for shape in SHAPES + EMPTY_SHAPES + [(2, 2, 2, 2), (1, 3, 2, 2), (2, 1, 2, 2), (2, 3, 1, 1), (1, 1, 1, 1, 1)]:
        t = torch.zeros(shape)
        assert layouts.applies(layout, t) == expected_applies(layout, shape), f"{layout} on {shape}"


@pytest.mark.parametrize("layout", ["transposed", "permuted", "strided", "offset", "channels_last", "channels_last_3d"])
def test_applies_means_the_layout_differs_from_contiguous(layout):
    """Where a layout applies the result is not contiguous at offset 0; nowhere else is it offered."""
    for shape in SHAPES:
        t = torch.zeros(shape)
        if layouts.applies(layout, t):
            out = layouts.apply(layout, t)
            assert not out.is_contiguous() or out.storage_offset() != 0, f"{layout} on {shape} is a no-op"


def test_written_tensors_never_get_read_only_layouts():
    t = torch.zeros(2, 3)
    assert layouts.applies("expanded", t) and not layouts.applies("expanded", t, written=True)
    for layout in set(LAYOUTS) - layouts.READ_ONLY:
        assert layouts.applies(layout, t, written=True) == layouts.applies(layout, t), layout


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="unknown layout"):
        layouts.applies("diagonal", torch.zeros(2, 2))
    with pytest.raises(ValueError, match="unknown layout"):
        layouts.apply("diagonal", torch.zeros(2, 2))


# --- contiguity helpers, against torch ---------------------------------------------------


def random_shapes(rng: random.Random, count: int, *, sizes=(1, 2, 3, 4)):
    for _ in range(count):
        yield tuple(rng.choice(sizes) for _ in range(rng.randint(0, 5)))


def test_contiguous_strides_match_torch():
    rng = random.Random(0)
    for shape in itertools.chain(SHAPES, EMPTY_SHAPES, random_shapes(rng, 300, sizes=(0, 1, 2, 3, 5))):
        assert layouts.contiguous_strides(shape) == torch.empty(shape).stride(), shape


def random_strides(rng: random.Random, shape) -> tuple[int, ...]:
    contiguous = list(layouts.contiguous_strides(shape))
    how = rng.randrange(4)
    if how == 0:
        return tuple(contiguous)
    if how == 1:  # contiguous, with size-1 dims given any stride
        return tuple(rng.randint(0, 9) if s == 1 else st for s, st in zip(shape, contiguous))
    if how == 2:  # a permutation of the contiguous strides
        rng.shuffle(contiguous)
        return tuple(contiguous)
    return tuple(rng.randint(0, 13) for _ in shape)


def torch_is_contiguous(shape, stride) -> bool:
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0)
    return torch.empty(max(extent, 1)).as_strided(shape, stride).is_contiguous()


def test_is_contiguous_matches_torch_on_random_shapes():
    rng = random.Random(1)
    for shape in random_shapes(rng, 2000):
        stride = random_strides(rng, shape)
        assert layouts.is_contiguous(shape, stride) == torch_is_contiguous(shape, stride), (shape, stride)


def test_is_contiguous_matches_torch_on_empty_shapes():
    rng = random.Random(2)
    for shape in random_shapes(rng, 500, sizes=(0, 1, 2, 3)):
        stride = random_strides(rng, shape)
        assert layouts.is_contiguous(shape, stride) == torch_is_contiguous(shape, stride), (shape, stride)


# --- the table: each record says what its layout does, and is all a new layout needs -------


def test_the_old_names_are_views_of_the_table():
    names = tuple(layout.name for layout in layouts.ALL)
    assert LAYOUTS == names and tuple(layouts.DESCRIPTIONS) == names
    assert layouts.READ_ONLY == {layout.name for layout in layouts.ALL if layout.read_only}
    assert layouts.VALUE_CHANGING == {layout.name for layout in layouts.ALL if layout.value_changing}
    assert layouts.JOINT_ONLY == {layout.name for layout in layouts.ALL if layout.joint_only}
    assert all(layouts.by_name(name).name == name for name in names)
    assert layouts.find("diagonal") is None


def shows_property(property_class: str, out: torch.Tensor) -> bool:
    """Whether the laid-out tensor has the property its class names (report.groups groups by it)."""
    return {
        "contiguous": out.is_contiguous() and out.storage_offset() == 0,
        "strides": not out.is_contiguous() or any(st != c for s, st, c in zip(out.shape, out.stride(), layouts.contiguous_strides(out.shape)) if s == 1),
        "offset": out.is_contiguous() and out.storage_offset() != 0,
        "strides+offset": not out.is_contiguous() and out.storage_offset() != 0,
        "stride 0+strides": any(st == 0 and s > 1 for s, st in zip(out.shape, out.stride()))
        and any(st == layouts.SIZE1_STRIDE and s == 1 for s, st in zip(out.shape, out.stride())),
        "stride 0": any(st == 0 and s > 1 for s, st in zip(out.shape, out.stride())),
        "empty": out.numel() == 0,
    }[property_class]


@pytest.mark.parametrize("layout", [layout.name for layout in layouts.ALL])
def test_every_record_agrees_with_what_its_layout_does(layout):
    from torchsleuth.report import groups
    from torchsleuth.shrink import diagnose

    record = layouts.by_name(layout)
    assert record.description and record.phrase
    assert groups.property_class(layout) == record.property and diagnose._phrase(layout) == record.phrase
    changed_values = tried = 0
    for shape in SHAPES:
        t = sample(shape, torch.float32)
        assert layouts.applies(layout, t) == (layout == layouts.CONTIGUOUS or record.fits(shape)), shape
        if not layouts.applies(layout, t):
            continue
        tried += 1
        out = layouts.apply(layout, t)
        where = f"{layout} of {shape}"
        assert shows_property(record.property, out), where
        # joint-only layouts change the shape (why they are never given to one argument alone)
        assert (out.shape != t.shape) == record.joint_only, where
        changed_values += out.shape != t.shape or not torch.equal(out, t)
        # read-only layouts are refused for written tensors, and rightly: torch will not write into them
        assert layouts.applies(layout, t, written=True) != record.read_only, where
        if record.read_only:
            with pytest.raises(RuntimeError):
                out.add_(1)
        else:
            out.add_(1)
    assert tried >= 3, f"{layout}: too few shapes apply"
    # a layout that keeps values keeps them everywhere; one that changes them does somewhere
    assert (changed_values > 0) == record.value_changing


def transposed_strides(shape):
    """The last two dims swapped in memory, worked out apart from the layout code."""
    physical = layouts.contiguous_strides(shape[:-2] + (shape[-1], shape[-2]))
    return physical[:-2] + (physical[-1], physical[-2])


# a layout the table does not have (every dim reversed in memory, at an offset; 2-D: transposed at an offset)
REVERSED_AT_OFFSET = layouts.Layout(
    name="reversed_offset", description=f"every dim reversed in memory, at storage offset {layouts.OFFSET}",
    fits=lambda shape: len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1,
    lay_out=layouts.geometric(transposed_strides, offset=layouts.OFFSET),
    property="strides at an offset", phrase="reversed at a storage offset",
)


def test_a_layout_only_in_the_table_is_swept(monkeypatch):
    from torchsleuth.cases import plan, select
    from torchsleuth.cases.records import Case
    from torchsleuth.judge.records import Finding, Outcome
    from torchsleuth.report import groups
    from torchsleuth.run.records import CallSpec, TensorSpec
    from torchsleuth.shrink import diagnose

    monkeypatch.setattr(layouts, "ALL", layouts.ALL + (REVERSED_AT_OFFSET,))
    name = REVERSED_AT_OFFSET.name
    # chosen by default and by name
    assert name in select.resolve_layouts(None) and select.resolve_layouts(name) == ("contiguous", name)
    # laid out as its record says
    out = layouts.apply(name, torch.arange(6.0).reshape(2, 3))
    assert out.stride() == (1, 2) and out.storage_offset() == layouts.OFFSET and out.tolist() == [[0, 1, 2], [3, 4, 5]]
    # planned, alone and jointly, for the tensors it fits only
    tensors = {"input": torch.zeros(2, 3), "other": torch.zeros(3, 3), "alpha": torch.zeros(3)}
    planned = {c.layouts for c in plan.cases_for(op="add", variant="inplace", dtype="float32", device="cpu", sample=0,
                                                 tensors=tensors, layouts=select.resolve_layouts(None), written=frozenset({"input"}))}
    assert {((p, name),) for p in ("input", "other")} | {(("input", name), ("other", name))} <= planned
    assert not any(("alpha", name) in layouts_ for layouts_ in planned)
    # grouped by its property class
    case = Case(op="add", variant="inplace", dtype="float32", device="cpu", sample=0, layouts=(("input", name),))
    finding = Finding(id="f-1", kind="dropped_write", op="aten.add_.Tensor", opinfo="add", variant="inplace", dtype="float32",
                      device="cpu", reference="layout", case_id=case.id, layouts=case.layouts, summary="",
                      call=CallSpec(function="torch.Tensor.add_", args_src='T["other"]', kwargs_src="", variant="inplace",
                                    tensors=tuple(TensorSpec(path=p, shape=s, stride=layouts.contiguous_strides(s), storage_offset=0,
                                                             storage_numel=math.prod(s), dtype="float32", device="cpu", layout="contiguous")
                                                  for p, s in (("input", (2, 3)), ("other", (2, 3))))))
    assert groups.triggers(finding) == (("input", "strides at an offset"),)
    assert groups.group([finding])[0].id != groups.group([dataclasses.replace(finding, case_id=case.id.replace(name, "transposed"))])[0].id
    # tried as a neighbour in a diagnosis, and named by its phrase: only it fails here

    def run(c: Case) -> Outcome:
        fails = c.layout_of("input") == name
        return Outcome(case=c, status="finding" if fails else "pass", findings=(finding,) if fails else ())

    found = diagnose.diagnose("g-1", finding, finding, run, dtypes=())
    assert found.triggers[0].failing == (name,) and "transposed" in found.triggers[0].passing
    assert "when self is reversed at a storage offset; contiguous self, or self transposed or" in found.sentence


# --- combined layouts: two properties at once ---------------------------------------


def _neg_wrong_when_strided_at_an_offset(x):
    """``neg`` that ignores the storage offset, but only on its strided path: each property alone is fine."""
    out = torch.empty(x.shape, dtype=x.dtype)
    torch.ops.aten.neg.out(x, out=out)
    if x.dim() and x.storage_offset() != 0 and x.stride(-1) == 2:
        shifted = x.as_strided(x.shape, x.stride(), 0)  # read from the start of the storage
        torch.ops.aten.neg.out(shifted, out=out)
    return out


def test_a_bug_that_needs_strided_and_offset_at_once_is_found_and_both_are_named(plant, run_sweep):
    from torchsleuth import SweepConfig, resolve_ops

    plant("neg", _neg_wrong_when_strided_at_an_offset)
    config = SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), workers=0)  # every layout
    result = run_sweep(config)
    assert result.findings, result.statuses
    assert {layout for f in result.findings for _, layout in f.layouts} == {"strided_offset"}
    diagnosed = [g.diagnosis for g in result.groups if g.diagnosis]
    assert diagnosed and all("strided (gaps between elements) at a storage offset" in d for d in diagnosed), diagnosed
    # strided alone and at an offset alone are judged and clean: the pair is the trigger
    plain = run_sweep(SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), workers=0,
                                  layouts=("contiguous", "strided", "offset")))
    assert not plain.findings and plain.statuses.get("pass", 0) >= 3  # contiguous, strided, at an offset


COMBINED = [layout.name for layout in layouts.ALL if layout.parts]


def test_the_combined_layouts_name_their_parts():
    assert COMBINED == ["strided_offset", "transposed_offset", "channels_last_offset", "expanded_size1"]
    assert layouts.parts_of("transposed_offset") == ("transposed", "offset")
    # a simple layout is its own one part (what the shrinker's cost counts), and so is a name of no layout here
    assert layouts.parts_of("transposed") == ("transposed",) and layouts.parts_of("sliced") == ("sliced",)


@pytest.mark.parametrize("layout", COMBINED)
def test_a_combined_layout_is_its_parts_at_once(layout):
    record = layouts.by_name(layout)
    parts = [layouts.by_name(name) for name in record.parts]  # each part is a layout of the table
    assert len(parts) == 2 and all(not part.parts for part in parts) and layouts.CONTIGUOUS not in record.parts
    # the flags are the parts': read-only, value-changing or joint-only if any part is
    assert record.read_only == any(part.read_only for part in parts)
    assert record.value_changing == any(part.value_changing for part in parts)
    assert record.joint_only == any(part.joint_only for part in parts)
    # its property class names both (grouping keys on it; a summary says each)
    assert record.property == "+".join(part.property for part in parts)
    tried = 0
    for shape in SHAPES:
        t = sample(shape, torch.float32)
        for written in (False, True):
            # wherever it fits, each part fits alone: the shrinker may always try a part in its place
            if layouts.applies(layout, t, written=written):
                assert all(layouts.applies(part.name, t, written=written) for part in parts), (shape, written)
        if not layouts.applies(layout, t):
            continue
        tried += 1
        out, alone = layouts.apply(layout, t), [layouts.apply(part.name, t) for part in parts]
        where = f"{layout} of {shape}"
        # each dim's stride and the storage offset come from one of its parts, and it is neither part alone
        assert all(st in {a.stride()[d] for a in alone} for d, st in enumerate(out.stride())), where
        assert out.storage_offset() == max(a.storage_offset() for a in alone), where
        assert all((out.stride(), out.storage_offset()) != (a.stride(), a.storage_offset()) for a in alone), where
        # the values are those of its value-changing part, if it has one
        assert torch.equal(out, next((a for a, part in zip(alone, parts) if part.value_changing), t)), where
    assert tried >= 3, f"{layout}: too few shapes apply"
