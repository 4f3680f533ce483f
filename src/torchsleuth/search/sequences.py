"""The ``sequences`` search: structured values along the dim a scan or reduction walks, and exact zeros placed in it.

Design note. OpInfo's samples fill a reduced or scanned dim with random
values of one scale. Kernels meet other sequences in use: sorted ones (a
running maximum updated at every step, a sort's already-sorted path),
values whose magnitudes span the dtype (a sum that loses its small terms in
one order and not in another, a softmax whose largest term dominates),
sums that cancel, and values sharing their leading digits (a one-pass
variance, the sum of squares less the square of the sum, cancels there to
noise, where random values of mean about 0 never cancel); and products and their derivatives have branches of
their own for zeros (``prod``'s backward with one zero and with two,
``cumprod``'s after the first zero). The edit ``seq:input@D=KIND`` replaces
the input's values along its dim ``D``, the same sequence in every row:

* ``monotone``: ``2^((j - n/2) / 32)``: strictly increasing in every
  floating dtype (a step of 2.2 %, past bfloat16's 0.4 %), positive, within
  2^-4..2^4 for the lengths used;
* ``spread``: ``2^e`` with the exponent cycling over the dtype's span in
  steps of 7 (neighbours far apart), from ``significand + 2`` bits below 1
  (a small term lost against 1) up to where a sum of the row, or of its
  squares, stays finite;
* ``cancelling``: ``+L, s, -L, s`` repeated, ``L`` the span's top times 1,
  1.25 or 1.5 in turn, ``s`` = 1: large terms that cancel exactly, with the
  small ones the only part of the exact sum;
* ``offset``: ``C + k``, ``k`` cycling over -8..7 and ``C = 2^ceil(p/2)``
  for the dtype's ``p`` significand bits (16 in bfloat16, 4096 in float32):
  exact in the dtype, a large common part on a small spread, so the square
  of every value holds ``C^2``, about ``2^p`` times the spread's square:
  a formula that subtracts the squared mean from the mean square loses
  every digit of the variance in the dtype, while the variance itself is
  well conditioned (a nudge of the inputs by a unit of roundoff moves it by
  little, so the precision rule allows little);
* ``zero-first``, ``zero-middle``, ``zero-last``, ``two-zeros``: the
  sample's own values with exact zeros at those positions (two: first and
  middle).

Where: the dim an op works along (search.long_dims: its ``dim`` argument,
or the innermost for a reduction of everything). The first four are laid
over the dim grown to ``LENGTH`` (258: past a block of 256, even; the ``dim:``
edit first) where the grown input stays under ``MAX_ELEMENTS``; the zeros
over the sample's own length, and only where every product of a row's
values stays within the dtype's range in any order: a zero in a row whose
other values overflow when multiplied makes ``inf * 0``, NaN or 0 by the
order a kernel takes (float64 keeps 0), and says nothing of the zero. Ops that index through an argument (search.duplicates) are left to
that search, and an op whose name says it multiplies (``prod``, ``cumprod``)
takes the zeros only: a product of a row of 258 values overflows in one
lane and not in another, so float64 and the dtype part for the order alone.

Floating and complex inputs only. How they are judged: the precision rule
measures how far the float64 result moves when the inputs move by the
dtype's roundoff, so a cancelling sum is allowed what cancellation costs.
Planned for the functional, in-place, out= and backward variants; the
oracles that judge values judge them too (``on_values``: a forward-mode
derivative of a product at its zeros).
"""

from __future__ import annotations

import math

import torch

from ..errors import UsageError
from ..run import tree
from . import duplicates, long_dims
from .registry import Search

DESCRIPTION = ("along the dim a scan or reduction walks: monotone, widely spread, cancelling and offset sequences (grown to 258), "
               "and exact zeros first, in the middle, last and twice")
VERB = "seq"
FORM = "seq:input@D=KIND"

GROWN_KINDS = ("monotone", "spread", "cancelling", "offset")
ZERO_KINDS = ("zero-first", "zero-middle", "zero-last", "two-zeros")
KINDS = GROWN_KINDS + ZERO_KINDS
LENGTH = 258  # past a block of 256, and even (glu halves its dim)
MAX_ELEMENTS = 1 << 16
VARIANTS = ("functional", "inplace", "out", "backward")
PRODUCT_WORDS = ("prod",)
STEPS = 32  # monotone: 2^(1/STEPS) from one element to the next


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """The edits for the input's working dim: the grown sequences, then the zeros."""
    wanted = getattr(torch, dtype)
    if variant not in VARIANTS or not (wanted.is_floating_point or wanted.is_complex):
        return []
    t = sample.input
    if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.dtype != wanted or t.numel() == 0 or duplicates.plan(op, "functional", dtype, sample):
        return []
    dim = long_dims.working_dim(op, sample)
    if dim is None or t.shape[dim] < 2:
        return []
    planned = []
    others = t.numel() // t.shape[dim]
    if not any(word in op for word in PRODUCT_WORDS) and others * max(LENGTH, t.shape[dim]) <= MAX_ELEMENTS:
        grown = (f"dim:input@{dim}>{LENGTH}",) if t.shape[dim] < LENGTH else ()
        planned += [(*grown, f"{VERB}:input@{dim}={kind}") for kind in GROWN_KINDS]
    if _in_range(t, dim):
        kinds = ZERO_KINDS if t.shape[dim] >= 3 else ("zero-first", "zero-last")
        planned += [(f"{VERB}:input@{dim}={kind}",) for kind in kinds]
    return planned


def _in_range(t: torch.Tensor, dim: int) -> bool:
    """Whether every product of a row's values along ``dim``, in any order, stays within the dtype's range: then a zero
    placed in the row makes the exact product 0 whatever the order, and no kernel meets inf * 0 on the way."""
    info = torch.finfo(torch.empty((), dtype=t.dtype).real.dtype)
    magnitudes = t.detach().abs().to(torch.float64)
    logs = torch.log2(magnitudes.masked_fill(magnitudes == 0, 1)).nan_to_num(posinf=math.inf, neginf=-math.inf)
    up, down = logs.clamp_min(0).sum(dim), logs.clamp_max(0).sum(dim)
    return bool((up < math.log2(info.max) - 1).all() and (down > math.log2(info.tiny) + 1).all())


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``seq:input@D=KIND`` made."""
    where, _, kind = rest.rpartition("=")
    path, _, dim = where.rpartition("@")
    if kind not in KINDS or not dim.isdigit():
        raise UsageError(f"cannot read {VERB}:{rest}: the form is {FORM}, KIND one of {', '.join(KINDS)}")
    found = tree.sample_tensors(sample)
    if path not in found or found[path].dim() <= int(dim):
        raise UsageError(f"no tensor {path!r} with a dim {dim} in the sample for {VERB}:{rest}")
    return tree.map_sample_tensors(sample, lambda p, t: along(t, int(dim), kind) if p == path else t)


def along(t: torch.Tensor, dim: int, kind: str) -> torch.Tensor:
    """A fresh contiguous tensor of ``t``'s shape and dtype, holding sequence ``kind`` along ``dim`` (see the design note)."""
    n = t.shape[dim]
    if kind in ZERO_KINDS:
        positions = {"zero-first": [0], "zero-middle": [n // 2], "zero-last": [n - 1], "two-zeros": [0, n // 2]}[kind]
        out = t.clone(memory_format=torch.contiguous_format)
        out.index_fill_(dim, torch.tensor(positions), 0)
        return out
    j = torch.arange(n, dtype=torch.float64)
    low, high = _span(t.dtype)
    if kind == "monotone":
        values = torch.exp2((j - n // 2) / STEPS)
    elif kind == "offset":
        values = _offset(t.dtype) + (j % 16 - 8)
    elif kind == "spread":
        values = torch.exp2(low + (j * 7) % (high - low + 1))
    else:
        large = 2.0 ** high * (1 + ((j // 4) % 3) / 4)
        values = torch.where(j % 4 == 0, large, torch.where(j % 4 == 2, -large, torch.ones_like(j)))
    shape = [n if i == dim else 1 for i in range(t.dim())]
    return values.reshape(shape).expand(t.shape).to(t.dtype).contiguous()


def _offset(dtype: torch.dtype) -> float:
    """``C`` of the offset sequence: ``2^ceil(p/2)``, ``p`` the dtype's significand bits; ``C + 7`` stays exact."""
    info = torch.finfo(torch.empty((), dtype=dtype).real.dtype)
    return 2.0 ** math.ceil((round(-math.log2(info.eps)) + 1) / 2)


def _span(dtype: torch.dtype) -> tuple[int, int]:
    """The exponents a spread sequence takes in ``dtype``: from ``significand + 2`` bits below 1 (above the smallest
    normal) up to where ``LENGTH`` terms, or their squares, still sum to a finite value (at most 2^12)."""
    info = torch.finfo(torch.empty((), dtype=dtype).real.dtype)
    significand = round(-math.log2(info.eps)) + 1
    top = math.floor(math.log2(info.max))
    bottom = math.ceil(math.log2(info.tiny))
    high = max(1, min(12, (top - math.ceil(math.log2(LENGTH))) // 2))
    low = max(bottom + 2, -(significand + 2))
    return low, high


SEARCH = Search(name="sequences", description=DESCRIPTION, edits="the input's values along the dim an op works along (seq: edits)",
                order=50, plan=plan, verb=VERB, form=FORM, apply=apply, on_values=True)
