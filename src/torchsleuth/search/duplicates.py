"""The ``duplicates`` search: every index of a call aimed at one slot, past 256 and 2048 of them.

Design note. An index reduction (``index_add``, ``scatter_add``,
``scatter_reduce``, ``index_reduce``, ``index_put(accumulate=True)``,
``put_``, and the backward of every gather: ``gather``, ``index_select``,
``take``, ``embedding``) adds many writes into one element. A kernel that
accumulates them one by one in a narrow type stalls: in bfloat16, 256 + 1
rounds back to 256, so every write past the 256th is lost; in float16 past
the 2048th. OpInfo's samples aim at most a handful of writes at one slot,
so such a kernel passes them. The edit ``dup:K`` gives every index tensor of
the sample ``K`` entries along the dim the op walks, all aimed at the slot
its first entry names (one slot per row where the index has rows), and
grows the tensors written through it (the source) along the same dim to
``K`` entries of 1: the exact sum is ``K``, which every floating dtype
holds (``LENGTHS`` are 1.5 times a power of two: 384 = 1.5 * 2^8 and
3072 = 1.5 * 2^11), and a kernel that stalls gives 256 or 2048, a third
off, far past what the precision rule allows for a sum of ones.

Which tensors, by what the op is: the index tensors are the integer
(not bool) tensors the aten schema names ``index`` or ``indices``, by
their position in the call (OpInfo's ``embedding`` passes the weight first,
as aten does); the dim is the op's ``dim`` argument where the index has the
input's rank (``scatter``, ``gather``), else the index's last dim; a source
is any other floating tensor after the first that is laid out along the
index: the index's rank and its size along that dim (``scatter``'s src,
``put``'s source, ``embedding_bag``'s per-sample weights, ``index_put``'s
values), or the index's length along the op's ``dim`` (``index_add``'s
source). A sample whose floating tensors cannot all follow (a 0-d source),
gets no edit; nor does one whose index pairs element for element with the
input along no ``dim`` (``max_unpool``'s positions of its input's values). Positions into the index
follow it: ``embedding_bag``'s ``offsets`` (the schema's name) start its
bags, so the last bag takes every added entry, and with
``include_last_offset`` the last offset, the index's length, becomes ``K``
(left as it was, it ends the bags before the added entries, an input the
docs rule out, on which the kernel's paths part). Writes that do not combine (``index_copy``, ``scatter``
without ``reduce``, ``put``/``index_put`` without ``accumulate``) leave one
of their values in no specified order (run.unordered), so they are not
planned: nothing about their count is judged.

Floating and complex dtypes only: integer sums are exact whatever the
order. Planned for the functional, in-place, out= and backward variants,
whose kernels differ (the backward of a gather is the scatter).
"""

from __future__ import annotations

import functools

import torch

from ..cases import opinfo
from ..errors import UsageError
from ..run import tree, unordered
from . import long_dims
from .registry import Search

DESCRIPTION = ("every index of an index reduction, scatter or gather aimed at one slot, 384 and 3072 times (past a bfloat16 "
               "accumulator's 256 and a float16 one's 2048), its source all ones")
VERB = "dup"
FORM = "dup:K"

LENGTHS = (384, 3072)
VARIANTS = ("functional", "inplace", "out", "backward")
INDEX_NAMES = frozenset({"index", "indices"})
POSITION_NAMES = frozenset({"offsets"})  # positions into the index (embedding_bag's bags)


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """``dup:K`` for each length, where the sample has an index tensor and every tensor written through it can follow."""
    wanted = getattr(torch, dtype)
    if variant not in VARIANTS or not (wanted.is_floating_point or wanted.is_complex) or not _combines(op, sample):
        return []
    if _growth(op, sample, LENGTHS[0]) is None:
        return []
    return [(f"{VERB}:{k}",) for k in LENGTHS]


def apply(sample, rest: str, *, op: str = ""):
    """``sample`` with the edit ``dup:K`` made (see the design note); unchanged where it has no index to repeat."""
    if not rest.isdigit() or int(rest) < 1:
        raise UsageError(f"the count in {VERB}:{rest} must be a positive whole number ({FORM})")
    growth = _growth(op, sample, int(rest))
    if growth is None:
        return sample
    return tree.map_sample_tensors(sample, lambda path, t: growth[path](t) if path in growth else t)


def _growth(op: str, sample, k: int) -> dict | None:
    """How each tensor of the sample changes (path -> function), or None where the edit does not fit."""
    names = _names(op, sample)
    tensors = tree.sample_tensors(sample)
    indices = {p: t for p, t in tensors.items() if names.get(p) in INDEX_NAMES and not t.dtype.is_floating_point
               and not t.dtype.is_complex and t.dtype != torch.bool}
    if not indices or any(t.dim() == 0 or t.numel() == 0 for t in indices.values()):
        return None
    first = tensors.get("input")
    if first is None or first.dim() == 0 or "dim" not in _schema_names(op) and any(tuple(t.shape) == tuple(first.shape) for t in indices.values()):
        return None  # an input paired with the index element for element, along no dim (max_unpool): no slot to aim at
    dim = long_dims.working_dim(op, sample) if isinstance(sample.input, torch.Tensor) and sample.input.dim() else None
    found = {}
    for path, index in indices.items():
        along = dim if dim is not None and index.dim() == first.dim() and index.dim() > 1 else index.dim() - 1
        found[path] = functools.partial(_aimed, dim=along, k=k)
    index = next(iter(indices.values()))
    along = dim if dim is not None and index.dim() == first.dim() and index.dim() > 1 else index.dim() - 1
    for path, t in tensors.items():
        if path == "input" or path in indices or not (t.is_floating_point() or t.is_complex()):
            continue
        if index.dim() == 1 and dim is not None:  # a list of positions along the op's dim (index_add's source)
            if t.dim() <= dim or t.shape[dim] != index.numel():
                return None
            found[path] = functools.partial(_ones, dim=dim, k=k)
        elif t.dim() > along and t.shape[along] == index.shape[along] and (t.dim() == index.dim() or index.dim() == 1):
            found[path] = functools.partial(_ones, dim=along, k=k)
        else:
            return None  # a tensor that cannot follow the index: the call would raise
    if _values(op, sample).get("include_last_offset"):
        found.update({p: functools.partial(_ending, k=k) for p, t in tensors.items() if names.get(p) in POSITION_NAMES and t.dim() == 1 and t.numel()})
    return found


def _ending(t: torch.Tensor, *, k: int) -> torch.Tensor:
    """Offsets whose last entry, the index's length, is ``k``."""
    out = t.clone()
    out[-1] = k
    return out


def writes(edits) -> int:
    """How many writes a case's ``dup:K`` edit aims at one slot, 1 without one. The slot's value is then a sum of ``K``
    terms (``embedding_bag``'s bag of ``K`` rows, a gather's gradient), which the precision rule counts as a
    reduction: an index reduction carries no ``reduction`` tag, and a float32 kernel adding ``K`` equal rows one by
    one is off by up to ``K`` units of roundoff (each addition rounds the same way), where a reduction of varied terms
    is off by about the square root of its length (judge.context counts them as ``K^2`` terms)."""
    found = [int(e[len(VERB) + 1:]) for e in edits if e.startswith(VERB + ":") and e[len(VERB) + 1:].isdigit()]
    return max(found, default=1)


def _aimed(t: torch.Tensor, *, dim: int, k: int) -> torch.Tensor:
    """``t`` with ``k`` entries along ``dim``, each the first entry of its row: every write of a row to one slot."""
    shape = list(t.shape)
    shape[dim] = k
    return t.narrow(dim, 0, 1).expand(shape).contiguous()


def _ones(t: torch.Tensor, *, dim: int, k: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = k
    return torch.ones(shape, dtype=t.dtype)


def _combines(op: str, sample) -> bool:
    """Whether the op's writes through repeated indices combine (an index reduction, an accumulating put, a gather
    whose backward adds), rather than leave one of them in no specified order (run.unordered)."""
    values = _values(op, sample)
    if "accumulate" in _schema_names(op):
        return bool(values.get("accumulate", False))
    return _aten_name(op) not in unordered.DECLARED or values.get("reduce") is not None


def _values(op: str, sample) -> dict:
    """The sample's top-level arguments by the aten schema's name."""
    names = _names(op, sample)
    return {names.get(p, p): v for p, v in (*((f"args[{i}]", a) for i, a in enumerate(sample.args)), *sample.kwargs.items())}


def _names(op: str, sample) -> dict[str, str]:
    """The aten schema's name for each of the sample's top-level arguments, by path (``input``, ``args[1]``, keywords),
    and for each tensor inside a list argument (``args[0][0]`` is one of ``indices``)."""
    positional = _positional(op)
    names = {"input": positional[0]} if positional else {}
    for i, value in enumerate(sample.args):
        if i + 1 < len(positional):
            names[f"args[{i}]"] = positional[i + 1]
            if isinstance(value, (list, tuple)):
                names.update({f"args[{i}][{j}]": positional[i + 1] for j in range(len(value))})
    names.update({k: k for k in sample.kwargs})
    return names


def _aten_name(op: str) -> str:
    entry = opinfo.get(op)
    return (getattr(entry, "aten_name", None) or entry.name).split(".")[-1]


@functools.cache
def _positional(op: str) -> tuple[str, ...]:
    """The positional argument names of the op's first aten overload that takes an index; () for none."""
    packet = getattr(torch.ops.aten, _aten_name(op), None)
    if packet is None:
        return ()
    for overload in packet.overloads():
        arguments = [a.name for a in getattr(packet, overload)._schema.arguments if not a.kwarg_only]
        if INDEX_NAMES & set(arguments):
            return tuple(arguments)
    return ()


@functools.cache
def _schema_names(op: str) -> frozenset[str]:
    packet = getattr(torch.ops.aten, _aten_name(op), None)
    if packet is None:
        return frozenset()
    return frozenset(a.name for overload in packet.overloads() for a in getattr(packet, overload)._schema.arguments)


SEARCH = Search(name="duplicates", description=DESCRIPTION, edits="every index aimed at one slot, the source grown alike (dup: edits)",
                order=40, plan=plan, verb=VERB, form=FORM, apply=apply)
