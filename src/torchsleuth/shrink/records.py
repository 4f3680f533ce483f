"""Records of the shrink stage: a finding minimised, and a group diagnosed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..judge.records import Finding

# shrunk: the smallest case found fails on replay (possibly the original
# case, when nothing smaller fails); flaky: the finding did not recur when
# replayed, so it is not reported as a bug; kept: not shrunk, ``reason`` says
# why (a crash, a hang or nondeterminism cannot be replayed in-process);
# internal: a crash no standalone script reproduces (shrink.attribute), so
# torchsleuth's own failure and no bug of the op.
STATUSES = ("shrunk", "flaky", "kept", "internal")
# The statuses of findings set aside: not reported as bugs of the op.
ASIDE = ("flaky", "internal")


@dataclass(frozen=True, kw_only=True, slots=True)
class Shrunk:
    finding: str  # the finding's id
    status: str  # one of STATUSES
    case_id: str  # the smallest case that still fails (the finding's own when kept or flaky)
    # the shrunk case's finding from its last replay: the repro is written from it
    replay: Finding | None = None
    tries: int = 0  # cases run while shrinking
    reason: str = ""
    # a crash a standalone script reproduces: the least setup of its ladder that crashes ("step 9: forward-mode AD ...")
    setup: str = ""

    def reported(self, finding: Finding) -> Finding:
        """``finding`` as reported: its own id, the shrunk case's call, values and summary; a crash with what its
        standalone script said."""
        if self.setup:
            return dataclasses.replace(finding, summary=f"{finding.summary}; a standalone script crashes at {self.setup}")
        if self.status == "internal":
            return dataclasses.replace(finding, summary=f"{finding.summary}; torchsleuth's own failure: {self.reason}")
        if self.status != "shrunk" or self.replay is None:
            return finding
        return dataclasses.replace(self.replay, id=finding.id)


@dataclass(frozen=True, kw_only=True, slots=True)
class Trigger:
    """One argument whose layout the failure needs, and what else it was tried with."""

    path: str  # "input", "out", "args[0]", "grad_output[0]"
    failing: tuple[str, ...]  # layouts of this argument that fail (the shrunk case's first)
    passing: tuple[str, ...]  # layouts that pass, "contiguous" included when it does


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    group: str  # the group's id
    finding: str  # the finding whose shrunk case was examined
    case_id: str  # that shrunk case
    sentence: str  # the diagnosis in one sentence
    triggers: tuple[Trigger, ...] = ()
    indifferent: tuple[str, ...] = ()  # arguments every layout of which is fine when the triggers are contiguous
    also_failing: tuple[str, ...] = ()  # arguments some layout of which fails alone too
    dtypes_failing: tuple[str, ...] = ()
    dtypes_passing: tuple[str, ...] = ()
    cpu: str = ""  # off the CPU: "fails" or "passes" on the CPU; "" on the CPU
    tries: int = 0
    untried: int = 0  # neighbours left untried: the run's time target ran out (run.deadline.finish)
