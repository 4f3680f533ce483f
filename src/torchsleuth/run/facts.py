"""Facts about a call that decide how it can be judged, read off its trace.

Comparability is decided from facts PyTorch states about its own ops, not
from a hand-kept skip list:

* ``random``: an op tagged ``nondeterministic_seeded`` ran, so values are
  judged by coverage, support and seeded determinism, not against another
  layout (PyTorch draws differently for different layouts);
* ``reduction_length``: input elements per output element, when an op
  tagged ``reduction`` ran, and the length of the longest dim for a scan
  (``SCANS``: element i of ``cumsum`` sums i terms, as a reduction does, and
  a kernel may accumulate float32 in float32, as CUDA's does, where the
  CPU's accumulates in double; the tag does not say so): the tolerance rule
  widens with it;
* ``uninitialized``: the result comes from an ``empty*`` factory, whose
  values are whatever memory held: only its metadata is compared;
* ``storage_defined``: the op's public contract is stated in strides and
  storage (``as_strided``, ``resize_``, ``set_``): it is judged against the
  same call on the same storage layout, not on a contiguous copy. This one
  is read off the op's catalog name, not its trace: composite ops such as
  ``stft`` use ``as_strided`` on their own intermediates.
* ``repeated_writes``: an op wrote one element twice through repeated
  indices, where PyTorch leaves which write lands unspecified
  (``run.unordered``): compared across layouts, devices and batches by
  metadata only; the same call twice must still agree bit for bit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .trace import PLUMBING, Trace

# Random in-place ops that overwrite every element of self with a draw, so the
# result must not depend on what self held before (declared from their docs).
RANDOM_FILLS = frozenset({"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_", "log_normal_", "cauchy_"})
# Ops whose contract is stated in storage coordinates (declared, one entry a
# canonicaliser: these are compared on the same storage layout).
STORAGE_DEFINED = frozenset({"as_strided", "as_strided_", "as_strided_scatter", "as_strided_copy", "resize_", "resize_as_", "set_",
                             "_reshape_alias", "slice_inverse"})
# Scans: every element reduces the entries before it along a dim (declared: PyTorch tags none of them).
SCANS = frozenset({"cumsum", "cumsum_", "cumprod", "cumprod_", "logcumsumexp", "_logcumsumexp"})
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Facts:
    op: str  # the aten overload the call computes with (the last one that computes)
    random: bool = False
    random_fill: bool = False  # the op is one of RANDOM_FILLS
    reduction_length: int = 1
    uninitialized: bool = False
    storage_defined: bool = False
    repeated_writes: bool = False
    names: tuple[str, ...] = ()  # short names of every op the call dispatched to
    steps: int = 1  # how many ops that compute something it dispatched to


def _short(op) -> str:
    return op._schema.name.split("::")[-1]


def facts(trace: Trace | None, inputs: dict, result, *, fallback: str) -> Facts:
    if trace is None or not trace.ops:
        return Facts(op=fallback)
    names = [_short(op) for op in trace.ops]
    reduction = 1
    # torch.Tag.reduction is newer than torch 2.4; there, any op whose result is
    # smaller than its largest input counts as one (a wider tolerance, never a narrower)
    tag = getattr(torch.Tag, "reduction", None)
    if tag is None or trace.has_tag(tag):
        largest = max((t.numel() for t in inputs.values() if isinstance(t, torch.Tensor)), default=1)
        outputs = [t.numel() for t in _tensors(result)]
        smallest = min([n for n in outputs if n > 0], default=1)
        reduction = max(1, largest // smallest)
    if SCANS.intersection(names):  # the scanned dim is an argument: its longest dim bounds it (wider, never narrower)
        reduction = max([reduction, *(max(t.shape, default=1) for t in inputs.values() if isinstance(t, torch.Tensor))])
    computing = [n for n in names if n not in ("detach", "alias", "lift_fresh", "_to_copy", "copy_", "clone")]
    primary = trace.primary() or fallback
    return Facts(
        op=primary,
        random=trace.has_tag(torch.Tag.nondeterministic_seeded),
        random_fill=primary.split(".")[1] in RANDOM_FILLS if primary.startswith("aten.") else False,
        reduction_length=reduction,
        uninitialized=bool(computing) and computing[-1] in UNINITIALIZED,
        repeated_writes=trace.repeated_writes,
        names=tuple(dict.fromkeys(names)),
        steps=max(1, sum(1 for op in trace.ops if _short(op) not in PLUMBING)),
    )


def of_references(refs, catalog_name: str) -> Facts:
    """The facts of a case's call, read off its references' trace; storage-defined by the op's catalog name (its packet
    for an overload's name, ``aten.as_strided_copy.default``). Kept on the references (``refs.facts``): every case of
    a sample asks, and the references do not change."""
    if catalog_name not in refs.facts:
        found = facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=catalog_name)
        parts = catalog_name.split(".")
        packet = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]
        refs.facts[catalog_name] = dataclasses.replace(found, storage_defined=packet in STORAGE_DEFINED)
    return refs.facts[catalog_name]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
