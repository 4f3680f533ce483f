"""Two stored runs compared by finding group: what is new, fixed, still failing, or not rerun.

Design note. Groups are matched by id, a hash of the group's root-cause key
that is the same in every run and on every device (``groups.py``). A group
in both runs is still failing; in B only, new; in A only, it is fixed *only
if B rechecked it*, because a group B had no chance to find is no evidence
of a fix (B swept other ops, dtypes, samples or layouts, or the cases now
raise). Rechecking is decided per case, from facts:

* B rechecked a case of the group when B judged the same case (op, variant,
  dtype, sample and layouts; the device may differ, so two devices can be
  compared) and it passed: every oracle ran on it and none objected. A case
  with other findings in B does not count: a crash, for one, judges nothing.
* A case judged against the device reference (the op against the CPU) is
  rechecked only by a run off the CPU: a CPU run never makes that comparison.

A group that B passed in at least one of its failing cases is fixed, and
says in how many; one that B passed in none is "not rerun", with what became
of its cases in B, and never counts as fixed. The same test turned around
tells a new group whose cases A passed (a regression) from one A never ran
(an op or layout A did not sweep): both are new, and the entry says which.

Group ids come from shrunk cases when a run was shrunk, so a shrunk run
against an unshrunk one may key one bug twice: it then shows as new on one
side and not rerun on the other, whose note names the group its cases went
to; it is never called fixed, since those cases did not pass.

``diff`` is pure, over two ``Side`` records; ``between`` reads them from the
stores, through ``groups.of_run`` so that a diff reports exactly the
findings and groups that the run's own report does (flaky findings left out).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from .. import devices
from ..cases.records import Case
from ..judge.records import Finding
from ..store import lookup
from ..store.sqlite import RunInfo, Store
from . import groups as grouping
from .groups import Group


@dataclass(frozen=True, kw_only=True, slots=True)
class Side:
    """One run as ``diff`` sees it."""

    run: RunInfo
    findings: tuple[Finding, ...]
    groups: tuple[Group, ...]
    # The stored status, by this run's case id, of (at least) every case the
    # other run has a finding in: ``counterparts(other.findings, run)``.
    # A case that is absent was not run here.
    statuses: Mapping[str, str]


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupChange:
    """One group and how it fares between run A and run B."""

    id: str
    summary: str  # the group's sentence, from the run that has it (B's when both do)
    op: str  # aten overload, as in the group's findings
    opinfo: str
    variant: str
    kind: str
    reference: str
    layouts: tuple[str, ...]  # layout names in the group's failing cases; () is all contiguous
    findings_a: tuple[str, ...]  # the group's finding ids in run A; () when A lacks it
    findings_b: tuple[str, ...]
    # Of the group's failing cases (A's for a group B lacks, B's for a group A
    # lacks), how many the other run judged and passed; 0 for still failing.
    passed_by_other: int = 0
    # What became of those cases in the other run when it passed none; else "".
    why: str = ""

    @property
    def example(self) -> str:
        """A finding id to reproduce it by, from the run that has it (B's when B has it)."""
        return (self.findings_b or self.findings_a)[0]


@dataclass(frozen=True, kw_only=True, slots=True)
class Diff:
    run_a: RunInfo
    run_b: RunInfo
    new: tuple[GroupChange, ...]  # in B, not in A
    fixed: tuple[GroupChange, ...]  # in A, not in B, and B passed some of its failing cases
    still: tuple[GroupChange, ...]  # in both
    not_rerun: tuple[GroupChange, ...]  # in A, not in B, and B passed none of its failing cases

    @property
    def regressions(self) -> tuple[GroupChange, ...]:
        """New groups whose cases A judged and passed: broken between A and B."""
        return tuple(change for change in self.new if change.passed_by_other)


def counterparts(findings: Iterable[Finding], other: RunInfo) -> set[str]:
    """The ids that the cases of ``findings`` have in the run ``other`` (its device in place of theirs)."""
    return {_on(f.case_id, other.device) for f in findings}


def diff(a: Side, b: Side) -> Diff:
    """Compare two runs' groups (see the design note)."""
    found_a, found_b = {f.id: f for f in a.findings}, {f.id: f for f in b.findings}
    by_id_a, by_id_b = {g.id: g for g in a.groups}, {g.id: g for g in b.groups}
    new, still, fixed, not_rerun = [], [], [], []
    for g in b.groups:
        members = [found_b[i] for i in g.findings]
        if g.id in by_id_a:
            still.append(_change(g, members, a=by_id_a[g.id], b=g))
        else:
            passed, why = _recheck(members, a)
            new.append(_change(g, members, a=None, b=g, passed=passed, why=why))
    for g in a.groups:
        if g.id in by_id_b:
            continue
        members = [found_a[i] for i in g.findings]
        passed, why = _recheck(members, b)
        (fixed if passed else not_rerun).append(_change(g, members, a=g, b=None, passed=passed, why=why))
    return Diff(run_a=a.run, run_b=b.run, new=tuple(new), fixed=tuple(fixed), still=tuple(still), not_rerun=tuple(not_rerun))


def between(store_a: Store, run_a: RunInfo, store_b: Store, run_b: RunInfo) -> Diff:
    """``diff`` of two stored runs, which may live in different stores."""
    findings_a, groups_a = grouping.of_run(store_a, run_a.id)
    findings_b, groups_b = grouping.of_run(store_b, run_b.id)
    return diff(
        Side(run=run_a, findings=tuple(findings_a), groups=tuple(groups_a),
             statuses=lookup.statuses(store_a, run_a.id, counterparts(findings_b, run_a))),
        Side(run=run_b, findings=tuple(findings_b), groups=tuple(groups_b),
             statuses=lookup.statuses(store_b, run_b.id, counterparts(findings_a, run_b))),
    )


def _change(g: Group, members: list[Finding], *, a: Group | None, b: Group | None, passed: int = 0, why: str = "") -> GroupChange:
    first = members[0]
    return GroupChange(
        id=g.id, summary=g.summary, op=first.op, opinfo=first.opinfo, variant=first.variant, kind=first.kind,
        reference=first.reference, layouts=tuple(sorted({layout for f in members for _, layout in f.layouts})),
        findings_a=a.findings if a else (), findings_b=b.findings if b else (), passed_by_other=passed, why=why,
    )


def _recheck(members: list[Finding], other: Side) -> tuple[int, str]:
    """How many of the group's failing cases the ``other`` run passed; if none, what became of them there."""
    cases = sorted({_on(f.case_id, other.run.device) for f in members})
    its = "its case" if len(cases) == 1 else f"its {len(cases)} cases"
    if members[0].reference == "device" and _on_cpu(other.run):
        # a CPU run never compares against the CPU: its passes say nothing here
        return 0, f"run {other.run.id} is on the CPU, where the device reference (the op against the CPU) is not checked"
    fates = Counter(other.statuses.get(case_id, "not run") for case_id in cases)
    if fates["pass"]:
        return fates["pass"], ""
    if fates["not run"] == len(cases):
        return 0, f"run {other.run.id} did not run {its}"
    told = [f"{fates[fate]} {_FATES.get(fate, fate)}" for fate in sorted(fates) if fate != "finding"]
    if fates["finding"]:
        # where those cases went: often the same bug, grouped otherwise; a case
        # with no reported finding had only findings the report leaves out (flaky)
        group_of = {finding_id: other_group.id for other_group in other.groups for finding_id in other_group.findings}
        elsewhere = sorted({group_of[f.id] for f in other.findings if f.case_id in cases and f.id in group_of})
        where = f"in group{'s' if len(elsewhere) != 1 else ''} {', '.join(elsewhere)}" if elsewhere else "not reported: flaky"
        told.append(f"{fates['finding']} had other findings ({where})")
    return 0, f"run {other.run.id} passed none of {its}: {', '.join(told)}"


# How a status reads after "run 2 passed none of its 3 cases: 1 ...".
_FATES = {"raised": "raised", "skip": "skipped", "error": "failed inside torchsleuth", "not run": "not run"}


def _on(case_id: str, device: str) -> str:
    """``case_id`` as the same case on ``device``."""
    return dataclasses.replace(Case.parse(case_id), device=device).id


def _on_cpu(run: RunInfo) -> bool:
    return devices.kind(run.device) == "cpu"
