"""Memory layouts: pure transforms of one tensor into the same values laid out otherwise.

Design note. Each layout is a function of a contiguous tensor that returns a
new tensor with the same shape and values (two exceptions below) whose
strides, storage offset or storage differ. Every transformed tensor lives in
a storage of its own that is filled with a poison value first, so that

* gaps between elements (``strided``) read as NaN or a sentinel: a kernel that
  reads outside the view puts the poison into its result;
* a few guard elements follow the view (and precede it, for ``offset``): a
  kernel that writes outside the view changes them, which the run stage sees by
  comparing the whole storage before and after the call.

Only ``offset`` moves the view away from the start of its storage, so that a
layout names one property and a failure can be pinned on it.

The two transforms that change values: ``expanded`` repeats the first slice
along its first non-trivial dim with stride 0 (inputs only: PyTorch refuses
to write into it), and ``empty`` sets the leading dim to zero. The reference
for a case is always computed from contiguous copies of the transformed
tensors, so both are judged like the others.
"""

from __future__ import annotations

import math

import torch

# Elements of poison after every view (and before it, for "offset").
GUARD = 4
# The storage offset of "offset": odd, so that no element size below 16
# bytes keeps the 16-byte alignment vector loads assume.
OFFSET = 3
# The stride "size1_strides" gives to dims of size 1: any value is valid there,
# and kernels that derive contiguity from strides alone trip over a large one.
SIZE1_STRIDE = 1_000_003

DESCRIPTIONS = {
    "contiguous": "row-major, offset 0 (guard values after the view)",
    "transposed": "last two dims swapped in memory (2-D and up)",
    "permuted": "all dims reversed in memory (3-D and up)",
    "strided": "every dim of size > 1 sliced with step 2; the gaps poisoned",
    "offset": f"storage offset {OFFSET} elements, breaking 16-byte alignment; guards before",
    "expanded": "first non-trivial dim expanded from one slice, stride 0 (inputs only)",
    "channels_last": "NHWC memory order (4-D)",
    "channels_last_3d": "NDHWC memory order (5-D)",
    "size1_strides": f"dims of size 1 get stride {SIZE1_STRIDE}",
    "empty": "leading dim set to 0 (every tensor argument at once)",
}

# Layouts a written tensor (in-place self, out=) may not take.
READ_ONLY = frozenset({"expanded"})
# Layouts that change values, not only where they sit: cases using them get
# references of their own.
VALUE_CHANGING = frozenset({"expanded", "empty"})
# Layouts applied to every tensor argument together, never one at a time:
# changing one argument's shape alone would only break broadcasting.
JOINT_ONLY = frozenset({"empty"})


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


def applies(layout: str, t: torch.Tensor, *, written: bool = False) -> bool:
    """Whether ``layout`` gives ``t`` a layout that differs from contiguous."""
    if written and layout in READ_ONLY:
        return False
    shape, n = tuple(t.shape), t.dim()
    if layout == "contiguous":
        return True
    if t.numel() == 0 and layout != "contiguous":
        return False
    if layout == "transposed":
        return n >= 2 and shape[-1] > 1 and shape[-2] > 1
    if layout == "permuted":
        return n >= 3 and sum(s > 1 for s in shape) >= 2 and not _orders_agree(shape, list(range(n))[::-1])
    if layout == "strided":
        return t.numel() > 1
    if layout == "offset":
        return True
    if layout == "expanded":
        return any(s > 1 for s in shape)
    if layout == "channels_last":
        return n == 4 and not _orders_agree(shape, [0, 2, 3, 1])
    if layout == "channels_last_3d":
        return n == 5 and not _orders_agree(shape, [0, 2, 3, 4, 1])
    if layout == "size1_strides":
        return any(s == 1 for s in shape)
    if layout == "empty":
        return n >= 1
    raise ValueError(f"unknown layout {layout!r}")


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


def apply(layout: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` (any layout) re-laid-out as ``layout``, in a fresh poisoned storage."""
    shape, n = tuple(t.shape), t.dim()
    if layout == "contiguous":
        stride, offset = contiguous_strides(shape), 0
    elif layout == "transposed":
        stride, offset = _ordered_strides(shape, list(range(n - 2)) + [n - 1, n - 2]), 0
    elif layout == "permuted":
        stride, offset = _ordered_strides(shape, list(range(n))[::-1]), 0
    elif layout == "strided":
        step = [2 if s > 1 else 1 for s in shape]
        physical = contiguous_strides([s * k for s, k in zip(shape, step)])
        stride, offset = tuple(p * k for p, k in zip(physical, step)), 0
    elif layout == "offset":
        stride, offset = contiguous_strides(shape), OFFSET
    elif layout == "channels_last":
        stride, offset = _ordered_strides(shape, [0, 2, 3, 1]), 0
    elif layout == "channels_last_3d":
        stride, offset = _ordered_strides(shape, [0, 2, 3, 4, 1]), 0
    elif layout == "size1_strides":
        stride = tuple(SIZE1_STRIDE if s == 1 else st for s, st in zip(shape, contiguous_strides(shape)))
        offset = 0
    elif layout == "expanded":
        dim = next(d for d, s in enumerate(shape) if s > 1)
        row = t.narrow(dim, 0, 1)
        return _place(row, row.shape, contiguous_strides(row.shape), 0, row.numel()).expand(shape).detach()
    elif layout == "empty":
        empty_shape = (0,) + shape[1:]
        return _place(t.new_empty(empty_shape), empty_shape, contiguous_strides(shape), 0, 0)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return _place(t, shape, stride, offset, _extent(shape, stride))
