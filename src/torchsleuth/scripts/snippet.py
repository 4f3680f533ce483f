"""The few lines of plain torch one pastes into a PyTorch issue: a finding's call, its reference, one assert.

Design note. The repro script (``scripts.checks``) is what one runs: every
tensor rebuilt from its storage's bytes, helpers, a verdict, ~200 lines. An
upstream report wants what a person would write by hand: ``import torch``,
each argument with its values inline (shortest literals that give the same
bits), the call, the reference the finding was judged against, and
``torch.testing.assert_close`` with the finding's tolerance, which raises
while the bug is present. No torchsleuth import, nothing to decode.

A contiguous argument is written as its values (the guard elements the
sweep put after it are left out: a values check never reads them); any
other layout as its storage up to the view's last element, gaps and the
elements before an offset included (``torch.full`` when they are all one
value), viewed with ``as_strided`` at the recorded shape, strides and
offset, so the kernel reads exactly what it read in the sweep. The reference is the generic script's
(``parts.reference_source``): the same call (its functional counterpart for
in-place and ``out=`` calls) on contiguous copies (``layout``), on float64
copies rounded back (``precision``), or on the CPU (``device``). It is
computed before the call, so an in-place call cannot change what it reads.

Where every tensor argument has the result's shape, the first snippet tried
keeps only the worst element of each (``lgamma`` at one number); the whole
shrunk case is the second, for a bug that needs the layout or the length.

``snippets`` answers only for what it can write faithfully: a values or
metadata check of a forward call (functional, method, in-place, ``out=``)
against those three references, every storage inline and small enough to
read (``LIMIT`` elements). Anything else gets a reason, and the caller falls
back to the full script. Whether the snippet reproduces is not decided here:
``report.upstream`` runs it.
"""

from __future__ import annotations

import math
import re
import zlib

import torch

from ..judge.records import Finding
from ..run.records import CallSpec, TensorSpec
from . import parts
from .checks import check_of, why_not

# The most elements one argument's literal may have: past it a snippet is no longer read at a glance.
LIMIT = 64
_NAMES = ("x", "y", "z", "u", "v", "w")
TENSOR = re.compile(r"T\[([\"'])(.*?)\1\]")
_COPY = {"layout": ".contiguous()", "device": ".cpu()"}
_WRITES = ("inplace", "out")


def snippets(finding: Finding) -> tuple[list[str], str]:
    """The snippets of ``finding`` to try, smallest first, or ([], why) when none can be written.

    The first, where every tensor argument has the shape the worst element's index is of, keeps that one element
    of each (an elementwise op's bug at one value needs no more); the second is the whole shrunk case. A bug that
    needs the layout, or the length (a vector path), passes in the first and is left to the second: the caller
    runs them and files the first that fails."""
    why = _why_not(finding)
    if why:
        return [], why
    found = [_source(finding, index) for index in (_worst(finding), None) if index != ()]
    return found, ""


def snippet(finding: Finding) -> tuple[str, str]:
    """The whole shrunk case's snippet (``snippets``' last), or ("", why)."""
    found, why = snippets(finding)
    return (found[-1], "") if found else ("", why)


def _worst(finding: Finding) -> tuple[int, ...] | None:
    """The index of the worst element where every tensor argument is of the result's shape; () where not."""
    m, call = finding.mismatch, finding.call
    shapes = {tuple(s.shape) for s in call.tensors} if call else set()
    if m is None or m.attribute != "values" or not m.worst_index or len(shapes) != 1:
        return ()
    (shape,) = shapes
    if len(shape) != len(m.worst_index) or math.prod(shape) < 2:
        return ()
    return tuple(m.worst_index)


def _source(finding: Finding, index: tuple[int, ...] | None) -> str:
    call = finding.call
    assert call is not None
    names = _names(call)
    lines = ["import torch"]
    for spec in call.tensors:
        lines.append(f"{names[spec.path]} = {_tensor(spec, index)}")
    reference, _ = parts.reference_source(finding, call)
    expected = _sub(reference, names, finding, copy=True)
    if finding.reference == "precision":
        expected = f"({expected}).to(torch.{finding.dtype})"
    written = parts.written(call)
    lines.append(f"expected = {expected}")
    if call.variant in _WRITES:
        lines.append(_sub(parts.call_source(call), names, finding, copy=False))
        actual = names[written[0]] if len(written) == 1 else f"({', '.join(names[p] for p in written)},)"
    else:
        lines.append(f"actual = {_sub(parts.call_source(call), names, finding, copy=False)}")
        actual = "actual"
    atol, rtol = parts.tolerance(finding)
    device = ", check_device=False" if finding.reference == "device" else ""
    lines.append(f"torch.testing.assert_close({actual}, expected, atol={atol:.3g}, rtol={rtol:.3g}, equal_nan=True{device})")
    return "\n".join(lines) + "\n"


def _why_not(finding: Finding) -> str:
    why = why_not(finding)
    if why:
        return why
    call = finding.call
    assert call is not None
    if check_of(finding) not in ("values", "metadata") or finding.reference not in ("precision", *_COPY):
        return (f"a minimal snippet is written for values judged against the layout, precision or device reference, "
                f"not a {finding.kind} against the {finding.reference} reference")
    if call.variant == "backward":
        return "a minimal snippet is written for forward calls; a gradient needs the full script"
    if call.variant in _WRITES and not parts.written(call):
        return "the tensors the call writes are not recorded"
    for spec in call.tensors:
        if spec.data is None:
            return f"{spec.path}'s storage was too large to carry inline"
        if (spec.storage_numel if not _plain(spec) else math.prod(spec.shape)) > LIMIT:
            return f"{spec.path} has more than {LIMIT} elements to write out"
    return ""


def _names(call: CallSpec) -> dict[str, str]:
    """A short name for each argument: ``out`` for what an ``out=`` call writes, x, y, z... for the rest."""
    names, free = {}, iter(_NAMES)
    for spec in call.tensors:
        if spec.path == "out" or spec.path.startswith("out["):
            names[spec.path] = "out" + re.sub(r"\D", "", spec.path)
        else:
            names[spec.path] = next(free, f"t{len(names)}")
    return names


def _sub(source: str, names: dict[str, str], finding: Finding, *, copy: bool) -> str:
    """``source`` with each ``T["path"]`` replaced by its name (and, for the reference, the copy it reads)."""
    specs = {s.path: s for s in finding.call.tensors} if finding.call else {}

    def name(match: re.Match) -> str:
        path = match.group(2)
        if not copy:
            return names[path]
        spec = specs.get(path)
        if finding.reference == "precision":
            wide = spec is not None and (getattr(torch, spec.dtype).is_floating_point or getattr(torch, spec.dtype).is_complex)
            return f"{names[path]}.to({'torch.complex128' if 'complex' in spec.dtype else 'torch.float64'})" if wide else names[path]
        return names[path] + _COPY[finding.reference]

    return TENSOR.sub(name, source)


def _plain(spec: TensorSpec) -> bool:
    """Whether the argument is contiguous at offset 0: written as its values, its guards left out."""
    expected = torch.empty(spec.shape, device="meta").stride()
    strided = any(size > 1 and s != e for size, s, e in zip(spec.shape, spec.stride, expected))
    return spec.storage_offset == 0 and not strided


def _storage(spec: TensorSpec) -> torch.Tensor:
    """The whole storage the argument viewed, from its recorded bytes."""
    dtype = getattr(torch, spec.dtype)
    raw = bytearray(zlib.decompress(spec.data or b""))
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)


def _tensor(spec: TensorSpec, index: tuple[int, ...] | None = None) -> str:
    """The source of one argument: its element at ``index`` alone, its values, or its storage viewed as the kernel
    saw it."""
    dtype = getattr(torch, spec.dtype)
    flat = _storage(spec)
    where = "" if spec.device == "cpu" else f", device={spec.device!r}"
    if index is not None:
        value = flat.as_strided(spec.shape, spec.stride, spec.storage_offset)[index]
        return f"torch.tensor([{number(value.item(), dtype)}], dtype=torch.{spec.dtype}{where})"
    if _plain(spec):
        view = flat.as_strided(spec.shape, spec.stride, spec.storage_offset)
        return f"torch.tensor({_literal(view, dtype)}, dtype=torch.{spec.dtype}{where})"
    # the storage up to the view's last element: the guards after it are never read
    end = spec.storage_offset + sum((size - 1) * stride for size, stride in zip(spec.shape, spec.stride)) + 1 if 0 not in spec.shape else 0
    flat = flat[:max(end, spec.storage_offset)]
    same = flat.numel() > 1 and bool((flat == flat[0]).all() | (flat.isnan().all() if flat.is_floating_point() else False))
    storage = (f"torch.full(({flat.numel()},), {number(flat[0].item(), dtype)}, dtype=torch.{spec.dtype}{where})" if same
               else f"torch.tensor({_literal(flat, dtype)}, dtype=torch.{spec.dtype}{where})")
    return f"{storage}.as_strided({tuple(spec.shape)!r}, {tuple(spec.stride)!r}, {spec.storage_offset})  # {spec.layout}"


def _literal(values: torch.Tensor, dtype: torch.dtype) -> str:
    """``values`` as a nested list of the shortest literals that give the same bits in ``dtype``."""
    if values.dim() == 0:
        return number(values.item(), dtype)
    return "[" + ", ".join(_literal(v, dtype) for v in values.unbind(0)) + "]"


def number(value, dtype: torch.dtype) -> str:
    """``value`` as the shortest Python literal that gives the same bits in ``dtype``."""
    if isinstance(value, bool) or dtype == torch.bool:
        return repr(bool(value))
    if isinstance(value, complex):
        return f"complex({number(value.real, _real(dtype))}, {number(value.imag, _real(dtype))})"
    if not (dtype.is_floating_point or dtype.is_complex):
        return repr(int(value))
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "-float('inf')"
    want = torch.tensor(value, dtype=dtype)
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if torch.equal(torch.tensor(float(text), dtype=dtype), want) and math.copysign(1, float(text)) == math.copysign(1, value):
            return text if any(c in text for c in ".en") else text + ".0"
    return repr(value)


def _real(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex32: torch.float16, torch.complex64: torch.float32}.get(dtype, torch.float64)
