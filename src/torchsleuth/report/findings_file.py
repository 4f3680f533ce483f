"""The findings file (``--json PATH``): the stable contract other tools parse.

Design note. The field names and their nesting are DESIGN.md's "Findings
file" section, exactly; tools may rely on them, so a field is only ever added,
never renamed. Beyond the contract each finding carries ``opinfo``,
``case_id``, ``detail`` and ``mismatch`` (the judge's mismatch as a dict), which
the contract allows.

Values that are absent are ``null``. JSON has no infinity or NaN, so a number
that is not finite (the error of a NaN where a number was expected) is
``null`` as well; the mismatch's ``description`` still says ``inf``. Repro
paths are written relative to the findings file's folder when they lie under
it (``repros/f-3a9c.py``), as the file and its repros travel together.

The file is written to a temporary name and renamed, so a reader never sees
half of it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from .._version import __version__
from ..judge.records import Finding, Mismatch
from .groups import Group


def write(
    path: str | Path,
    *,
    command: str,
    device: str,
    torch_version: str,
    cases: int,
    seconds: float,
    findings: Iterable[Finding],
    groups: Iterable[Group],
    repro_paths: Mapping[str, str | Path],
    found_as: Mapping[str, str] | None = None,
    flaky: Iterable[Finding] = (),
    coverage=None,
    internal: Iterable[Finding] = (),
) -> Path:
    """Writes the findings file to ``path``; returns the path."""
    path = Path(path)
    data = document(
        command=command, device=device, torch_version=torch_version, cases=cases, seconds=seconds,
        findings=findings, groups=groups, repro_paths=repro_paths, base=path.parent, found_as=found_as, flaky=flaky,
        coverage=coverage, internal=internal,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


def document(
    *,
    command: str,
    device: str,
    torch_version: str,
    cases: int,
    seconds: float,
    findings: Iterable[Finding],
    groups: Iterable[Group],
    repro_paths: Mapping[str, str | Path],
    base: str | Path | None = None,
    found_as: Mapping[str, str] | None = None,
    flaky: Iterable[Finding] = (),
    coverage=None,
    internal: Iterable[Finding] = (),
) -> dict[str, Any]:
    """The findings file as a JSON-ready dict; repro paths made relative to ``base``.

    ``findings`` are as reported (shrunk where they were); ``found_as`` maps a
    finding's id to the case the sweep found it in, when that differs.
    ``coverage`` (a ``store.coverage.Coverage``), when given, is the top-level
    ``"coverage"`` object: per op, the aten overloads found, reached, and never
    reached with why, and the internal kernels called directly (``internal_called``).
    """
    groups = list(groups)
    found_as = found_as or {}
    group_of = {finding_id: g.id for g in groups for finding_id in g.findings}
    extra = {} if coverage is None or not coverage.ops else {"coverage": _coverage(coverage)}
    return {
        "tool": "torchsleuth",
        "version": __version__,
        "torch": torch_version,
        "command": command,
        "device": device,
        "cases": int(cases),
        "seconds": _number(seconds),
        "findings": [
            dict(_finding(f, group_of.get(f.id), _repro(repro_paths.get(f.id), base)), found_as=found_as.get(f.id, f.case_id))
            for f in findings
        ],
        "groups": [{"id": g.id, "summary": g.summary, "diagnosis": g.diagnosis or None, "findings": list(g.findings)} for g in groups],
        # findings that did not recur when replayed: not bugs, listed so nothing is hidden
        "flaky": [{"id": f.id, "op": f.op, "kind": f.kind, "case_id": f.case_id, "summary": f.summary} for f in flaky],
        # crashes no standalone script reproduces: torchsleuth's own failures, not the op's (shrink.attribute)
        "internal_failures": [{"id": f.id, "op": f.op, "kind": f.kind, "case_id": f.case_id, "summary": f.summary, "detail": f.detail or None}
                              for f in internal],
        **extra,
    }


def _coverage(coverage) -> dict[str, Any]:
    """Kernel coverage: overloads reached of those found, per op; the unreached with why; undeclared variants' cases;
    the internal kernels (not the op's own overloads) called directly."""
    return {
        "found": coverage.found,
        "reached": coverage.reached,
        "internal_called": coverage.internal,
        "reached_by_family": coverage.by_family(),
        # float64's own results: judged against mpmath (the exact oracle), or only for consistency (nothing above them)
        "float64_judged": {"exact": list(coverage.float64("exact")), "consistency_only": list(coverage.float64("consistency"))},
        "ops": [
            {
                "op": o.op,
                "found": list(o.found),
                "reached": list(o.reached),
                "unreached": [{"overload": overload, "why": why} for overload, why in o.unreached],
                "undeclared_variants": {variant: cases for variant, cases in o.undeclared},
                "internal_called": list(o.internal),
                "reached_by_family": {overload: list(families) for overload, families in o.families},
                "float64_judged": o.float64 or None,
            }
            for o in coverage.ops
        ],
    }


def _finding(f: Finding, group: str | None, repro: str | None) -> dict[str, Any]:
    m = f.mismatch
    return {
        "id": f.id,
        "op": f.op,
        "kind": f.kind,
        "variant": f.variant,
        "dtype": f.dtype,
        "device": f.device,
        "reference": f.reference,
        "args": _args(f),
        "max_abs_err": _number(m.max_abs_err) if m else None,
        "tolerance": {"atol": _number(m.atol), "rtol": _number(m.rtol)} if m else None,
        "summary": f.summary,
        "group": group,
        "repro": repro,
        "opinfo": f.opinfo,
        "case_id": f.case_id,
        "detail": f.detail or None,
        "mismatch": _mismatch(m) if m else None,
    }


def _args(f: Finding) -> list[dict[str, Any]]:
    if f.call is not None:
        return [
            {"name": t.path, "shape": list(t.shape), "stride": list(t.stride), "storage_offset": t.storage_offset, "layout": t.layout}
            for t in f.call.tensors
        ]
    # No call recorded (a crash or hang): the case still names each re-laid-out argument.
    return [{"name": p, "shape": None, "stride": None, "storage_offset": None, "layout": layout} for p, layout in f.layouts]


def _mismatch(m: Mismatch) -> dict[str, Any]:
    return {
        "path": m.path,
        "attribute": m.attribute,
        "expected": m.expected,
        "actual": m.actual,
        "mismatched": m.mismatched,
        "numel": m.numel,
        "worst_index": list(m.worst_index),
        "max_abs_err": _number(m.max_abs_err),
        "atol": _number(m.atol),
        "rtol": _number(m.rtol),
        "allowed": _number(m.allowed),
        "description": m.describe(),
    }


def _number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _repro(path: str | Path | None, base: str | Path | None) -> str | None:
    if path is None:
        return None
    path = Path(path)
    if base is not None:
        try:
            return path.resolve().relative_to(Path(base).resolve()).as_posix()
        except ValueError:
            pass  # not under the findings file's folder: keep it as given
    return path.as_posix()
