"""The tensors the ``sizes`` oracle puts an element in: lengths, offsets, batches of rows.

Design note. Pure transforms of a sample's own values, nothing judged here.

Pointwise ops (``Tiling``). The tensor arguments are broadcast to their
common shape and flattened; the first ``distinct`` values (at most
``MAX_DISTINCT``) are tiled to the longest length, so element ``j`` of any
length holds value ``j % distinct`` and every value sits both in a vector
body and in a scalar tail somewhere. A 0-dim tensor among dimensioned ones
is kept as it is: PyTorch's type promotion ranks a 0-dim tensor below a
dimensioned one, so tiling it could change the result's dtype. Each length
gets a fresh storage with poison after it (cases.layouts), and the offset
configuration starts the longest length at a storage offset that breaks
every vector alignment.

Layout forms (``Tiling.form``). The same values at the same lengths, laid
out by cases.layouts (the main sweep's own transforms, gaps and guards
poisoned):

* ``strided``: every tiled argument, 1-D, every other element of a buffer
  twice as long;
* ``transposed``: every tiled argument ``n x COLUMNS``, column-major, so the
  op walks columns of ``n``; element ``(i, j)`` holds value
  ``(i * COLUMNS + j) % distinct``;
* ``transposed-first``: the same grid with only the first tiled argument
  transposed (when there are several): operands with other strides, which
  is what sends TensorIterator to its strided inner loop; with every
  operand transposed alike it reorders the dims and sees one contiguous run.

A form needs ``n > 1`` (at length 1 every layout is contiguous).

Lengths depend on the device type: CPU kernels (ATen's ``Vectorized``)
handle ``2 * Vec::size()`` elements per step, from 8 (float64, AVX2) to 128
(int8 and bool, AVX512), then a scalar tail; GPU kernels have warps of 32,
blocks of 128 to 1024 threads and several elements per thread, and a grid
that grows at 65536.

Reductions (``rows``, ``batched``). A batch of ``k`` independent rows,
each the sample's input with its values rolled by the row's index, stacked
along a new dim that is not reduced. Where the new dim goes keeps the
sample's own dim arguments meaning what they meant: in front when the
kernel got negative dims, at the end when it got non-negative ones. Each
batch is made in both memory orders (rows outermost, rows innermost), so a
kernel that vectorises across rows sees a body and a tail of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cases import layouts

CPU_LENGTHS = (1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)
GPU_LENGTHS = (1, 3, 4, 5, 7, 8, 9, 31, 32, 33, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025,
               4095, 4096, 4097, 65535, 65536, 65537)
CPU_ROWS = (7, 8, 9, 15, 16, 17, 31, 32, 33)
GPU_ROWS = (31, 32, 33, 127, 128, 129, 255, 256, 257)
# The transposed forms are n x COLUMNS grids: COLUMNS runs of n in memory.
COLUMNS = 2
# How each layout form reads around "length 9" or "lengths 7, 9" ({n}: the length, or "n"
# for several; {first}: the first tiled argument's path).
FORM_WORDS = {
    "strided": ("strided ", " (every other element)"),
    "transposed": ("transposed ", " ({n} x %d, columns of {n} in memory)" % COLUMNS),
    "transposed-first": ("", " ({n} x %d) with {first} transposed, the others contiguous" % COLUMNS),
}
# Values of a sample that are each also run alone: the cost of the oracle is
# about this many calls of one element.
MAX_DISTINCT = 1024


def lengths(device: str) -> tuple[int, ...]:
    return CPU_LENGTHS if torch.device(device).type == "cpu" else GPU_LENGTHS


def row_counts(device: str) -> tuple[int, ...]:
    return CPU_ROWS if torch.device(device).type == "cpu" else GPU_ROWS


@dataclass(frozen=True)
class Tiling:
    """A pointwise call's tensor arguments as flat tiles of the sample's values."""

    tiled: dict  # path -> 1-D tensor of the longest length
    kept: dict  # path -> 0-dim tensor passed as it is
    distinct: int  # element j holds value j % distinct
    shape: tuple[int, ...]  # the arguments' broadcast shape in the sample

    @property
    def longest(self) -> int:
        return next(iter(self.tiled.values())).numel()

    def length(self, n: int, layout: str = "contiguous") -> dict:
        """The arguments at length ``n``, each in a fresh poisoned storage laid out as ``layout``."""
        return {**{p: layouts.apply(layout, t[:n]) for p, t in self.tiled.items()}, **self.kept}

    def forms(self) -> tuple[str, ...]:
        """The layout forms this tiling takes (``transposed-first`` only with several tiled arguments)."""
        return ("strided", "transposed") + (("transposed-first",) if len(self.tiled) > 1 else ())

    def form(self, n: int, form: str) -> dict:
        """The arguments at length ``n`` in a layout form (see the design note); ``n > 1``."""
        if form == "strided":
            return {**{p: layouts.apply("strided", t[:n]) for p, t in self.tiled.items()}, **self.kept}
        first = next(iter(self.tiled))
        at = self.positions(COLUMNS * n)
        grids = {p: t[:self.distinct][at.to(t.device)].reshape(n, COLUMNS) for p, t in self.tiled.items()}
        laid = {p: layouts.apply("transposed" if form == "transposed" or p == first else "contiguous", g) for p, g in grids.items()}
        return {**laid, **self.kept}

    def count(self, n: int, form: str) -> int:
        """The elements of the form at length ``n``, in the result's row-major order."""
        return COLUMNS * n if form.startswith("transposed") else n

    def alone(self, j: int) -> dict:
        """Value ``j`` alone: every tiled argument of length 1."""
        return {**{p: layouts.apply("contiguous", t[j:j + 1]) for p, t in self.tiled.items()}, **self.kept}

    def positions(self, n: int) -> torch.Tensor:
        """Which value each of ``n`` elements holds."""
        return torch.arange(n) % self.distinct


def tiling(tensors: dict, longest: int) -> Tiling | str:
    """The tiling of a pointwise call's tensors, or why there is none."""
    if not tensors:
        return "the call has no tensor arguments"
    dimensioned = {p: t for p, t in tensors.items() if t.dim() > 0} or dict(tensors)
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in dimensioned.values()))
    except RuntimeError:
        return "its tensor arguments do not broadcast together"
    numel = shape.numel()
    if numel == 0:
        return "its tensor arguments are empty"
    distinct = min(numel, MAX_DISTINCT, longest)
    index = torch.arange(longest, device=next(iter(tensors.values())).device) % distinct
    tiled = {p: t.detach().expand(shape).reshape(-1)[:distinct][index].contiguous() for p, t in dimensioned.items()}
    kept = {p: t for p, t in tensors.items() if p not in dimensioned}
    return Tiling(tiled=tiled, kept=kept, distinct=distinct, shape=tuple(shape))


# --- reductions ---------------------------------------------------------------------------


def rows(x: torch.Tensor, k: int) -> list[torch.Tensor]:
    """``k`` rows of ``x``'s shape: row ``b`` holds ``x``'s values rolled by ``b``."""
    flat = x.detach().reshape(-1)
    return [torch.roll(flat, b).reshape(x.shape).contiguous() for b in range(k)]


def batched(rows_: list[torch.Tensor], *, front: bool, rows_inner: bool) -> torch.Tensor:
    """The rows stacked along a new first (``front``) or last dim, the rows innermost or outermost in memory."""
    if rows_inner:
        stacked = layouts.apply("contiguous", torch.stack(rows_, dim=-1))
        return stacked.movedim(-1, 0) if front else stacked
    stacked = layouts.apply("contiguous", torch.stack(rows_, dim=0))
    return stacked if front else stacked.movedim(0, -1)


def row_of(value: torch.Tensor, b: int, *, front: bool) -> torch.Tensor:
    """Row ``b`` of a batched result."""
    return value.select(0 if front else -1, b)


def stack_rows(values: list[torch.Tensor], *, front: bool) -> torch.Tensor:
    return torch.stack(values, dim=0 if front else -1)
