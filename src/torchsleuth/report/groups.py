"""Grouping findings that are most likely one bug, so a report lists bugs, not cases.

Design note. A first cut: findings are grouped by what a kernel developer
would call the same bug: the same aten overload, variant, kind and reference,
on the same set of layouts (the layout names in the finding's case, whichever
arguments carry them). So the four cases of a dropped write on a transposed
``self`` (self alone, with transposed tensor1 and tensor2, in two samples)
are one group, while the same op on a strided ``self`` is another: a fix for
one layout does not always fix the other. dtype and sample are left out of
the key, because one kernel bug usually shows in every dtype it handles.

A group's id is a hash of its key, so it is stable across runs and reruns
(a report diffed against an older one keeps its group ids); groups are listed
in the order of their first finding.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

from ..judge.records import Finding

# What each kind of finding says about the op, for a group's summary.
_WHAT = {
    "mismatch": "gives wrong values",
    "dropped_write": "drops its writes",
    "out_ignored": "ignores its out= tensor",
    "input_mutated": "changes an input it should only read",
    "out_of_view_write": "writes outside the view",
    "random_coverage": "leaves elements undrawn or draws impossible values",
    "nondeterministic": "is nondeterministic",
    "gradient_mismatch": "gives wrong gradients",
    "sharding_mismatch": "gives wrong results under sharding",
    "crash": "crashes",
    "hang": "hangs",
    "invariant": "breaks an invariant",
}
_VARIANT = {"functional": "", "method": " (method)", "inplace": " (in-place)", "out": " (out=)", "backward": " backward"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    id: str  # "g-" + a short hash of the key
    summary: str  # one sentence
    findings: tuple[str, ...]  # finding ids, in the order they were given


def key(finding: Finding) -> tuple[str, str, str, str, tuple[str, ...]]:
    """What makes two findings the same bug (see the design note)."""
    layouts = tuple(sorted({layout for _, layout in finding.layouts}))
    return (finding.op, finding.variant, finding.kind, finding.reference, layouts)


def group(findings: Iterable[Finding]) -> list[Group]:
    members: dict[tuple, list[Finding]] = {}
    for finding in findings:
        same = members.setdefault(key(finding), [])
        if all(f.id != finding.id for f in same):
            same.append(finding)
    return [
        Group(id=_group_id(k), summary=_summary(k, found), findings=tuple(f.id for f in found))
        for k, found in members.items()
    ]


def _group_id(k: tuple) -> str:
    return "g-" + hashlib.sha256(repr(k).encode()).hexdigest()[:8]


def _summary(k: tuple, found: list[Finding]) -> str:
    op, variant, kind, reference, layouts = k
    parts = op.split(".")
    name = parts[1] if len(parts) >= 3 and parts[0] == "aten" else op
    where = " or ".join(layouts) + " arguments" if layouts else "contiguous arguments"
    dtypes = ", ".join(sorted({f.dtype for f in found}))
    devices = ", ".join(sorted({f.device for f in found}))
    count = f"{len(found)} finding{'s' if len(found) != 1 else ''}"
    what = _WHAT.get(kind, f"shows {kind}")
    return f"{name}{_VARIANT.get(variant, f' ({variant})')} {what} on {where} ({reference} reference): {count} in {dtypes} on {devices}."
