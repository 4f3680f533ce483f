"""The ``large`` oracle's indexing probes: gathers and scatters over tensors past 2^31 and 2^32 elements (and 2^31 bytes).

Design note. An indexing kernel turns an index into an offset: ``index``
itself, or ``row * row_stride`` (embedding). Computed in 32 bits, the
offset wraps past 2^31 elements (signed), 2^32 (unsigned) or 2^31 bytes,
and the kernel reads or writes another element than the one indexed,
silently. A probe makes one big 1-D tensor (a 2-D view of it for
embedding) of n elements, n as the pointwise probes' (``bounds.PROBES``),
whose element i holds ``TABLE[i % D]``: ``TABLE`` the integers 0 .. D-1 in
the case's dtype, D odd (at most ``bounds.DISTINCT``, fewer where the dtype
holds fewer integers exactly: 255 in bfloat16 and uint8, 127 in int8), so
an element reached through an offset wrapped by a power of two holds
another value. The indices are the positions ``bounds.positions`` reads
(both sides of every element boundary, the ends, seeded draws) and both
sides of the byte boundaries (2^31 and 2^32 bytes, in elements).

* A gather (``index_select``, ``take``, ``gather``, ``x[idx]``,
  ``embedding``) must return ``TABLE[p % D]`` for each position p read;
* a scatter (``index_put_``, ``index_copy_``, ``scatter_``, ``put_``,
  ``index_fill_``, ``index_add_``, ``scatter_add_``) must leave the written
  value at each indexed position and the tiled value at its shadows, the
  positions one boundary away (p - 2^31, p + 2^32, ...) that a wrapped
  offset would reach instead. Scatters run in place: the functional form
  clones the destination through the same kernel, at twice the memory.

The expected values come from the formula: no second large call and no
CPU copy, so a probe costs one tensor of n elements (checked against free
memory first, as the element probes do) and one call. Values are compared
exactly: they are small integers every dtype holds, and an indexing op
computes nothing with them (``index_add_`` adds 1).

Each op the OpInfo catalog has is listed in ``FORMS`` with its call as
Python source, the same text the oracle evaluates and the repro script
(large.script) runs. ``take_along_dim`` reaches ``gather`` and
``scatter_reduce`` has reductions of its own: neither is listed. bool
holds two values, so a misread could not be told apart: no probes. A
finding's ``Detail`` (large.detail) is the tensor's length, the values
tiled, the positions indexed and a scatter's shadows: what its script
makes and checks again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...judge import calls
from ...judge.verdict import one_line
from ...judge.plugin import encode_detail
from ...judge.records import Mismatch, Outcome
from . import bounds
from .detail import Detail

W = 4  # embedding's row length: the offset row * W wraps while the row index itself does not


@dataclass(frozen=True, slots=True)
class Form:
    aten: str  # the kernel it reaches
    call: str  # Python over big (the tiled tensor), at (positions), new (values to write), TABLE, D, W
    read: str = "at"  # gathers: the positions of big the result's elements come from, in order
    written: str = "new"  # scatters: what the indexed positions hold after the call

    @property
    def writes(self) -> bool:
        return self.call.startswith("big.")


FORMS = {
    "index_select": Form("aten.index_select.default", "torch.index_select(big, 0, at)"),
    "take": Form("aten.take.default", "torch.take(big, at)"),
    "gather": Form("aten.gather.default", "torch.gather(big, 0, at)"),
    "__getitem__": Form("aten.index.Tensor", "big[at]"),
    "nn.functional.embedding": Form("aten.embedding.default", "torch.nn.functional.embedding(at // W, big.view(-1, W))",
                                    read="(at // W * W)[:, None] + torch.arange(W, device=at.device)"),
    "index_put": Form("aten.index_put_.default", "big.index_put_((at,), new)"),
    "index_copy": Form("aten.index_copy_.default", "big.index_copy_(0, at, new)"),
    "scatter": Form("aten.scatter_.src", "big.scatter_(0, at, new)"),
    "put": Form("aten.put_.default", "big.put_(at, new)"),
    "index_fill": Form("aten.index_fill_.int_Scalar", "big.index_fill_(0, at, D)", written="torch.full_like(new, D)"),
    "index_add": Form("aten.index_add_.default", "big.index_add_(0, at, torch.ones_like(new))", written="TABLE[at % D] + 1"),
    "scatter_add": Form("aten.scatter_add_.default", "big.scatter_add_(0, at, torch.ones_like(new))", written="TABLE[at % D] + 1"),
}


def plan(unit) -> list[str]:
    if unit.op not in FORMS or unit.dtype == "bool":
        return []
    itemsize = getattr(torch, unit.dtype).itemsize
    return [f"large:index={name}" for name in bounds.PROBES if not (name == "bytes" and itemsize == 1)]


def run(subject) -> Outcome:
    case = subject.case
    if case.edits:  # the shrinker's: a smaller sample changes nothing here
        return Outcome(case=case, status="skip", reason="the index probes make their own tensors: the sample's edits do not apply")
    form = FORMS.get(case.op)
    if form is None:
        return Outcome(case=case, status="skip", reason=f"no index probe is known for {case.op}")
    dtype = getattr(torch, case.dtype)
    name = case.oracle.split("=", 1)[1]
    n = bounds.PROBES[name](dtype.itemsize)
    n -= n % W
    short = bounds.short_of_memory(case.device, n * dtype.itemsize)
    if short:
        return Outcome(case=case, status="skip", reason=short)
    d = distinct(dtype)
    table = torch.arange(d, device=case.device).to(dtype)
    at = positions(n, dtype.itemsize).to(case.device)
    big = tiled(n, table)
    space = {"torch": torch, "big": big, "at": at, "new": table[(at + 1) % d], "TABLE": table, "D": d, "W": W}
    result = None
    try:
        result = eval(form.call, space)  # noqa: S307 (FORMS' own text)
        if form.writes:
            checked = torch.cat([at, shadows(at, n, dtype.itemsize).to(at.device)])
            expected = table[checked % d]
            expected[:len(at)] = eval(form.written, space)  # noqa: S307
            actual = big[checked]
        else:
            checked = eval(form.read, space).reshape(-1)  # noqa: S307
            expected, actual = table[checked % d], result.reshape(-1)
    except torch.OutOfMemoryError:
        return Outcome(case=case, status="skip", reason=f"the call on {n} elements ran out of memory")
    except Exception as e:
        return Outcome(case=case, status="skip", reason=f"the call on {n} elements raised: {one_line(e)}")
    finally:
        del big, space, result  # a scatter's result is big itself
    wrong = (actual != expected).cpu()
    if not bool(wrong.any()):
        return Outcome(case=case, status="pass", reason=f"{n} elements; {len(checked)} positions checked")
    finding = _finding(case, form, name, n, d, at.cpu(), checked.cpu(), actual.cpu(), expected.cpu(), wrong)
    return Outcome(case=case, status="finding", findings=(finding,))


def distinct(dtype: torch.dtype) -> int:
    """The odd count D <= DISTINCT of integers 0 .. D the dtype holds exactly (D itself: index_fill's value)."""
    wide = torch.arange(bounds.DISTINCT + 1, dtype=torch.float64)
    back = wide.to(dtype)
    back = (back.real if back.is_complex() else back).to(torch.float64)
    exact = int((back == wide).to(torch.int64).cumprod(0).sum())  # 0 .. exact - 1 are held
    d = exact - 1
    return d - 1 + d % 2


def tiled(n: int, table: torch.Tensor) -> torch.Tensor:
    """n elements, element i holding table[i % len(table)], made in place (no second copy of n elements)."""
    big = torch.empty(n, dtype=table.dtype, device=table.device)
    head = n - n % len(table)
    big[:head].view(-1, len(table)).copy_(table)
    big[head:].copy_(table[:n - head])
    return big


def wraps(n: int, itemsize: int) -> list[int]:
    """Where an offset of a tensor of n elements wraps, in elements: the element boundaries and the byte ones."""
    found = set(bounds.BOUNDS) | {b // itemsize for b in bounds.BOUNDS}
    return sorted(w for w in found if 0 < w < n)


def positions(n: int, itemsize: int) -> torch.Tensor:
    """The oracle's positions: large's (ends, element boundaries, draws) and both sides of each byte boundary."""
    marks = set(bounds.positions(n).tolist())
    for w in wraps(n, itemsize):
        marks |= {w - 2, w - 1, w, w + 1}
    return torch.tensor(sorted(m for m in marks if 0 <= m < n), dtype=torch.int64)


def shadows(at: torch.Tensor, n: int, itemsize: int) -> torch.Tensor:
    """The positions a wrapped offset of a position in ``at`` reaches instead (one boundary away), not in ``at``."""
    indexed = set(at.tolist())
    found = {p + s * w for p in indexed for w in wraps(n, itemsize) for s in (-1, 1)}
    return torch.tensor(sorted(q for q in found if 0 <= q < n and q not in indexed), dtype=torch.int64)


def _finding(case, form: Form, name: str, n: int, d: int, at, checked, actual, expected, wrong):
    """The finding of the first wrong element past a boundary (else the first); a scatter's ``checked`` starts with ``at``."""
    bad = wrong.nonzero().reshape(-1)
    past = bad[checked[bad] >= min(wraps(n, actual.element_size()), default=0)]
    first = int(past[0] if len(past) else bad[0])
    position = int(checked[first])
    a, e = repr(actual[first].item()), repr(expected[first].item())
    if not form.writes:
        what = f"reads {a} for element {position}, which holds {e}"
    elif first < len(at):
        what = f"leaves {a} at element {position}, where it was asked to write {e}"
    else:
        what = f"changes element {position}, which it was not asked to write, from {e} to {a}"
    summary = f"{form.aten.split('.')[1]} [{case.dtype}] on a tensor of {n} elements ({bounds.boundary(name)}) {what}"
    mismatch = Mismatch(path="self" if form.writes else "out", attribute="values", expected=e, actual=a, mismatched=len(bad),
                        numel=len(checked), worst_index=(position,), max_abs_err=None, allowed=0.0)
    detail = (f"{n} elements, element i holding i % {d}; positions indexed: {bounds.span(at)}"
              + (f"; {len(checked) - len(at)} more checked one boundary away" if form.writes else ""))
    data = Detail(probe="index", elements=n, distinct=d, positions=tuple(at.tolist()),
                  shadows=tuple(checked[len(at):].tolist()) if form.writes else ())
    return calls.finding(case, kind="large_size", reference="large", op=form.aten, summary=summary, mismatch=mismatch, detail=detail,
                         data=encode_detail(data))
