"""The elementwise rule of the ``sizes`` and ``large`` oracles, as the code their repro scripts run.

Design note. Both oracles compare an element's result with the same value's
result computed elsewhere (alone, or in a short tensor) and call a
difference a finding only when it changes the class of the value (a NaN
against a number, an infinity against anything else, the sign of a zero
where it matters), is in an integer or bool result, or exceeds the
tolerance. A repro script knows no float64 reference, so it carries what the
rule allowed as the table's ``ATOL`` and ``RTOL`` and one absolute ``SLACK``
(the op's measured sensitivity at the worst element), and runs the functions
below, copied in with ``source``. They read those constants,
``REFERENCE`` (what the expected values are, in words; ``constants`` writes
all four) and ``fmt`` (the repro kit's, scripts.kit, which the script's
preamble copies in) as the script's own globals; the values here are only
what plain use sees.

They need only torch: they sit with the judge (not with the repro kit,
scripts/) so that both oracles share one copy without importing each other.
"""

from __future__ import annotations

import inspect

import torch

# A script's own globals (see the design note): what plain use sees.
ATOL, RTOL, SLACK = 0.0, 0.0, 0.0
REFERENCE = "the reference"
fmt = repr


def poison(dtype):
    """What fills storage around an argument: NaN, or an unlikely integer."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).max - 3


def placed(t, offset=0):
    """A copy of ``t`` in a fresh storage at ``offset``, poison before and after it."""
    storage = torch.full((offset + t.numel() + 4,), poison(t.dtype), dtype=t.dtype, device=t.device)
    view = storage[offset:offset + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def disagree(a, e, signed_zero):
    """Elementwise: ``a`` and ``e`` differ by a change of class, in an integer or bool, or by more than
    ATOL + RTOL * |e| + SLACK (bits that differ less, NaN payloads included, are no finding)."""
    a, e = a.detach().cpu(), e.detach().cpu()
    if not (a.is_floating_point() or a.is_complex()):
        return a != e
    parts = [(a.real, e.real), (a.imag, e.imag)] if a.is_complex() else [(a, e)]
    worse = torch.zeros(a.shape, dtype=torch.bool)
    for x, y in parts:
        x, y = x.double(), y.double()
        changed = (torch.isnan(x) != torch.isnan(y)) | ((torch.isinf(x) | torch.isinf(y)) & (x != y))
        if signed_zero:
            changed |= (x == 0) & (y == 0) & (torch.signbit(x) != torch.signbit(y))
        far = torch.isfinite(x) & torch.isfinite(y) & ((x - y).abs() > ATOL + RTOL * y.abs() + SLACK)
        worse |= changed | far
    return worse


def report(label, path, a, e, bad, where):
    """Prints up to five disagreeing elements; ``where(i)`` says what element ``i`` holds."""
    flat = bad.reshape(-1).nonzero().reshape(-1).tolist()
    print(f"{label}: {path}: {len(flat)} of {bad.numel()} element(s) disagree with {REFERENCE}")
    for i in flat[:5]:
        print(f"    {where(i)}: {fmt(a.reshape(-1)[i])} here, {fmt(e.reshape(-1)[i])} {REFERENCE}")


_HELPERS = {"poison": poison, "placed": placed, "disagree": disagree, "report": report}
_USES = {"placed": ("poison",)}
# What the helpers need of the repro kit (scripts.kit): a script's preamble copies these in.
KIT = ("fmt",)


def constants(*, atol: float, rtol: float, slack: float, reference: str) -> list[str]:
    """The script lines that set the globals the helpers read."""
    return [
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # the tolerance table's, for this dtype",
        f"SLACK = {slack!r}  # what torchsleuth's rule allowed beyond them at the worst element",
        f"REFERENCE = {reference!r}  # what each element is compared with",
    ]


def source(*names: str) -> str:
    """The helpers ``names``, with the ones they call, as script source (two blank lines apart)."""
    ordered = dict.fromkeys(name for wanted in names for name in (*_USES.get(wanted, ()), wanted))
    return "\n\n\n".join(inspect.getsource(_HELPERS[name]).rstrip("\n") for name in ordered) + "\n"
