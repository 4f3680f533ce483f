"""Edits of a sample's sizes and values: the shrinker's moves, as pure transforms.

Design note. A case names its sample by index; the shrinker makes it smaller
by editing that sample, and the edits are part of the case (``cases.records.Case.edits``),
so a shrunk case is replayed from its id like any other. Each edit is a
short string:

* ``size:S>K`` narrows every dimension of size ``S``, in every tensor of the
  sample, to its first ``K`` entries. Dims of one size are edited together
  because they usually must agree (a matrix product's inner dims, a
  broadcast); an edit that breaks the op makes it raise, and the shrinker
  then keeps the larger size.
* ``dim:PATH@D>K`` tiles dim ``D`` of the one tensor ``PATH`` to ``K``
  entries (entry ``i`` holds entry ``i % size``): the large oracle's long
  rows.
* ``grow:S>K`` grows every dimension of size ``S``, in every tensor, to ``K``
  entries: entry ``i`` repeats entry ``i % S``, floating entries scaled by
  ``1 - r / (r + 2)`` in repeat ``r`` (same sign, no larger, not equal), so
  that a large enough shape to shard keeps its domain (probabilities, logs'
  positives) and its shards differ; integers and bools repeat exactly (an
  index stays valid). Sizes named in a list or tuple argument (a
  ``normalized_shape``, a ``view``'s shape) follow; a lone int does not (it is
  more likely a dim or an index). The shard command's targeted samples.
* ``values:PATH=zeros|ones|small`` replaces one tensor's values by zeros,
  ones, or the small integers -2..2 in turn (0..4 for unsigned types,
  False/True for bool).

Edits apply in order to the sample made on the CPU, before any layout.

The edits other than the three of sizes set values (``values:`` and the
searches' verbs: special values, an argument's or a scalar's value, an
internal call). Cases of one unit that set the same values in another sample
or layout are kin (``kin``): where one hangs (a degree of 2^52 + 1 makes a
polynomial's recurrence run for months), its kin are set aside with it
unrun (workers.dispatch).
"""

from __future__ import annotations

import dataclasses

import torch

from ..errors import UsageError
from ..run import tree
from ..run.samples import samples_of
from . import registry
from ..cases.opinfo import Sample
from ..cases.records import Case

VALUES = ("zeros", "ones", "small")
# The edits that change sizes only; every other verb sets values.
SIZE_VERBS = frozenset({"size", "dim", "grow"})


def size(old: int, new: int) -> str:
    return f"size:{old}>{new}"


def stretch(path: str, dim: int, new: int) -> str:
    return f"dim:{path}@{dim}>{new}"


def grow(old: int, new: int) -> str:
    return f"grow:{old}>{new}"


def values(path: str, kind: str) -> str:
    return f"values:{path}={kind}"


def kin(case_id: str) -> str | None:
    """What a case shares with the cases likely to hang where it hangs: its op and the values its edits set, whatever
    the sample, the sizes, the layouts, the variant and the dtype (a degree of 2^52 + 1 hangs a polynomial in float32,
    float64 and int64 alike); None for a case whose edits set none."""
    try:
        case = Case.parse(case_id)
    except (ValueError, IndexError):  # not a sweep's case id (the shard command's, a test's)
        return None
    set_values = [edit for edit in case.edits if edit.split(":", 1)[0] not in SIZE_VERBS]
    return f"{case.op}|{';'.join(set_values)}" if set_values else None


def apply(sample: Sample, edits: tuple[str, ...], *, op: str = "") -> Sample:
    """``sample`` with ``edits`` made, in order (the sample itself is not changed); ``op``, the case's op, for the
    edits that re-trace its call (``internal:``)."""
    for edit in edits:
        verb, _, rest = edit.partition(":")
        if verb == "size":
            old, new = (int(x) for x in rest.split(">"))
            sample = _map(sample, lambda path, t: _narrow(t, old, new))
        elif verb == "dim":
            where, new = rest.rsplit(">", 1)
            target, dim = where.rsplit("@", 1)
            sample = _map(sample, lambda path, t: _tiled(t, int(dim), int(new)) if path == target else t)
        elif verb == "grow":
            old, new = (int(x) for x in rest.split(">"))
            sample = _map(sample, lambda path, t: _grown(t, old, new))
            sample = _sizes_follow(sample, old, new)
        elif verb == "values":
            target, kind = rest.rsplit("=", 1)
            if kind not in VALUES:
                raise UsageError(f"unknown value edit {kind!r} in {edit!r}; allowed: {', '.join(VALUES)}")
            sample = _map(sample, lambda path, t: _simple(t, kind) if path == target else t)
        elif (search := registry.by_verb(verb)) is not None:  # a search's own edit (search.registry)
            sample = search.apply(sample, rest, op=op)
        else:
            allowed = ", ".join(("size:S>K", "grow:S>K", "dim:PATH@D>K", "values:PATH=KIND", *(s.form for s in registry.searches() if s.form)))
            raise UsageError(f"unknown sample edit {edit!r}; allowed: {allowed}")
    return sample


def sample_of(case) -> Sample:
    """The OpInfo sample a case (``cases.records.Case``) calls, its edits made: how every replay rebuilds it from its id."""
    return apply(samples_of(case.op, case.dtype)[case.sample], case.edits, op=case.op)


def sizes(sample: Sample) -> list[int]:
    """The distinct dimension sizes above 1 of the sample's tensors, largest first."""
    found = {d for t in tensors(sample).values() for d in t.shape if d > 1}
    return sorted(found, reverse=True)


def paths(sample: Sample) -> list[str]:
    return list(tensors(sample))


def elements(sample: Sample) -> int:
    return sum(t.numel() for t in tensors(sample).values())


tensors = tree.sample_tensors
_map = tree.map_sample_tensors


def _narrow(t: torch.Tensor, old: int, new: int) -> torch.Tensor:
    for dim, d in enumerate(t.shape):
        if d == old:
            t = t.narrow(dim, 0, new)
    return t.contiguous()


def _tiled(t: torch.Tensor, dim: int, new: int) -> torch.Tensor:
    """``t`` with dim ``dim`` tiled to ``new`` entries: entry i holds entry i % its size."""
    reps = [-(-new // t.shape[dim]) if i == dim else 1 for i in range(t.dim())]
    return t.repeat(*reps).narrow(dim, 0, new).contiguous()


def _grown(t: torch.Tensor, old: int, new: int) -> torch.Tensor:
    for dim, d in enumerate(t.shape):
        if d != old or new <= old:
            continue
        index = torch.arange(new)
        t = t.index_select(dim, index % old)
        if t.is_floating_point() or t.is_complex():
            repeat = (index // old).to(torch.float64)
            scale = (1 - repeat / (repeat + 2)).to(t.dtype if t.is_floating_point() else t.real.dtype)
            t = t * scale.reshape([-1 if i == dim else 1 for i in range(t.dim())])
    return t.contiguous()


def _sizes_follow(sample: Sample, old: int, new: int) -> Sample:
    def follow(value):
        if isinstance(value, (tuple, list)) and value and all(type(v) is int for v in value):
            return type(value)(new if v == old else v for v in value)
        return value

    return dataclasses.replace(sample, args=tuple(follow(a) for a in sample.args),
                               kwargs={k: follow(v) for k, v in sample.kwargs.items()})


def _simple(t: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "zeros":
        return torch.zeros_like(t, memory_format=torch.contiguous_format)
    if kind == "ones":
        return torch.ones_like(t, memory_format=torch.contiguous_format)
    n = torch.arange(t.numel())
    if t.dtype == torch.bool:
        small = n % 2
    elif t.dtype in (torch.uint8,) or not t.dtype.is_signed and not t.dtype.is_floating_point and not t.dtype.is_complex:
        small = n % 5
    else:
        small = n % 5 - 2
    return small.reshape(t.shape).to(t.dtype)
