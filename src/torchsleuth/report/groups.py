"""Grouping findings by root cause, so a report lists bugs, not cases.

Design note. Findings are grouped by their root-cause signature: the aten
overload, variant, kind and reference, and the arguments that trigger the
failure with the class of property each has (its strides, a storage offset,
stride 0, emptiness: what each layout's record in cases.layouts says). The
triggers come from the finding's shrunk case (shrink stage), which keeps
only the non-contiguous arguments the failure needs: so a dropped write on
a transposed ``self`` and one on a strided ``self`` with transposed
``tensor1`` are one group ("self's strides"), while
the same op at a storage offset is another (a fix for one rarely fixes the
other). A combined layout's class is its parts' joined by ``+``
(``strides+offset``); the shrinker replaces it by a part alone whenever that
part fails alone too, so a combined-layout finding lands in the group of the
part it shrank to, and only a failure that needs the pair keeps a group of
its own. A finding that was not shrunk is keyed by every layout of its case.
dtype and sample are left out of the key: one kernel bug usually shows in
every dtype it handles. A deeper oracle's case adds its form to the key
(``alias:out-overlaps-input``, ``large:2^32``): another aliasing is another
bug.

A group's id is a hash of its key, so it is stable across runs, reruns and
devices (``torchsleuth diff`` matches groups by id); groups are listed in the
order of their first finding. A group's ``diagnosis`` is the sentence the
shrink stage's neighbour tests wrote for it, when there is one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..cases import layouts
from ..cases.records import VARIANT_WORDS, Case
from ..judge.records import KIND_WORDS, Finding
from ..shrink.records import ASIDE, Diagnosis, Shrunk

# The property class of a name that is no layout of the sweep's table (whose
# records carry their own, cases.layouts.Layout.property): torchsleuth optim's
# parameter with gaps. Any other name (a shard placement) is its own class.
OTHER_PROPERTY_CLASS = {"sliced": "strides"}
# A shard placement's text (shard/placements.py): one placement per mesh dim, joined by dots.
_PLACEMENT = re.compile(r"^(R|S\d+|P(sum|avg|max|min)|SS\d+x\d+)(\.(R|S\d+|P(sum|avg|max|min)|SS\d+x\d+))*$")
_PLACEMENT_KINDS = {"R": "Replicate", "S": "Shard", "SS": "_StridedShard"}
_CLASS_WORDS = {"strides": "non-contiguous", "offset": "offset", "stride 0": "expanded", "empty": "empty"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    id: str  # "g-" + a short hash of the key
    summary: str  # one sentence
    findings: tuple[str, ...]  # finding ids, in the order they were given
    # one sentence naming the trigger, found by testing the neighbours of a
    # shrunk finding (shrink.diagnose); empty when not diagnosed
    diagnosis: str = ""


def triggers(finding: Finding, shrunk: Shrunk | None = None) -> tuple[tuple[str, str], ...]:
    """(argument, property class) of each layout the failure needs, by the shrunk case when there is one."""
    case_id = shrunk.case_id if shrunk is not None and shrunk.status == "shrunk" else finding.case_id
    return tuple(sorted({(path, property_class(layout)) for path, layout in Case.parse(case_id).layouts}))


def property_class(layout: str) -> str:
    """What ``layout`` gives an argument, for the key: layouts of one class usually reach the same wrong code path.

    A shard placement's class is its kinds on each mesh dim, its dims and split factors left out (as a size is):
    ``SS0x2.S0`` and ``SS1x3.S1`` are both ``_StridedShard.Shard``, one rule's bug on any dim.
    """
    record = layouts.find(layout)
    if record is not None:
        return record.property
    if _PLACEMENT.match(layout):
        return ".".join(_PLACEMENT_KINDS[p.rstrip("0123456789x")] if not p.startswith("P") else f"Partial({p[1:]})"
                        for p in layout.split("."))
    return OTHER_PROPERTY_CLASS.get(layout, layout)


def key(finding: Finding, shrunk: Shrunk | None = None) -> tuple:
    """What makes two findings the same bug (see the design note)."""
    k = (finding.op, finding.variant, finding.kind, finding.reference, triggers(finding, shrunk))
    form = _form(Case.parse(finding.case_id).oracle)
    return k + (form,) if form else k  # the ops sweep's keys (and group ids) stay as they were


def _form(oracle: str) -> str:
    """The part of a deeper oracle's name that tells bugs apart: the aliasing form, the probe.

    ``alias:out-overlaps-input:out=args[0]`` -> ``alias:out-overlaps-input``; a
    mesh (``shard:2x2``) is a size, like a shape, and is left out.
    """
    family, *rest = oracle.split(":")
    if not oracle or family == "shard":
        return ""
    return ":".join([family, *rest[:1]])


def _id(k: tuple) -> str:
    return "g-" + hashlib.sha256(repr(k).encode()).hexdigest()[:8]


def group(findings: Iterable[Finding], shrunk: Mapping[str, Shrunk] | None = None,
          diagnoses: Mapping[str, Diagnosis] | None = None) -> list[Group]:
    shrunk, diagnoses = shrunk or {}, diagnoses or {}
    members: dict[tuple, list[Finding]] = {}
    for finding in findings:
        same = members.setdefault(key(finding, shrunk.get(finding.id)), [])
        if all(f.id != finding.id for f in same):
            same.append(finding)
    found = []
    for k, members_of in members.items():
        gid = _id(k)
        diagnosis = diagnoses.get(gid)
        found.append(Group(id=gid, summary=_summary(k, members_of), findings=tuple(f.id for f in members_of),
                           diagnosis=diagnosis.sentence if diagnosis else ""))
    return found


def of_run(store, run_id: int) -> tuple[list[Finding], list[Group]]:
    """A stored run's findings (those set aside left out: flaky, internal) and their groups with diagnoses."""
    shrunk = store.shrunk(run_id)
    findings, _ = split(store.findings(run_id), shrunk)
    return findings, group(findings, shrunk, store.diagnoses(run_id))


def split(findings: Iterable[Finding], shrunk: Mapping[str, Shrunk]) -> tuple[list[Finding], list[Finding]]:
    """(reported, set aside): a finding whose replay did not recur (flaky) and a crash no standalone script reproduces
    (torchsleuth's own failure) are no bugs of the op."""
    reported, aside = [], []
    for f in findings:
        (aside if f.id in shrunk and shrunk[f.id].status in ASIDE else reported).append(f)
    return reported, aside


def _class_words(property_class: str) -> str:
    """A property class in a summary's words; a combined layout's (``strides+offset``) names each of its classes."""
    return "+".join(_CLASS_WORDS.get(c, c) for c in property_class.split("+"))


def _summary(k: tuple, found: list[Finding]) -> str:
    _, variant, kind, reference, trigger, *form = k
    name = found[0].name
    where = " and ".join(f"{_class_words(c)} {path}" for path, c in trigger) if trigger else "contiguous arguments"
    dtypes = ", ".join(sorted({f.dtype for f in found}))
    devices = ", ".join(sorted({f.device for f in found}))
    count = f"{len(found)} finding{'s' if len(found) != 1 else ''}"
    what = KIND_WORDS.get(kind, f"shows {kind}")
    how = f" [{form[0]}]" if form else ""
    return f"{name}{VARIANT_WORDS.get(variant, f' ({variant})')} {what} on {where}{how} ({reference} reference): {count} in {dtypes} on {devices}."
