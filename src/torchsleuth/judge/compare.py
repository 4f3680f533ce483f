"""Comparing two results leaf by leaf, metadata before values, mismatches as data.

A result is a tree of tensors and Python values; both sides are flattened to
``(path, leaf)`` pairs (``out``, ``out[1]``, ``grad[input]``). For each pair the
structure, then the type, shape and dtype are compared, and only then the
values. Values are compared on the CPU in float64 (complex128): NaN matches
NaN, an infinity matches the same infinity (or a value of its sign within a
few units and the conditioning term of the dtype's largest: ``brink``), and a
finite element passes when ``|actual - expected| <= allowed`` (judge.tolerance). Integer and bool values
must match exactly unless a slack is given for them.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..dtypes import is_inexact, name as dtype_name, wide
from ..run.transfer import to_host
from ..run.tree import output_leaves
from .records import Mismatch
from .tolerance import SLACK, Tolerance

Leaves = list[tuple[str, Any]]

# Units (eps) of the dtype within which a finite value at the overflow bound and an infinity are one result (``brink``),
# plus the conditioning term: the judges' slack is 2 * SLACK times the move of the result when its inputs are rounded.
BRINK_ULPS = 1.0
BRINK_SHARE = 2 * SLACK


def flatten(value: Any, root: str = "out") -> Leaves:
    if isinstance(value, dict):
        return [(f"{key}", v) for key, v in value.items()]
    return output_leaves(value, root)


def compare(
    actual: Leaves,
    expected: Leaves,
    *,
    tolerance: Callable[[torch.dtype], Tolerance],
    slack: dict[str, torch.Tensor] | None = None,
    check_dtype: bool = True,
    bitwise: bool = False,
) -> list[Mismatch]:
    """Every leaf where ``actual`` is not ``expected`` within tolerance (none: they agree)."""
    found = []
    expected_paths = [p for p, _ in expected]
    if [p for p, _ in actual] != expected_paths:
        return [Mismatch(path="out", attribute="structure", expected=str(expected_paths), actual=str([p for p, _ in actual]))]
    actual, expected = on_host(actual, expected)
    for (path, a), (_, e) in zip(actual, expected):
        mismatch = compare_leaf(path, a, e, tolerance=tolerance, slack=(slack or {}).get(path), check_dtype=check_dtype, bitwise=bitwise)
        if mismatch is not None:
            found.append(mismatch)
    return found


def on_host(*trees: Leaves) -> list[Leaves]:
    """Each tree with its readable strided device tensors copied to the CPU, all at once: the copies are queued
    (into pinned memory, off a CUDA device) and waited for together, one synchronization for the lot where a ``.cpu()``
    per leaf would wait once per leaf (``split`` returns thousands of them). Other leaves are kept as they are."""
    picked = [(i, j) for i, leaves in enumerate(trees) for j, (_, v) in enumerate(leaves)
              if isinstance(v, torch.Tensor) and v.device.type != "cpu" and v.layout == torch.strided and readable(v)]
    copies = iter(to_host([trees[i][j][1].detach().resolve_conj().resolve_neg() for i, j in picked]))
    moved = [list(leaves) for leaves in trees]
    for i, j in picked:
        moved[i][j] = (moved[i][j][0], next(copies))
    return moved


def compare_leaf(path, a, e, *, tolerance, slack=None, check_dtype=True, bitwise=False) -> Mismatch | None:
    a, e = dense(a), dense(e)
    if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
        if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
            return Mismatch(path=path, attribute="type", expected=type(e).__name__, actual=type(a).__name__)
        return _tensors(path, a, e, tolerance=tolerance, slack=slack, check_dtype=check_dtype, bitwise=bitwise)
    if isinstance(e, (bool, int, float, complex)) and isinstance(a, (bool, int, float, complex)) and not isinstance(e, bool):
        return _tensors(path, torch.tensor(a), torch.tensor(e), tolerance=tolerance, slack=None, check_dtype=False, bitwise=bitwise)
    if type(a) is not type(e) or a != e:
        return Mismatch(path=path, attribute="value", expected=repr(e)[:80], actual=repr(a)[:80])
    return None


def dense(value: Any) -> Any:
    """A sparse tensor as the dense one it stands for; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.layout != torch.strided:
        return value.to_dense()
    return value


def readable(t: torch.Tensor) -> bool:
    """Whether ``t``'s storage can be read: a kernel that corrupts an out= tensor can leave it invalid.

    Only strided tensors have one storage to ask; a sparse tensor (``to_sparse``,
    a sparse gradient) has none, and neither has autograd's efficient zero
    tensor (``sgn``'s gradient of a real input): that is no fault.
    """
    if t.layout != torch.strided or getattr(t, "_is_zerotensor", lambda: False)():
        return True
    try:
        t.untyped_storage().data_ptr()
        return True
    except NotImplementedError:  # a tensor with no storage of its own (a wrapper subclass)
        return True
    except RuntimeError:
        return False


def _tensors(path, a: torch.Tensor, e: torch.Tensor, *, tolerance, slack, check_dtype, bitwise) -> Mismatch | None:
    if not readable(a):
        return Mismatch(path=path, attribute="storage", expected="a readable storage", actual="a storage whose data pointer is invalid")
    if a.shape != e.shape:
        return Mismatch(path=path, attribute="shape", expected=str(list(e.shape)), actual=str(list(a.shape)))
    if check_dtype and a.dtype != e.dtype:
        return Mismatch(path=path, attribute="dtype", expected=dtype_name(e.dtype), actual=dtype_name(a.dtype))
    a = a.detach().resolve_conj().resolve_neg().cpu()
    e = e.detach().resolve_conj().resolve_neg().cpu()
    if a.is_quantized or e.is_quantized:
        a, e = a.dequantize(), e.dequantize()
    if bitwise:
        return _bitwise(path, a, e)
    inexact = is_inexact(a.dtype) or is_inexact(e.dtype)
    tol = tolerance(a.dtype) if inexact else Tolerance(atol=0.0, rtol=0.0)
    if inexact and a.dtype == e.dtype and _equal(a, e):  # equal values, none NaN: within any tolerance (most leaves)
        return None
    work = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    if not inexact and slack is None:
        if torch.equal(a, e.to(a.dtype)):
            return None
        work = torch.float64 if a.dtype != torch.int64 and e.dtype != torch.int64 else torch.int64
    a64, e64 = a.to(work), e.to(work)
    if work == torch.int64:
        bad = a64 != e64
        diff = (a64 - e64).abs().to(torch.float64)
        allowed = torch.zeros_like(diff)
    else:
        bad, diff, allowed = elementwise(a64, e64, tol, slack, dtype=a.dtype if a.is_floating_point() else None)
    if not bool(bad.any()):
        return None
    excess = torch.where(bad, torch.nan_to_num(diff - allowed, nan=math.inf, posinf=math.inf), torch.full_like(diff, -math.inf))
    flat = int(excess.reshape(-1).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    return Mismatch(
        path=path, attribute="values",
        expected=_fmt(e.reshape(-1)[flat]), actual=_fmt(a.reshape(-1)[flat]),
        mismatched=int(bad.sum()), numel=a.numel(), worst_index=index,
        max_abs_err=_finite_or_inf(diff.reshape(-1)[flat]),
        atol=tol.atol, rtol=tol.rtol, allowed=float(allowed.reshape(-1)[flat]),
    )


def set_aside(actual: Leaves, expected: Leaves, masks: dict[str, torch.Tensor]) -> Leaves:
    """``actual`` with the elements ``masks`` marks (a bool mask per path) taken from ``expected``: elements a rule has
    explained, which the comparison made again then passes."""
    return [(p, torch.where(masks[p].to(v.device), e.to(v.device), v) if p in masks else v) for (p, v), (_, e) in zip(actual, expected)]


def elementwise(a64: torch.Tensor, e64: torch.Tensor, tol: Tolerance, slack=None, *,
                dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rule of ``compare`` element by element, on float64 (or complex128) tensors of one shape: where ``a64`` is not
    ``e64`` within ``tol`` plus ``slack`` (an infinity or NaN must match exactly, but at the brink of the range of the
    real ``dtype`` the values were computed in, where given: ``brink``), with the differences and what each element was
    allowed."""
    diff = (a64 - e64).abs()
    finite = torch.isfinite(e64)
    allowed = tol.atol + tol.rtol * e64.abs()
    if slack is not None:
        allowed = allowed + slack.to(torch.float64).reshape(allowed.shape)
    allowed = torch.where(finite, allowed, torch.zeros_like(allowed))  # inf and NaN must match exactly
    same = (a64 == e64) | (_isnan(a64) & _isnan(e64))
    bad = ~same & ~(diff <= allowed)  # NaN in diff counts as bad
    if a64.is_complex():
        bad = _complex_nonfinite(a64, e64, bad, tol, slack)
    elif dtype is not None and bool(bad.any()):
        bad = bad & ~brink(a64, e64, slack, dtype)
    return bad, diff, allowed


def brink(a64: torch.Tensor, e64: torch.Tensor, slack, dtype: torch.dtype) -> torch.Tensor:
    """Where one side is an infinity and the other a finite value of its sign within ``BRINK_ULPS`` units of ``dtype``
    plus the move rounding its inputs makes (``slack / BRINK_SHARE``) of the dtype's largest value: a result within rounding of the
    overflow bound rounds either way (float32 erfcx at the last number whose exact value fits rounds ``x * x`` first,
    within its conditioning, and gives inf; float64 entr gives the largest value at the first number past it), so
    the infinity stands for the bound and is judged as it. The table's tolerance does not count here: an infinity is
    no value a few parts in a million off, and a kernel overflowing a window early (lgamma's ``x * log(x)``) is found."""
    info = torch.finfo(dtype)
    infinite, finite = (torch.isinf(a64) & torch.isfinite(e64)), (torch.isfinite(a64) & torch.isinf(e64))
    value = torch.where(infinite, e64, a64)
    allowed = BRINK_ULPS * info.eps * value.abs()
    if slack is not None:
        allowed = allowed + slack.to(torch.float64).reshape(allowed.shape) / BRINK_SHARE
    side = torch.where(infinite, a64, e64)
    bound = info.max * (1 + info.eps / 2)  # half a unit past the largest value: from there on a value rounds to an infinity
    return (infinite | finite) & (torch.sign(value) == torch.sign(side)) & (value.abs() + allowed >= bound)


def _equal(a: torch.Tensor, e: torch.Tensor) -> bool:
    """``torch.equal``; False where it has no kernel for the dtype (complex32), which the element-wise rule then judges."""
    try:
        return torch.equal(a, e)
    except (NotImplementedError, RuntimeError):
        return False


def _bitwise(path: str, a: torch.Tensor, e: torch.Tensor) -> Mismatch | None:
    if a.dtype != e.dtype:
        return Mismatch(path=path, attribute="dtype", expected=dtype_name(e.dtype), actual=dtype_name(a.dtype))
    if a.numel() == 0:
        return None
    if a.dtype == torch.bool:
        bad = a != e
    else:
        # compare the bits, so that NaN payloads and signed zeros count too
        bad = (bytes_of(a) != bytes_of(e)).any(-1).reshape(a.shape)
    if not bool(bad.any()):
        return None
    flat = int(bad.reshape(-1).to(torch.uint8).argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    err = None
    if is_inexact(a.dtype):
        err = _finite_or_inf((a.reshape(-1)[flat].to(wide(a.dtype)) - e.reshape(-1)[flat].to(wide(a.dtype))).abs())
    return Mismatch(
        path=path, attribute="values", expected=_fmt(e.reshape(-1)[flat]), actual=_fmt(a.reshape(-1)[flat]),
        mismatched=int(bad.sum()), numel=a.numel(), worst_index=index, max_abs_err=err, allowed=0.0,
    )


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The bytes of each element of ``t`` (on the CPU), one row an element."""
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.detach().reshape(-1))  # a fresh buffer: a size-1 view may keep any stride
    return flat.view(torch.uint8).reshape(-1, flat.element_size())


def _complex_nonfinite(a: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, tol: Tolerance, slack) -> torch.Tensor:
    """``bad`` where either complex value has a part that is infinite or NaN, judged part by part instead.

    The difference of two complex values with an infinite part is NaN even when their finite parts agree, so
    there the real and imaginary parts are compared each on its own (the tolerance rule on a finite part, exact
    on a non-finite one); and a complex infinity whose other part is NaN (``inf+nanj``) matches any complex
    infinity, as C99's Annex G counts every value with an infinite part one infinity, direction undefined.
    """
    nonfinite = ~torch.isfinite(a) | ~torch.isfinite(e)
    if not bool(nonfinite.any()):
        return bad
    extra = 0.0 if slack is None else slack.to(torch.float64).reshape(a.shape)

    def part_bad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        allowed = torch.where(torch.isfinite(y), tol.atol + tol.rtol * y.abs() + extra, torch.zeros_like(y))
        return ~((x == y) | (torch.isnan(x) & torch.isnan(y))) & ~((x - y).abs() <= allowed)

    parts = part_bad(a.real, e.real) | part_bad(a.imag, e.imag)
    infinity = torch.isinf(a) & torch.isinf(e) & (torch.isnan(a) | torch.isnan(e))
    return torch.where(nonfinite, parts & ~infinity, bad)


def _isnan(t: torch.Tensor) -> torch.Tensor:
    return torch.isnan(t) if t.is_floating_point() or t.is_complex() else torch.zeros_like(t, dtype=torch.bool)


def _finite_or_inf(x: torch.Tensor) -> float:
    value = float(x.real if x.is_complex() else x)
    return value if not math.isnan(value) else math.inf


def _fmt(x: torch.Tensor) -> str:
    value = x.item()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, complex):
        return f"({value.real:.6g}{value.imag:+.6g}j)"
    return str(value)
