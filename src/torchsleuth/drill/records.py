"""Records of a drill: what each planted class gave, what the unplanted control gave, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass

from ..judge.records import Finding
from .classes import BugClass


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassResult:
    bug: BugClass
    caught: bool
    evidence: Finding | None  # the first finding that catches the plant
    findings: tuple[Finding, ...]  # everything the planted sweep found
    cases: int
    seconds: float  # wall time of the class's sweep, worker start-up included
    why_missed: str = ""  # one line, in the user's terms; empty when caught


@dataclass(frozen=True, kw_only=True, slots=True)
class ControlResult:
    """The drilled ops swept without plants: a finding on a drilled case is a false alarm."""

    false_alarms: tuple[Finding, ...]
    outside: tuple[Finding, ...]  # findings on cases no class runs: this torch's own, not the drill's concern
    cases: int
    seconds: float
    problem: str = ""  # why the control cannot vouch for the drilled cases (it failed); empty when it ran

    @property
    def clean(self) -> bool:
        return not self.false_alarms and not self.problem


@dataclass(frozen=True, kw_only=True, slots=True)
class DrillResult:
    torch: str
    device: str
    classes: tuple[ClassResult, ...]
    control: ControlResult
    seconds: float

    @property
    def trustworthy(self) -> bool:
        """Every planted class was caught, and the same cases unplanted were clean."""
        return all(c.caught for c in self.classes) and self.control.clean

    @property
    def cases(self) -> int:
        return sum(c.cases for c in self.classes) + self.control.cases
