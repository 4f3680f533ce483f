"""Memory layouts: pure transforms of one tensor into the same values laid out otherwise.

Design note. A layout is one ``Layout`` record in ``ALL``: its name, its
--help line, which tensors it fits, how it lays one out, and what the later
stages say about it (the property class a report groups by, the phrase a
diagnosis uses). Adding a layout is adding a record; the sweep, the planner,
grouping and diagnosis all read the table.

Each layout is a function of a contiguous tensor that returns a new tensor
with the same shape and values (two exceptions below) whose strides, storage
offset or storage differ. Every transformed tensor lives in a storage of its
own that is filled with a poison value first, so that

* gaps between elements (``strided``) read as NaN or a sentinel: a kernel that
  reads outside the view puts the poison into its result;
* a few guard elements follow the view (and precede it, for ``offset``): a
  kernel that writes outside the view changes them, which the run stage sees by
  comparing the whole storage before and after the call.

Only ``offset`` and the combined layouts (``*_offset``) move the view away
from the start of its storage. A layout names one property, so that a
failure can be pinned on it, except the combined ones, which name two: real
views combine them (``x[1:, ::2]`` is strided at an offset), and a kernel
can get the pair wrong while each alone is fine; a diagnosis then names
both. A combined layout's record lists its ``parts`` (the simple layouts it
combines) and its property class is theirs joined by ``+``: the shrinker
tries each part alone, so a bug one part already triggers is reported (and
grouped) as that part's, and only a bug of the pair keeps the pair.

The two transforms that change values: ``expanded`` repeats the first slice
along its first non-trivial dim with stride 0 (inputs only: PyTorch refuses
to write into it), and ``empty`` sets the leading dim to zero. The reference
for a case is always computed from contiguous copies of the transformed
tensors, so both are judged like the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

# Elements of poison after every view (and before it, for "offset").
GUARD = 4
# The storage offset of "offset": odd, so that no element size below 16
# bytes keeps the 16-byte alignment vector loads assume.
OFFSET = 3
# The stride "size1_strides" gives to dims of size 1: any value is valid there,
# and kernels that derive contiguity from strides alone trip over a large one.
SIZE1_STRIDE = 1_000_003

Shape = tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    name: str
    description: str  # its line in --help
    # Whether it gives a tensor of this shape a layout other than contiguous.
    # Asked only about tensors with elements: every layout but contiguous
    # leaves an empty tensor alone.
    fits: Callable[[Shape], bool]
    # The tensor (any layout) re-laid-out, in a fresh poisoned storage.
    lay_out: Callable[[torch.Tensor], torch.Tensor]
    # What it gives an argument, for grouping findings (report.groups):
    # layouts of one class usually reach the same wrong code path. A combined
    # layout's is its parts' classes joined by "+".
    property: str
    # What it says about an argument in a diagnosis, after "when self is".
    phrase: str
    # A written tensor (in-place self, out=) may not take it.
    read_only: bool = False
    # It changes values, not only where they sit: cases using it get
    # references of their own.
    value_changing: bool = False
    # Given to every tensor argument together, never one at a time: changing
    # one argument's shape alone would only break broadcasting.
    joint_only: bool = False
    # A combined layout: the simple layouts whose properties it has at once,
    # each a layout of the table that fits wherever it does (the shrinker
    # tries each alone, so a bug one of them triggers is reported as that
    # one's). Empty for a simple layout.
    parts: tuple[str, ...] = ()


def poison(dtype: torch.dtype):
    """A value that shows up when read: NaN, or an unlikely integer."""
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max - 3


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _ordered_strides(shape, order) -> tuple[int, ...]:
    """Strides that lay ``shape`` out with ``order[0]`` outermost and ``order[-1]`` innermost."""
    physical = contiguous_strides([shape[d] for d in order])
    strides = [0] * len(shape)
    for position, dim in enumerate(order):
        strides[dim] = physical[position]
    return tuple(strides)


def _place(values: torch.Tensor, shape, stride, offset: int, extent: int) -> torch.Tensor:
    """Values copied into a fresh poisoned storage of ``offset + extent + GUARD`` elements."""
    storage = torch.full((offset + extent + GUARD,), poison(values.dtype), dtype=values.dtype, device=values.device)
    view = storage.as_strided(tuple(shape), tuple(stride), offset)
    if values.numel():
        view.copy_(values)
    return view.detach()


def _extent(shape, stride) -> int:
    """Elements from the first to one past the last element the view touches."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((size - 1) * st for size, st in zip(shape, stride))


def geometric(strides: Callable[[Shape], tuple[int, ...]], *, offset: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """The ``lay_out`` of a layout that only moves elements: these strides, at this storage offset."""

    def lay_out(t: torch.Tensor) -> torch.Tensor:
        shape = tuple(t.shape)
        stride = strides(shape)
        return _place(t, shape, stride, offset, _extent(shape, stride))

    return lay_out


def _orders_agree(shape, order) -> bool:
    """True if laying ``shape`` out in ``order`` is still contiguous (size-1 dims move freely)."""
    return is_contiguous(shape, _ordered_strides(shape, order))


def is_contiguous(shape, stride) -> bool:
    """PyTorch's rule: row-major strides, where dims of size 1 may have any stride."""
    if 0 in shape:
        return True  # no elements: every stride is as good as another
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


# --- the layouts, each a pair: which shapes it fits, its strides or its transform ---------


def _transposed_strides(shape: Shape) -> tuple[int, ...]:
    n = len(shape)
    return _ordered_strides(shape, list(range(n - 2)) + [n - 1, n - 2])


def _reversed_strides(shape: Shape) -> tuple[int, ...]:
    return _ordered_strides(shape, list(range(len(shape)))[::-1])


def _permuted_fits(shape: Shape) -> bool:
    n = len(shape)
    return n >= 3 and sum(s > 1 for s in shape) >= 2 and not _orders_agree(shape, list(range(n))[::-1])


def _gapped_strides(shape: Shape) -> tuple[int, ...]:
    step = [2 if s > 1 else 1 for s in shape]
    physical = contiguous_strides([s * k for s, k in zip(shape, step)])
    return tuple(p * k for p, k in zip(physical, step))


def _size1_strides(shape: Shape) -> tuple[int, ...]:
    return tuple(SIZE1_STRIDE if s == 1 else st for s, st in zip(shape, contiguous_strides(shape)))


def _expand(t: torch.Tensor) -> torch.Tensor:
    """The first slice along the first dim of size > 1, expanded back with stride 0."""
    shape = tuple(t.shape)
    dim = next(d for d, s in enumerate(shape) if s > 1)
    row = t.narrow(dim, 0, 1)
    return _place(row, row.shape, contiguous_strides(row.shape), 0, row.numel()).expand(shape).detach()


def _expand_size1(t: torch.Tensor) -> torch.Tensor:
    """``_expand``'s view, its size-1 dims given stride ``SIZE1_STRIDE`` (any stride is valid there)."""
    expanded = _expand(t)
    stride = tuple(SIZE1_STRIDE if size == 1 else st for size, st in zip(expanded.shape, expanded.stride()))
    return expanded.as_strided(expanded.shape, stride, expanded.storage_offset())


def _empty(t: torch.Tensor) -> torch.Tensor:
    """No elements: the leading dim set to 0 (the strides stay those of the full shape)."""
    shape = tuple(t.shape)
    empty_shape = (0,) + shape[1:]
    return _place(t.new_empty(empty_shape), empty_shape, contiguous_strides(shape), 0, 0)


CONTIGUOUS = "contiguous"  # the baseline every other layout is judged against

ALL: tuple[Layout, ...] = (
    Layout(name=CONTIGUOUS, description="row-major, offset 0 (guard values after the view)",
           fits=lambda shape: True, lay_out=geometric(contiguous_strides), property="contiguous", phrase="contiguous"),
    Layout(name="transposed", description="last two dims swapped in memory (2-D and up)",
           fits=lambda shape: len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1,
           lay_out=geometric(_transposed_strides), property="strides", phrase="transposed"),
    Layout(name="permuted", description="all dims reversed in memory (3-D and up)",
           fits=_permuted_fits, lay_out=geometric(_reversed_strides), property="strides", phrase="permuted"),
    Layout(name="strided", description="every dim of size > 1 sliced with step 2; the gaps poisoned",
           fits=lambda shape: math.prod(shape) > 1, lay_out=geometric(_gapped_strides),
           property="strides", phrase="strided (gaps between elements)"),
    Layout(name="offset", description=f"storage offset {OFFSET} elements, breaking 16-byte alignment; guards before",
           fits=lambda shape: True, lay_out=geometric(contiguous_strides, offset=OFFSET),
           property="offset", phrase="at a storage offset"),
    Layout(name="expanded", description="first non-trivial dim expanded from one slice, stride 0 (inputs only)",
           fits=lambda shape: any(s > 1 for s in shape), lay_out=_expand, property="stride 0", phrase="expanded (stride 0)",
           read_only=True, value_changing=True),
    Layout(name="channels_last", description="NHWC memory order (4-D)",
           fits=lambda shape: len(shape) == 4 and not _orders_agree(shape, [0, 2, 3, 1]),
           lay_out=geometric(lambda shape: _ordered_strides(shape, [0, 2, 3, 1])), property="strides", phrase="channels_last"),
    Layout(name="channels_last_3d", description="NDHWC memory order (5-D)",
           fits=lambda shape: len(shape) == 5 and not _orders_agree(shape, [0, 2, 3, 4, 1]),
           lay_out=geometric(lambda shape: _ordered_strides(shape, [0, 2, 3, 4, 1])), property="strides", phrase="channels_last_3d"),
    Layout(name="size1_strides", description=f"dims of size 1 get stride {SIZE1_STRIDE}",
           fits=lambda shape: any(s == 1 for s in shape), lay_out=geometric(_size1_strides),
           property="strides", phrase="given unusual strides on size-1 dims"),
    # two properties at once, as real views have them (x[1:, ::2], x.t()[1:], an NHWC slice):
    # each of their properties alone is fine in many kernels that get the pair wrong
    Layout(name="strided_offset", description=f"strided (step 2, gaps poisoned) at storage offset {OFFSET}, like x[1:, ::2]",
           fits=lambda shape: math.prod(shape) > 1, lay_out=geometric(_gapped_strides, offset=OFFSET),
           property="strides+offset", phrase="strided (gaps between elements) at a storage offset",
           parts=("strided", "offset")),
    Layout(name="transposed_offset", description=f"last two dims swapped in memory, at storage offset {OFFSET}",
           fits=lambda shape: len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1,
           lay_out=geometric(_transposed_strides, offset=OFFSET), property="strides+offset", phrase="transposed at a storage offset",
           parts=("transposed", "offset")),
    Layout(name="channels_last_offset", description=f"NHWC memory order (4-D) at storage offset {OFFSET}",
           fits=lambda shape: len(shape) == 4 and not _orders_agree(shape, [0, 2, 3, 1]),
           lay_out=geometric(lambda shape: _ordered_strides(shape, [0, 2, 3, 1]), offset=OFFSET),
           property="strides+offset", phrase="channels_last at a storage offset", parts=("channels_last", "offset")),
    Layout(name="expanded_size1", description=f"expanded (stride 0) with stride {SIZE1_STRIDE} on its size-1 dims (inputs only)",
           fits=lambda shape: any(s > 1 for s in shape) and any(s == 1 for s in shape), lay_out=_expand_size1,
           property="stride 0+strides", phrase="expanded (stride 0) with unusual strides on size-1 dims", read_only=True, value_changing=True,
           parts=("expanded", "size1_strides")),
    Layout(name="empty", description="leading dim set to 0 (every tensor argument at once)",
           fits=lambda shape: len(shape) >= 1, lay_out=_empty, property="empty", phrase="empty",
           value_changing=True, joint_only=True),
)


def find(name: str) -> Layout | None:
    """The layout called ``name``; None for a name of no layout here (an optimizer's, a placement)."""
    # ALL is read on every call, not indexed once: a layout added to it is found at once.
    return next((layout for layout in ALL if layout.name == name), None)


def parts_of(name: str) -> tuple[str, ...]:
    """The simple layouts ``name`` combines; a simple layout (or a name of no layout here) is its own one part."""
    record = find(name)
    return record.parts if record is not None and record.parts else (name,)


def by_name(name: str) -> Layout:
    found = find(name)
    if found is None:
        raise ValueError(f"unknown layout {name!r}")
    return found


# Views of the table, under the names the other stages have always read.
DESCRIPTIONS = {layout.name: layout.description for layout in ALL}
READ_ONLY = frozenset(layout.name for layout in ALL if layout.read_only)
VALUE_CHANGING = frozenset(layout.name for layout in ALL if layout.value_changing)
JOINT_ONLY = frozenset(layout.name for layout in ALL if layout.joint_only)


def families(assignment) -> tuple[str, ...]:
    """The layout families a case's assignment (``((path, layout), ...)``) reaches a kernel through: the property of
    each simple layout it uses (a combined one counts as its parts), or ``("contiguous",)`` for none."""
    found = {find(part).property for _, name in assignment for part in parts_of(name) if find(part) is not None}
    found.discard("contiguous")
    return tuple(sorted(found)) or ("contiguous",)


def applies(layout: str, t: torch.Tensor, *, written: bool = False) -> bool:
    """Whether ``layout`` gives ``t`` a layout that differs from contiguous."""
    record = find(layout)
    if written and record is not None and record.read_only:
        return False
    if layout == CONTIGUOUS:
        return True
    if t.numel() == 0:
        return False  # nothing to lay out (an unknown name included, as it always was)
    return by_name(layout).fits(tuple(t.shape))


def apply(layout: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` (any layout) re-laid-out as ``layout``, in a fresh poisoned storage."""
    return by_name(layout).lay_out(t)
