"""A run's time target inside a unit: which of its cases still run once the sweep's share of the target is spent.

Design note. ``SweepConfig.time_target`` is the time a run aims to end within (a pointed run's default: cli.ops, the
sweep's ``depth``). The sweep gives its cases ``SHARE`` of it: ``SweepConfig.deadline``, the wall-clock second the
share ends, set when the sweep begins (sweep.sweep; every worker of the pool reads the same clock), and leaves the rest
to the cases in flight then, the refusal differential's replays, shrinking and diagnosis.

Past the deadline a unit runs only the cases that make the sweep what it is: OpInfo's samples on every layout and
variant (``Case.edits`` and ``Case.oracle`` empty). An oracle's case or a searched one is left out, counted, and the
unit says so in a ``time LEFT/PLANNED`` note: counts of its own cases (those of its part, where the unit is split among
workers: held by workers.parts.Timed), which the summary sums over the units (report.notes). The searched cases run in
an order whose every prefix is spread over the whole plan (``spread``), so that the share that ran is a sample of every
search and every sample, not the first search's cases; an oracle's cases run where the sample they belong to does.

Where the pool stages its units (workers.parts: every unit's ``base`` cases, then every unit's ``searched`` ones and
``slow`` ones, those of the oracles that take longer than a call, in turn; ``in_stage`` says which is whose), a part of
a timed stage also has its own slice of the time (``Part.until``): its clock stops at the earlier of the two.

After the sweep's cases, the rest of the target (``finish``: the run's own end) bounds what comes after them: the
refusal differential's replays take a share of it (shrink.refusals), and shrinking and diagnosis begin no finding,
group or neighbour that would not end by then (shrink.stage: ``fits``, on the time such a case took); what they leave
is kept as found, or left undiagnosed, and counted (report.notes).

A case already running at the deadline runs to its end (its own timeout bounds it), but for an oracle whose case makes
several costly calls: it asks ``passed`` between them (the span probe tries one dim after another, each tens of
seconds on an H100's host), with the seconds the last one took, and makes no further call that would end past it. So
that such a case does not begin just before the deadline and run tens of seconds past it, an oracle's case begins only
where the slowest case of its form this process has run (``took``: the span probe, a compile) would still end by the
sweep's deadline (``Clock.end``); the first of each form has no estimate and begins while time is left. A replay
(``only``) and a run with no target have no deadline.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

# The share of a run's time target its sweep's cases get; the rest is for what runs after them (see the design note).
SHARE = 0.6
# The clock of the unit whose case this process runs now (``running``), for ``passed``.
_current = None
# The seconds the slowest case of each oracle form (``form``) took in this process (``took``), for ``expected``.
_slowest: dict[str, float] = {}


def deadline(time_target: float, *, now: float | None = None) -> float:
    """The wall-clock second a sweep's cases end by, for a run starting ``now`` with ``time_target`` seconds (0: none)."""
    if time_target <= 0:
        return 0.0
    return (time.time() if now is None else now) + SHARE * time_target


def finish(config) -> float:
    """The wall-clock second a run with a time target aims to end by (0: none): its sweep's ``deadline`` and the rest
    of the target."""
    if not getattr(config, "deadline", 0.0) or not getattr(config, "time_target", 0.0):
        return 0.0
    return config.deadline + (1 - SHARE) * config.time_target


def fits(until: float, seconds: float, *, now: float | None = None) -> bool:
    """Whether work that takes about ``seconds`` and begins ``now`` ends by ``until`` (0: no limit; work with no
    estimate fits while time is left)."""
    now = time.time() if now is None else now
    return not until or now + max(seconds, 0.0) <= until


def earliest(*deadlines: float) -> float:
    """The first of ``deadlines`` that are set (0: none)."""
    return min((d for d in deadlines if d), default=0.0)


@dataclass(kw_only=True, slots=True)
class Clock:
    """One unit's view of the deadline (0: none): which cases still run, and how many it left out of how many."""

    deadline: float = 0.0
    end: float = 0.0  # the sweep's own deadline (``deadline`` may be a part's earlier slice): an oracle's case ends by it
    planned: int = 0  # the unit's own oracle and searched cases asked about
    left: int = 0  # of those, the ones left out

    def runs(self, case) -> bool:
        """Whether ``case`` (one this unit would run) runs: always for a sample's own case, before the deadline for the
        others, and an oracle's case only where the slowest of its form so far would end by the sweep's deadline."""
        if not self.deadline or (not case.edits and not case.oracle):
            return True
        self.planned += 1
        now = time.time()
        if now <= self.deadline and fits(self.end or self.deadline, expected(case), now=now):
            return True
        self.left += 1
        return False

    def note(self) -> str | None:
        """``time LEFT/PLANNED``, where the deadline left any of the unit's cases out."""
        return f"time {self.left}/{self.planned}" if self.left else None


def in_stage(stage: str | None, *, slow: bool, searched: bool) -> bool:
    """Whether a case belongs to ``stage`` (workers.parts.STAGES; None: every case): ``slow`` for the cases of an oracle
    that takes longer than a call (``Oracle.slower``), else ``searched`` for the cases the search runs, else ``base``."""
    if stage is None:
        return True
    return stage == ("slow" if slow else "searched" if searched else "base")


@contextlib.contextmanager
def running(clock: Clock | None, case=None):
    """``clock`` the one ``passed`` reads while a case runs (the engine's, around each case of a unit); ``case``, where
    given, is told how long it took (``took``) once it ends without an error."""
    global _current
    before, _current = _current, clock
    began = time.monotonic()
    try:
        yield
        if case is not None:
            took(case, time.monotonic() - began)
    finally:
        _current = before


def passed(seconds: float = 0.0) -> bool:
    """Whether the deadline of the unit whose case runs now has passed, or would have after ``seconds`` more: an oracle
    whose one case makes several costly calls (the large oracle's span probe, one dim after another) stops between them,
    where the next, as long as the last, would end past it. False outside a unit's case (a replay, the shrinker's)."""
    if _current is None or not _current.deadline:
        return False
    now = time.time()
    return now > _current.deadline or not fits(_current.end or _current.deadline, seconds, now=now)


def form(case) -> str:
    """An oracle case's form, its oracle's first two words (``large:span`` of ``large:span=8388611``, ``compile:chain`` of
    ``compile:chain:abs>@``); "" for any other case."""
    return ":".join(case.oracle.split("=")[0].split(":")[:2]) if case.oracle else ""


def took(case, seconds: float) -> None:
    """``case`` took ``seconds`` in this process: the estimate of its form's next cases (``expected``)."""
    key = form(case)
    if key:
        _slowest[key] = max(_slowest.get(key, 0.0), seconds)


def expected(case) -> float:
    """What ``case`` is expected to take: the slowest case of its form this process has run (0: none yet)."""
    return _slowest.get(form(case), 0.0)  # "" (not an oracle's case) is never a key


def spread(items: list) -> list:
    """``items`` reordered so that every prefix is spread over the whole list (the bit-reversed order of the indices:
    the first, the middle, the quarters, the eighths, ...)."""
    bits = max(1, (len(items) - 1).bit_length())
    order = sorted(range(len(items)), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))
    return [items[i] for i in order]
