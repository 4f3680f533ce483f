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
shrink stage's neighbour tests wrote for it, when there is one; an
optimizer's or a sharding's group, which the shrink stage does not replay,
gets what its findings share said the same way (``_observed``).

``torchsleuth.check`` groups coarser (``merge``): a user's kernel is one
function, so two groups of one op that differ only in their trigger's class
(a transposed ``input`` against an expanded one) are one bug when each
group's diagnosis saw the other's class fail too. The catalog keeps them
apart: aten routes stride 0 and gaps through different kernels often enough.
``check`` also folds an oracle's finding on contiguous arguments into the
op's group of the layout its call handed the kernel (``Oracle.handed``: a
vmap batch at a moved dim gives each sample a strided slice), where that
group's diagnosis saw the layout's class fail: the stride bug seen through
vmap is the stride bug.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..cases import layouts
from ..cases.records import VARIANT_WORDS, Case
from ..judge.plugin import BUILTIN, Registry
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
          diagnoses: Mapping[str, Diagnosis] | None = None, *, merge: bool = False, registry: Registry = BUILTIN) -> list[Group]:
    """``merge``: groups that differ only in their triggers' classes and whose diagnoses each saw the other's layout
    fail too are one group, and so is an oracle's group on contiguous arguments with the group of the layout its calls
    handed the op (``torchsleuth.check``: one kernel of the user's, one bug; see ``_same_bug`` and ``_folded``)."""
    shrunk, diagnoses = shrunk or {}, diagnoses or {}
    members: dict[tuple, list[Finding]] = {}
    for finding in findings:
        same = members.setdefault(key(finding, shrunk.get(finding.id)), [])
        if all(f.id != finding.id for f in same):
            same.append(finding)
    if merge:
        members = _folded(_merged(members, diagnoses), diagnoses, registry)
    found = []
    for k, members_of in members.items():
        gid = _id(k)
        diagnosis = diagnoses.get(gid)
        found.append(Group(id=gid, summary=_summary(k, members_of), findings=tuple(f.id for f in members_of),
                           diagnosis=diagnosis.sentence if diagnosis else _observed(members_of)))
    return found


def _observed(found: list[Finding]) -> str:
    """The diagnosis of an optimizer's or a sharding's group, which no neighbour test narrows (the shrink stage
    replays single op calls): what its findings have in common, said as a diagnosis is. "" for any other group."""
    first = found[0]
    cases = [Case.parse(f.case_id) for f in found]
    if not first.op.startswith("torch.optim.") and not cases[0].oracle.startswith("shard"):
        return ""
    by_path: dict[str, list[str]] = {}
    for case in cases:
        for path, layout in case.layouts:
            if layout not in by_path.setdefault(path, []):
                by_path[path].append(layout)
    head = f"{first.name}{VARIANT_WORDS.get(first.variant, f' ({first.variant})')} {KIND_WORDS.get(first.kind, f'shows {first.kind}')}"
    where = (" when " + " and ".join(f"{path} is {_or([_layout_words(n) for n in names])}" for path, names in by_path.items())
             if by_path else " with every argument contiguous")
    common = set(cases[0].edits).intersection(*(c.edits for c in cases[1:]))
    at = f" with {', '.join(e for e in cases[0].edits if e in common)}" if common else ""
    meshes = sorted({c.oracle.split(":", 1)[1] for c in cases if ":" in c.oracle})
    on = f" on a {' or '.join(meshes)} mesh" if meshes else ""
    dtypes = sorted({f.dtype for f in found})
    count = f"{len(found)} finding{'s' if len(found) != 1 else ''}"
    return f"{head}{where}{at}{on}; in {_or(dtypes, 'and')} ({count}; what they share, not narrowed by neighbour tests)."


def _layout_words(name: str) -> str:
    record = layouts.find(name)
    if record is not None:
        return record.phrase
    if _PLACEMENT.match(name):
        return f"placed {name}"
    return {"sliced": "sliced (gaps between elements)"}.get(name, name)


def _or(items: list[str], word: str = "or") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]


def _merged(members: dict[tuple, list[Finding]], diagnoses: Mapping[str, Diagnosis]) -> dict[tuple, list[Finding]]:
    """``members`` with each group folded into the first earlier one it is the same bug as."""
    kept: dict[tuple, list[Finding]] = {}
    for k, found in members.items():
        into = next((earlier for earlier in kept if _same_bug(earlier, k, diagnoses)), None)
        if into is None:
            kept[k] = list(found)
        else:
            kept[into].extend(f for f in found if f not in kept[into])
    return kept


def _folded(members: dict[tuple, list[Finding]], diagnoses: Mapping[str, Diagnosis],
            registry: Registry) -> dict[tuple, list[Finding]]:
    """``members`` with each group on contiguous arguments whose every finding's call handed the op the same layouts
    (``Registry.handed``) folded into the op's group those layouts' classes trigger, listed where the earlier of the
    two was; kept as it is where no such group of the op is, or its diagnosis did not see those classes fail."""
    into: dict[tuple, tuple] = {}
    for k, found in members.items():
        handed = {registry.handed(f) for f in found} if not k[4] else set()
        if len(handed) != 1 or not next(iter(handed)):
            continue
        trigger = tuple(sorted({(path, property_class(layout)) for path, layout in next(iter(handed))}))
        target = next((t for t in members if t[0] == k[0] and [p for p, _ in t[4]] == [p for p, _ in trigger]
                       and (t[4] == trigger or _failed_in(diagnoses.get(_id(t)), trigger))), None)
        if target is not None:
            into[k] = target
    kept: dict[tuple, list[Finding]] = {}
    for k in members:
        kept.setdefault(into.get(k, k), [])
    for k, found in members.items():  # a group's own findings first: its first finding's repro is the plainer call
        if k not in into:
            kept[k].extend(found)
    for k, target in into.items():
        kept[target].extend(f for f in members[k] if f not in kept[target])
    return kept


def _same_bug(a: tuple, b: tuple, diagnoses: Mapping[str, Diagnosis]) -> bool:
    """Two keys differing only in the classes of the same triggering arguments (``strides`` against ``stride 0``),
    where each group's neighbour tests failed in a layout of the other's class on every one of those arguments: the
    transposed case fails expanded too and the expanded one transposed, so one code path reads both wrong."""
    (trig_a, trig_b), (rest_a, rest_b) = (a[4], b[4]), (a[:4] + a[5:], b[:4] + b[5:])
    if rest_a != rest_b or not trig_a or [p for p, _ in trig_a] != [p for p, _ in trig_b]:
        return False
    return _failed_in(diagnoses.get(_id(a)), trig_b) and _failed_in(diagnoses.get(_id(b)), trig_a)


def _failed_in(diagnosis: Diagnosis | None, trigger: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``diagnosis`` saw each argument of ``trigger`` fail in a layout of its class."""
    if diagnosis is None:
        return False
    failing = {t.path: {property_class(name) for name in t.failing} for t in diagnosis.triggers}
    return all(cls in failing.get(path, ()) for path, cls in trigger)


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
