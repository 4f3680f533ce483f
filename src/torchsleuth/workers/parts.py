"""A unit split among workers (workers.dispatch): into how many parts and stages, and which of its cases each runs.

Each part of a split unit leaves out the cases of the other parts, chosen by a stable hash of the case id, so a
replayed or resumed part runs the same cases, and the parts together run every case once.

Three things split a unit. Up front (``upfront``): where a run has fewer units than workers (a run pointed at one op
has one unit per dtype, and a GPU's host has sixteen cores), each unit goes out in parts, about ``PER_WORKER`` parts a
worker in all, so that no worker idles while one runs a costly unit alone, and a worker through with a cheap unit's
part takes one of a costly unit's. After a failed case, when workers are idle (workers.dispatch). And, in a run with
a time target (run.deadline), in three stages (``plan``, ``STAGES``; run.deadline.in_stage says which case is whose):
every unit's ``base`` stage (its samples' own cases and the cheap oracles' cases on them) goes out before any unit's
timed stages: ``searched`` (its searched cases) and ``slow`` (the cases of the oracles that take longer than a call:
compiling, sizes past 2^23), their parts in turn, so that the target cuts the extra cases, not a late unit's samples.
Each timed part gets a fair slice of the time left as it goes out (``sliced``: ``Part.until``), so that every unit's
searched and slow cases get their turn: a part that ends early (a cheap search, an op with no compiled cases) leaves its
time to the parts after it, whichever stage they are of. Each part plans what its stage runs of the whole unit and runs
only its own cases: planning is repeated, cases are not.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import Iterable, NamedTuple

# Parts a worker has to take, in all, where the units are split up front: more parts than workers, so that the parts of
# cheap units end early and their workers go on with the costly units' parts.
PER_WORKER = 2
# The stages of a unit in a run with a time target, in the order every unit's go out; those after the first are timed.
STAGES = ("base", "searched", "slow")
TIMED = STAGES[1:]


class Part(NamedTuple):
    """One part of a split unit: ``index`` of ``count`` by the hash of the case ids; ``stage`` (None: every case); and
    the wall-clock second its oracle and searched cases stop by (``until``; 0: the run's deadline alone)."""

    index: int
    count: int
    stage: str | None = None
    until: float = 0.0


def upfront(units: list, workers: int, shareable) -> dict[int, int]:
    """id(unit) -> the parts each of ``units`` that ``shareable`` allows is split into before any runs: about
    ``PER_WORKER`` parts a worker over the units, at most ``workers`` a unit; none where the units are as many as the
    workers (each keeps a worker busy already)."""
    split = [u for u in units if shareable is not None and shareable(u)]
    if not split or len(units) >= workers:
        return {}
    count = min(workers, math.ceil(PER_WORKER * workers / len(units)))
    return {id(u): count for u in split} if count > 1 else {}


def plan(units: list, workers: int, shareable, *, staged: bool) -> list[tuple[object, Part | None]]:
    """What goes out, in order: (unit, its part; None for the whole unit). Split up front where ``upfront`` says; with
    ``staged`` (a run with a time target), every shareable unit's ``base`` parts, then their timed parts, in turn."""
    counts = upfront(units, workers, shareable)

    def pieces(unit, stage: str | None) -> list:
        count = counts.get(id(unit), 1)
        return [(unit, None)] if count == 1 and stage is None else [(unit, Part(i, count, stage)) for i in range(count)]

    if not staged:
        return [piece for unit in units for piece in pieces(unit, None)]
    shared = [unit for unit in units if shareable is not None and shareable(unit)]
    whole = [(unit, None) for unit in units if not (shareable is not None and shareable(unit))]
    timed = [p for unit in shared for pair in zip(*(pieces(unit, stage) for stage in TIMED)) for p in pair]
    return [*(p for unit in shared for p in pieces(unit, "base")), *whole, *timed]


def sliced(part: Part, waiting: Iterable[Part], *, workers: int, deadline: float, now: float | None = None) -> Part:
    """``part``, as it goes out, with its fair slice of the time where it is timed (``TIMED``) and the run has a
    ``deadline``: the time left, shared among the timed parts still to go out (``waiting``: every part queued after
    it, read only for a timed part), ``workers`` at once. A part that ends early leaves its time to those after it."""
    if part.stage not in TIMED or not deadline:
        return part
    now = time.time() if now is None else now
    left = 1 + sum(1 for other in waiting if other.stage in TIMED)
    return part._replace(until=min(deadline, now + max(0.0, deadline - now) * workers / max(left, workers)))


class Timed:
    """The timed parts' ``time LEFT/PLANNED`` notes (run.deadline), held until their unit is done, and which part to
    send out again: a slice is fixed as a part goes out, so a costly part cut at its slice while the parts after it
    ended early would leave the run's time unused. Such a part, once it ends with cases left and the deadline not
    reached, goes out again (``again``) with the cases it ran done (the store's), at most ``AGAIN`` times; its notes
    are merged into one: what it planned first, what it left out last."""

    AGAIN = 8

    def __init__(self) -> None:
        self.counts: dict[int, dict[tuple, list[int]]] = {}  # id(unit) -> (index, stage) -> [left, planned, times out]

    def note(self, unit, part: tuple, text: str) -> None:
        left, _, planned = text.partition(" ")[2].partition("/")
        counts = self.counts.setdefault(id(unit), {}).setdefault((part[0], getattr(part, "stage", None)), [0, int(planned), 0])
        counts[0] = int(left)

    def again(self, unit, part: tuple | None, deadline: float) -> bool:
        """Whether ``part`` of ``unit``, just ended, goes out again: it left cases out, and there is time left."""
        counts = self.counts.get(id(unit), {}).get((part[0], getattr(part, "stage", None))) if part is not None else None
        if counts is None or not counts[0] or not deadline or time.time() >= deadline or counts[2] >= self.AGAIN:
            return False
        counts[0], counts[2] = 0, counts[2] + 1  # what it leaves out this time, it says again
        return True

    def notes(self, unit) -> list[str]:
        """The unit's merged notes, once it is done (forgotten after)."""
        return [f"time {left}/{planned}" for left, planned, _ in self.counts.pop(id(unit), {}).values() if left]


def in_part(case_id: str, part: tuple | None) -> bool:
    """Whether a case belongs to ``part`` (index, count, ...) of its unit's split (every case does when there is none)."""
    return part is None or zlib.crc32(case_id.encode()) % part[1] == part[0]


class Leaving(frozenset):
    """The cases a worker leaves out of its unit: those in ``skip`` and, for a part of a split unit, the other parts'
    (``case_id in leaving`` is all the engine asks of it; ``stage`` and ``until`` what the part runs, and by when;
    ``theirs`` tells another part's case from one done)."""

    def __new__(cls, skip, part: tuple | None):
        made = super().__new__(cls, skip)
        made.part = part
        made.stage = getattr(part, "stage", None)
        made.until = getattr(part, "until", 0.0)
        return made

    def __contains__(self, case_id) -> bool:
        return frozenset.__contains__(self, case_id) or not in_part(case_id, self.part)

    def theirs(self, case_id: str) -> bool:
        """Whether a sample's own case is another part's to run: another part's by the hash, or the ``base`` stage's
        where this is a later one."""
        return not in_part(case_id, self.part) or self.stage in TIMED
