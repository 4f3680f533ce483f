"""Findings seen from outside a case: the worker died, hung, or lost its device."""

from __future__ import annotations

import hashlib

from ..cases.records import Case
from ..run.records import CallSpec
from .records import Finding, Outcome


def isolation_outcome(case: Case, kind: str, detail: str, call: CallSpec | None = None) -> Outcome:
    """A crash or hang, as the outcome of the case that caused it."""
    digest = hashlib.sha256(f"{case.id}|{kind}|isolation".encode()).hexdigest()[:10]
    what = "crashes" if kind == "crash" else "hangs"
    placed = ", ".join(f"{layout} {path}" for path, layout in case.layouts) or "contiguous tensors"
    if case.oracle:  # a deeper oracle's case makes calls of its own (a compile, a peer process, a large probe)
        placed += f" in the {case.oracle.split(':', 1)[0]} oracle's case"
    finding = Finding(
        id=f"f-{digest}", kind=kind, op=case.op, opinfo=case.op, variant=case.variant, dtype=case.dtype,
        device=case.device, reference="isolation", case_id=case.id, layouts=case.layouts,
        summary=f"{case.op} ({case.variant}) [{case.dtype}] {what} on {placed}: {detail}", detail=detail, call=call,
    )
    return Outcome(case=case, status="finding", reason=detail, findings=(finding,))
