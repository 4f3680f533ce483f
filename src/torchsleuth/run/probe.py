"""Probing a dtype OpInfo does not declare for an op: does the kernel take it?

Design note. OpInfo declares the dtypes an op is tested in, not the ones its
kernel accepts: kernels often take more (an integer or bool path, a half
path) and nobody tests those. With ``SweepConfig.probe_dtypes`` a unit is
planned for every dtype of the sweep OpInfo can make samples in
(``cases.select.units``); the worker first makes the first chosen sample's
functional call in that dtype. If it raises, the kernel refuses the dtype
(loud, so not ours to report) and the unit is one ``skip`` outcome with the
probe's reason; if not, the unit is swept like a declared one, and its
backward too when the dtype is floating or complex.

The references need nothing new: the precision reference (float64 on the
CPU) judges floating and complex dtypes only, and integer and bool results
are judged exactly against the contiguous call (the layout reference).

The probe is announced as its functional case (``("begin", case_id)``), so a
kernel that kills the worker or never returns on the dtype is that case's
crash or hang. Each probed unit says how its probe went in a note
(``probe accepted`` or ``probe refused``), which the summary counts.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import torch

from ..cases import opinfo
from ..cases.records import Case, Unit
from . import call


def declared(entry, unit: Unit) -> bool:
    """Whether OpInfo declares ``unit``'s dtype for its op on its device type."""
    return getattr(torch, unit.dtype) in opinfo.dtypes(entry, torch.device(unit.device).type)


def backward_allowed(entry, device_type: str, dtype: torch.dtype) -> bool:
    """Whether the backward of ``entry`` is swept in ``dtype``: declared, or a probed floating or complex dtype."""
    if dtype in opinfo.dtypes(entry, device_type, backward=True):
        return True
    inexact = dtype.is_floating_point or dtype.is_complex
    return inexact and getattr(entry, "supports_autograd", False) and dtype not in opinfo.dtypes(entry, device_type)


def probe(unit: Unit, function, samples: list, chosen: list[int], skip: frozenset[str], only: str | None) -> Iterator[tuple[str, object]]:
    """Events of the probe of ``unit``'s dtype (its ``begin``, its note); returns why the kernel refuses, or None.

    ``chosen``: the indices of the samples the unit sweeps; the first is probed. A probe whose case is in ``skip``
    is not made again: the unit is resumed after it (it took the dtype, or its crash is already reported, and a
    crash made again would loop). A part of a split unit (workers.parts) whose probe is another part's makes the
    call too, unreported, to know whether to run its own cases.
    """
    if not chosen:
        return None
    case = Case(op=unit.op, variant="functional", dtype=unit.dtype, device=unit.device, sample=chosen[0])
    theirs = getattr(skip, "theirs", lambda case_id: False)(case.id)  # a part of a split unit whose probe another part runs
    if case.id in skip and not theirs:
        return None
    if not theirs:
        yield "begin", case.id
    refused = refusal(case, function, samples[chosen[0]])
    if only is None:
        yield "note", f"probe {'refused' if refused else 'accepted'}"
    return refused


def refusal(case: Case, function, sample) -> str | None:
    """Why the kernel refuses ``case``'s dtype (the call raised), or None when it takes it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepared = call.prepare(case, function, sample)
            call.compute(prepared)
            call.synchronize(case.device)
    except Exception as e:
        text = str(e).strip().splitlines()
        return f"the kernel refuses {case.dtype} (probe raised: {type(e).__name__}: {text[0][:200] if text else ''})"
    return None
