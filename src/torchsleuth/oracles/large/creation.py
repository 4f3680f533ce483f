"""The ``large`` oracle's creation probes: a factory past 2^31 and 2^32 elements (and 2^31 bytes) holds the value of its formula.

Design note. A creation kernel computes an element's value from its index
(``start + i * step``, ``i // cols == i % cols``, a triangle's row and
column) or fills every index with one value. With the index computed in
32 bits it wraps past 2^31 elements (signed) or 2^32 (unsigned), or past
2^31 bytes where the kernel counts bytes: the elements past the wrap get
another index's value, or are never written, silently. A probe makes the op
produce just past a boundary (``bounds.PROBES``: a vector of n elements, an
identity of K x K >= n, a triangle's 2 x K(K+1)/2 indices) and reads it at
the positions the index probes read (both sides of every element and byte
boundary, the ends, seeded draws; an identity's diagonal elements on both
sides of each boundary and the elements one boundary away from them, where a
wrapped 1 would land; where a triangle's column row starts). The expected
value at a position comes from the index alone, computed in float64 or
int64: the formula PyTorch documents (linspace's ``start + i * (end -
start) / (steps - 1)``, which ATen computes from both ends; arange's ``start
+ i * step``), no second large call. Floating results are judged with the
judge's tolerance table for the dtype (``|actual - expected| <= atol + rtol
* |expected|``), the rest exactly; a draw (randint) must lie in its range.

Which ops. The catalog's creation ops are the entries whose aten packet
has a functional overload taking the tensor options (``layout``,
``pin_memory``) and returning a tensor of its own (``catalog_ops``: arange,
linspace, logspace, full, ones, zeros, eye, tril/triu_indices, the ``_like``
and ``new_`` factories, the empty and random ones, scalar_tensor). ``FORMS``
says how to call those a probe can check, keyed by op, as Python source the
oracle evaluates and the repro script (large.script) runs: N the elements,
K an identity's or triangle's size, S arange's step (1, or a power of two
small enough that N * S fits float16), DTYPE, DEVICE, and ``t`` a tensor
made first (a ``_like`` op's template, zeros' ``out=`` buffer, filled with
ones so an element it leaves unwritten shows). A dtype a form does not take
is not planned: an arange in an integer type narrower than 64 bits cannot
hold N values, and its values computed modulo 2^32 hide a wrapped index; a
linspace or logspace in an integer type holds a few truncated values. Not
probed (bench/deep-large.md): the empty factories (values undefined),
scalar_tensor (one element), zeros_like and new_zeros (0, what fresh memory
holds: nothing to tell a skipped write by), randn, rand_like, randn_like and
normal (no value at an index, and any value in range).

An element a kernel never writes holds what the memory held. On the CPU a
tensor of gigabytes is fresh pages, zeros; on CUDA the caching allocator
hands back a block an earlier probe freed, holding its values, so before the
call a zeroed block of the same size is made and freed there (``dirty``),
which the call most likely gets. Zero is the expected value only of zeros
(probed through ``out=`` on ones), an identity's off-diagonal and a
triangle's first row and column. A finding's ``Detail`` (large.detail) is
the elements, K, S and the positions read: what its script makes and checks
again.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch

from ...cases import opinfo, reach
from ...judge import calls
from ...judge.verdict import one_line
from ...judge.plugin import encode_detail
from ...judge.records import Mismatch, Outcome
from ...judge.tolerance import table
from . import bounds, index
from .detail import Detail


def _any(dtype: torch.dtype) -> bool:
    return True


def _inexact(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _wide(dtype: torch.dtype) -> bool:  # holds every index up to 2^32 + PAD, and wraps nothing modulo 2^32
    return dtype == torch.int64 or dtype.is_floating_point


@dataclass(frozen=True, slots=True)
class Form:
    aten: str  # the overload the call reaches
    call: str  # Python over N, K, S, DTYPE, DEVICE, t
    expected: str  # Python over i (the flat positions read, int64), N, K, S: the values there, or (low, high) for a draw
    takes: Callable[[torch.dtype], bool] = _any
    shape: str = "line"  # "line": N elements; "square": K x K (eye); "triangle": 2 x K(K+1)/2 (tril/triu_indices)
    before: str = ""  # t, made before the call (and before ``dirty``)
    copies: int = 1  # tensors of N elements alive at once: t (and, off the CPU, dirty's block beside it) or the result


_OPTIONS = "dtype=DTYPE, device=DEVICE"
_ONES = f"torch.ones(N, {_OPTIONS})"
_TEMPLATE = f"torch.empty(N, {_OPTIONS})"
FORMS = {
    "arange": Form("aten.arange.start_step", f"torch.arange(0, N * S, S, {_OPTIONS})", "i.double() * S", takes=_wide),
    "linspace": Form("aten.linspace.default", f"torch.linspace(1, 3, N, {_OPTIONS})", "1 + 2 * i.double() / (N - 1)", takes=_inexact),
    "linspace.tensor_overload": Form("aten.linspace.Tensor_Tensor", f"torch.linspace(torch.tensor(1.0), torch.tensor(3.0), N, {_OPTIONS})",
                                     "1 + 2 * i.double() / (N - 1)", takes=_inexact),
    "logspace": Form("aten.logspace.default", f"torch.logspace(-1, 1, N, base=2, {_OPTIONS})", "2 ** (-1 + 2 * i.double() / (N - 1))",
                     takes=_inexact),
    "logspace.tensor_overload": Form("aten.logspace.Tensor_Tensor",
                                     f"torch.logspace(torch.tensor(-1.0), torch.tensor(1.0), N, base=2, {_OPTIONS})",
                                     "2 ** (-1 + 2 * i.double() / (N - 1))", takes=_inexact),
    "full": Form("aten.full.default", f"torch.full((N,), 3, {_OPTIONS})", "torch.full_like(i, 3)"),
    "ones": Form("aten.ones.default", f"torch.ones(N, {_OPTIONS})", "torch.ones_like(i)"),
    "zeros": Form("aten.zeros.out", "torch.zeros(N, out=t)", "torch.zeros_like(i)", before=_ONES, copies=2),  # t, dirty's block
    "full_like": Form("aten.full_like.default", "torch.full_like(t, 3)", "torch.full_like(i, 3)", before=_TEMPLATE, copies=2),
    "ones_like": Form("aten.ones_like.default", "torch.ones_like(t)", "torch.ones_like(i)", before=_TEMPLATE, copies=2),
    "new_full": Form("aten.new_full.default", f"torch.empty(0, {_OPTIONS}).new_full((N,), 3)", "torch.full_like(i, 3)"),
    "new_ones": Form("aten.new_ones.default", f"torch.empty(0, {_OPTIONS}).new_ones((N,))", "torch.ones_like(i)"),
    "eye": Form("aten.eye.default", f"torch.eye(K, {_OPTIONS})", "i // K == i % K", shape="square"),
    "tril_indices": Form("aten.tril_indices.default", f"torch.tril_indices(K, K, {_OPTIONS})", "triangle(i, K, upper=False)",
                         shape="triangle"),
    "triu_indices": Form("aten.triu_indices.default", f"torch.triu_indices(K, K, {_OPTIONS})", "triangle(i, K, upper=True)",
                         shape="triangle"),
    "randint": Form("aten.randint.low", f"torch.randint(1, 8, (N,), {_OPTIONS})", "(1, 8)"),
    "randint_like": Form("aten.randint_like.low_dtype", "torch.randint_like(t, 1, 8)", "(1, 8)", before=_TEMPLATE, copies=2),
}


def catalog_ops() -> tuple[str, ...]:
    """The catalog's creation ops: a functional overload of the entry's packet takes the tensor options and returns its own tensor."""
    return tuple(name for name, entry in opinfo.catalog().items() if _creates(reach.aten_name(entry)))


@functools.cache
def _creates(packet: str) -> bool:
    for name in reach.overloads(packet):
        schema = reach.overload(name)._schema
        if reach.is_out(name) or any(r.alias_info is not None for r in schema.returns):
            continue
        if {"layout", "pin_memory"} <= {a.name for a in schema.arguments}:
            return True
    return False


def plan(unit) -> list[str]:
    form = FORMS.get(unit.op)
    dtype = getattr(torch, unit.dtype)
    if form is None or not form.takes(dtype) or not _creates(reach.aten_name(opinfo.get(unit.op))):
        return []
    return [f"large:creation={name}" for name in bounds.PROBES if not (name == "bytes" and dtype.itemsize == 1)]


def sizes(form: Form, target: int) -> tuple[int, int]:
    """(n, K): the elements the op makes, at least ``target``, and its size argument (an identity's or triangle's K)."""
    if form.shape == "square":
        k = math.isqrt(target - 1) + 1
        return k * k, k
    if form.shape == "triangle":
        k = (math.isqrt(4 * target + 1) - 1) // 2
        k += k * (k + 1) < target
        return k * (k + 1), k
    return target, target


def step(dtype: torch.dtype, n: int) -> float | int:
    """arange's step: 1, or the power of two that keeps n * S under half the dtype's largest value (float16's 65504)."""
    if not dtype.is_floating_point:
        return 1
    room = math.floor(math.log2(torch.finfo(dtype).max)) - 1 - math.ceil(math.log2(n))
    return 1 if room >= 0 else 2.0 ** room


def run(subject) -> Outcome:
    case = subject.case
    if case.edits:  # the shrinker's: a smaller sample changes nothing here
        return Outcome(case=case, status="skip", reason="the creation probes make their own tensors: the sample's edits do not apply")
    form = FORMS.get(case.op)
    dtype = getattr(torch, case.dtype)
    if form is None or not form.takes(dtype):
        return Outcome(case=case, status="skip", reason=f"no creation probe is known for {case.op} in {case.dtype}")
    name = case.oracle.split("=", 1)[1]
    n, k = sizes(form, bounds.PROBES[name](dtype.itemsize))
    short = bounds.short_of_memory(case.device, form.copies * n * dtype.itemsize)
    if short:
        return Outcome(case=case, status="skip", reason=short)
    s = step(dtype, n)
    at = positions(form, n, k, dtype.itemsize)
    space = {"torch": torch, "N": n, "K": k, "S": s, "DTYPE": dtype, "DEVICE": case.device, "t": None}
    result = None
    try:
        space["t"] = eval(form.before, space) if form.before else None  # noqa: S307 (FORMS' own text)
        dirty(n * dtype.itemsize, case.device)
        result = eval(form.call, space)  # noqa: S307
        actual = result.reshape(-1)[at.to(result.device)].cpu()
    except torch.OutOfMemoryError:
        return Outcome(case=case, status="skip", reason=f"the call of {n} elements ran out of memory")
    except Exception as e:
        return Outcome(case=case, status="skip", reason=f"the call of {n} elements raised: {one_line(e)}")
    finally:
        shape = tuple(result.shape) if result is not None else ()
        del result, space
    expected = eval(form.expected, {"torch": torch, "i": at, "N": n, "K": k, "S": s, "triangle": triangle})  # noqa: S307
    tolerance = table(dtype, subject.override)
    bad = wrong(actual, expected, dtype, tolerance.atol, tolerance.rtol)
    if not bool(bad.any()):
        return Outcome(case=case, status="pass", reason=f"{n} elements {list(shape)}; {len(at)} positions checked")
    return Outcome(case=case, status="finding", findings=(_finding(case, form, name, n, k, s, shape, at, actual, expected, bad, tolerance),))


def positions(form: Form, n: int, k: int, itemsize: int) -> torch.Tensor:
    """The index probes' positions, and the form's own: an identity's diagonal and its shadows, a triangle's second row's start."""
    marks = set(index.positions(n, itemsize).tolist())
    if form.shape == "square":
        diagonal = {d * (k + 1) for w in index.wraps(n, itemsize) for d in (w // (k + 1), w // (k + 1) + 1) if d < k}
        marks |= diagonal | set(index.shadows(torch.tensor(sorted(diagonal), dtype=torch.int64), n, itemsize).tolist())
    elif form.shape == "triangle":
        marks |= {n // 2 - 2, n // 2 - 1, n // 2, n // 2 + 1}
    return torch.tensor(sorted(m for m in marks if 0 <= m < n), dtype=torch.int64)


def dirty(nbytes: int, device: str) -> None:
    """Off the CPU, leave a zeroed free block of ``nbytes`` in the caching allocator: an element the call never writes reads 0."""
    if torch.device(device).type != "cpu":
        torch.zeros(nbytes, dtype=torch.uint8, device=device)


def triangle(i: torch.Tensor, k: int, upper: bool) -> torch.Tensor:
    """Element i of ``torch.tril_indices(k, k)`` (``triu_indices`` with ``upper``): row r's entries, then their columns."""
    count = k * (k + 1) // 2
    j = i % count
    if upper:  # counted from the end, triu's order is tril's of the matrix turned half a turn
        j = count - 1 - j
    r = ((torch.sqrt(8 * j.double() + 1) - 1) / 2).floor().to(torch.int64)
    r = r - (r * (r + 1) // 2 > j).to(torch.int64) + ((r + 1) * (r + 2) // 2 <= j).to(torch.int64)
    c = j - r * (r + 1) // 2
    if upper:
        r, c = k - 1 - r, k - 1 - c
    return torch.where(i < count, r, c)


def wrong(actual: torch.Tensor, expected, dtype: torch.dtype, atol: float, rtol: float) -> torch.Tensor:
    """Which elements read are not what the math gives: within tolerance for floating dtypes, exact otherwise, in range for a draw."""
    if isinstance(expected, tuple):
        low, high = expected
        return ~((actual.double() >= low) & (actual.double() < high))
    if dtype.is_floating_point or dtype.is_complex:
        a = actual.to(torch.complex128 if dtype.is_complex else torch.float64)
        e = expected.to(torch.float64)
        return ~((a - e).abs() <= atol + rtol * e.abs())
    return actual.to(torch.int64) != expected.to(dtype).to(torch.int64)


def _finding(case, form: Form, name: str, n: int, k: int, s, shape, at, actual, expected, bad, tolerance):
    """The finding of the first wrong element past a boundary (else the first)."""
    wrong_at = bad.nonzero().reshape(-1)
    past = wrong_at[at[wrong_at] >= min(index.wraps(n, actual.element_size()), default=0)]
    first = int(past[0] if len(past) else wrong_at[0])
    position = int(at[first])
    a = repr(actual[first].item())
    if isinstance(expected, tuple):
        e, what = f"[{expected[0]}, {expected[1]})", f"where the values lie in [{expected[0]}, {expected[1]})"
    else:
        e = repr(expected.to(torch.float64 if _inexact(actual.dtype) else actual.dtype)[first].item())  # full's 3 is True in bool
        what = f"where {form.expected} gives {e}"
    where = f"element {position}" + (f" (row {position // shape[-1]}, column {position % shape[-1]})" if len(shape) == 2 else "")
    short = form.aten.split(".")[1]
    summary = (f"{short} [{case.dtype}] of {n} elements {list(shape)} ({bounds.boundary(name)}) gives {a} at {where} {what} "
               f"({len(wrong_at)} of {len(at)} positions read are wrong, the first at element {int(at[wrong_at[0]])})")
    inexact = _inexact(actual.dtype)
    mismatch = Mismatch(path="out", attribute="values", expected=e, actual=a, mismatched=len(wrong_at), numel=len(at), worst_index=(position,),
                        max_abs_err=None, atol=tolerance.atol if inexact else 0.0, rtol=tolerance.rtol if inexact else 0.0, allowed=0.0)
    detail = f"{form.call} with N={n}, K={k}, S={s}; {len(wrong_at)} of {len(at)} positions read are wrong: {bounds.span(at[wrong_at])}"
    data = Detail(probe="creation", elements=n, distinct=0, positions=tuple(at.tolist()), size=k, step=float(s))
    return calls.finding(case, kind="large_size", reference="large", op=form.aten, summary=summary, mismatch=mismatch, detail=detail,
                         data=encode_detail(data))
