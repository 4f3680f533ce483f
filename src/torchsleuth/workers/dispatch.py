"""What both worker pools share: a slot per unit in flight, and what each event of its worker means.

Design note. The local pool (workers.pool: worker processes on this machine) and the
Ray pool (workers.ray_pool: Ray tasks, on a cluster) differ only in how a unit's
events travel and how a worker is ended or replaced. What the events mean is
here, once: ``begin`` marks a case in flight (and starts its clock),
``outcome`` ends it, a worker that dies or hangs with a case in flight has that
case replayed alone in a fresh worker, and only a replay that dies or hangs too
is reported (``on_failed``, with the case's description: the ``call`` the
replay's worker sent before running it, else asked of yet another worker,
which the end of a GPU run waited for, 2-7 s); a replay that passes is
``on_collateral``. The unit then resumes after that case, skipping every case
already reported. A worker that dies outside any case has its unit retried
``SETUP_RETRIES`` times, then the unit fails.

A hang's replay waits for the end. The case that hung has cost its timeout;
replayed at once, it costs another before its unit can go on, and on a GPU a
hanging kernel holds the device while every other worker's kernels wait their
turn (bench/cuda-sweep.md). So a case that hangs is set aside: its unit goes on
in a fresh worker without it, and the set-aside cases are replayed, each alone
in a fresh worker, once no unit is left to hand out, side by side, the whole
tail costing one timeout. On the CPU a replay takes a worker that is through
with its units (a hang holds a core); on a shared accelerator (``first`` below
one) each starts as the last unit is handed out, in a slot of its own beyond the
workers (``extra``, gone once its replay is settled), for that tail is the run's
end, in a worker the pool started as the hang was set aside (``_ahead``), warm
by then. Their units are told done only when their last set-aside case is
settled: a run killed before that resumes them. A crash's replay is cheap and
stays where it is. Where workers share a GPU (``first`` below one) a case is set
aside once it has run for that share of its time: a hanging kernel would hold
the device that long, and the replay at the end, given the whole time, still
tells a hang from a slow case. A case that sets the same values as a hang set
aside (its ``kin``, search.edits.kin: the same op and searched values in another
sample, layout, variant or dtype, so in another unit too) is set aside as soon
as it begins, its worker ended before its kernel holds the device: it would most
likely hang as well, and its replay at the end tells. And once a case setting
values hung, the unit's other cases setting values get a smaller share
(``after_hang``): an op that hangs on some searched values most often hangs on
others. A case setting searched values at all gets a smaller share than the
first (``searched``): that is where ops hang, and hanging kernels side by side
slow the whole pool about fivefold. OpInfo's own samples keep the first share (a
slow kernel compiled on first use, set aside, is compiled again in each fresh
worker).

Units are split into parts (workers.parts: a ``part`` runs only its own
cases of the unit; the unit is done when every part is), only those
``share`` allows (the sweep's, not the shrink stage's jobs). Up front, and
in stages where the run has a time target: the queue holds (unit, part).
And once nothing is left to hand out: a unit that crashes or hangs case
after case can be the last one running while every other worker idles, so
when it goes on after a failed case (the one moment its worker is fresh and
told what to run) and workers idle, its rest is split among them; a part is
not split again. A unit's notes are taken from its first part only (each
plans the whole unit and says the same), but for the ``time`` notes, which
count each part's own cases: held until the unit is done, a timed part that
left cases out sent out again while there is time (workers.parts.Timed).

``Dispatcher.run`` is the loop both share: start the slots, hand out units,
wait for whichever worker speaks, check the clocks of the others. A pool
subclasses it and moves the messages: ``_start`` (a slot), ``_ready`` (the
slots whose worker sent something, waiting at most a timeout), ``_drain``
(read a slot's events, feeding each to ``_event`` and a worker's death to
``_died``), ``_send_run`` (the slot's unit, skipping ``slot.skip``; only one
case when ``only`` is given), ``_send_describe``, ``_replace`` (a fresh worker
in the slot), ``_kill`` (end a worker that hangs) and ``close``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterable

from . import parts
from .records import Callbacks, Slot

# A worker that dies this many times on one unit outside any case is given
# up on: the unit fails, the sweep goes on.
SETUP_RETRIES = 1


class Dispatcher:
    """The bookkeeping of the slots; a subclass moves the messages (see the design note)."""

    outcomes: int = 0  # cases whose outcome a worker sent, over every run of the pool
    workers: int
    timeout: float
    slower: Callable[[str], float]  # a case id -> how many timeouts it may take
    first: float = 1.0  # the share of its time a case may take before it is set aside, unless it is a replay (first_share)
    searched: float = 1.0  # the share of a case setting searched values (searched_share)
    after_hang: float = 1.0  # the share of a case setting values in a unit where such a case hung (after_hang_share)
    kin: Callable[[str], str | None] | None = None  # a case id -> what it shares with the cases that hang with it
    share: Callable[[object], bool] | None = None  # whether a unit's rest may be split among idle workers
    deadline: float = 0.0  # the wall-clock second a run's sweep stops starting oracle and searched cases (run.deadline)
    cb: Callbacks
    queue: list
    slots: list

    def run(self, units: Iterable, callbacks: Callbacks, *, close: bool = True) -> None:
        """Run every unit; what happens arrives through ``callbacks``.

        With ``close=False`` the workers stay up for the next ``run`` (the sweep
        and its shrink stage share them: starting a worker costs seconds);
        ``close()`` ends them.
        """
        self.cb = callbacks
        items = parts.plan(list(units), self.workers, self.share, staged=self.deadline > 0)
        self.pieces = Counter(id(unit) for unit, part in items if part is not None)  # id(unit) -> its parts, all stages
        self.queue = items[::-1]  # (unit, part): workers.parts
        self.timed = parts.Timed()
        self.later: list[tuple[object, str, str]] = []  # (unit, case id, how) of the hangs set aside
        self.unsettled: dict[int, int] = {}  # id(unit) -> its hangs set aside and not yet settled
        self.ended: dict[int, tuple[object, str, str]] = {}  # id(unit) -> (unit, state, detail): done, waiting for those
        self.hung: set[str] = set()  # the kin of the hangs set aside, in any unit (the same op in another dtype too)
        self.hung_units: set[int] = set()  # id(unit) of the units with such a hang: after_hang for their cases with kin
        self.parts: dict[int, list] = {}  # id(unit) -> [parts still running, what a part that failed said]
        try:
            while len(self.slots) < min(self.workers, len(self.queue)):
                self.slots.append(self._start())
            for slot in self.slots:
                self._next_unit(slot)
            while any(slot.unit is not None for slot in self.slots):
                busy = [slot for slot in self.slots if slot.unit is not None]
                ready = self._ready(busy, self._wait_time(busy))
                for slot in busy:
                    if any(slot is r for r in ready):
                        self._drain(slot)
                    else:
                        self._check_time(slot)
        except BaseException:
            self.close()
            raise
        if close:
            self.close()

    # --- what a pool provides --------------------------------------------------------------

    def _start(self) -> Slot:
        """A new slot with its worker (or a place for one)."""
        raise NotImplementedError

    def _ready(self, busy: list[Slot], timeout: float) -> list[Slot]:
        """The busy slots whose worker has sent something, waiting at most ``timeout`` seconds for one."""
        raise NotImplementedError

    def _drain(self, slot: Slot) -> None:
        """Read what the slot's worker sent, feeding each event to ``_event``."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _send_run(self, slot: Slot, only: str | None = None) -> None:
        raise NotImplementedError

    def _send_describe(self, slot: Slot, case_id: str) -> None:
        raise NotImplementedError

    def _replace(self, slot: Slot) -> None:
        """A fresh worker for the slot (the old one ended), with no case in flight."""
        raise NotImplementedError

    def _kill(self, slot: Slot) -> None:
        raise NotImplementedError

    def _fresh(self) -> Slot:
        """A new slot with a fresh worker, for a replay beyond the workers (a pool may have one warm)."""
        return self._start()

    def _ahead(self) -> None:
        """A hang was set aside (``later``): a pool may start a worker for its replay now, to be warm when it begins."""

    def _last_words(self, slot: Slot) -> str:
        """Where in its case the slot's worker died or hangs, as `` at PLACE`` (workers.faults); '' where unknown."""
        return ""

    # --- shared ----------------------------------------------------------------------------

    def _wait_time(self, busy: list[Slot]) -> float:
        now = time.monotonic()
        left = [slot.limit - (now - slot.since) for slot in busy if slot.in_flight is not None]
        return max(0.05, min(left)) if left else 1.0

    def _next_unit(self, slot: Slot) -> None:
        slot.unit, slot.in_flight, slot.replaying, slot.describing, slot.set_aside, slot.part, slot.call = None, None, None, None, False, None, None
        if not self.queue and self.later and not slot.extra:  # no unit left: replay a hang set aside, alone in a fresh worker
            self._replay(slot)
        elif not self.queue and slot.extra:  # its replay settled
            self.slots.remove(slot)
            self._kill(slot)
        elif self.queue:
            slot.unit, part = self.queue.pop()
            if part is not None:  # split up front or staged (workers.parts): its parts go out one by one; it ends with its last
                slot.part = parts.sliced(part, (other for _, other in self.queue if other is not None), workers=self.workers,
                                         deadline=self.deadline)
                self.parts.setdefault(id(slot.unit), [self.pieces[id(slot.unit)], ""])
            slot.skip = set(self.cb.skip_for(slot.unit))
            slot.setup_failures = 0
            self._send_run(slot)
            self._replays_at_once()

    def _replay(self, slot: Slot, fresh: bool = False) -> None:
        slot.unit, case_id, _ = self.later.pop(0)
        slot.skip, slot.replaying, slot.set_aside, slot.call = set(), case_id, True, None
        if not fresh:
            self._replace(slot)
        self._send_run(slot, only=case_id)

    def _replays_at_once(self) -> None:
        """Once the last unit is handed out, on an accelerator the workers share, each hang set aside replayed in an
        extra slot of its own now (see the design note)."""
        while not self.queue and self.later and self.first < 1.0:
            slot = self._fresh()
            slot.extra = True
            self.slots.append(slot)
            self._replay(slot, fresh=True)

    def _check_time(self, slot: Slot) -> None:
        """A slot that sent nothing: a description or a case past its time has its worker killed."""
        if time.monotonic() - slot.since > self.timeout and slot.describing is not None:
            self._kill(slot)
            self._described(slot, None)
        elif slot.in_flight is not None and time.monotonic() - slot.since > slot.limit:
            where = self._last_words(slot) if slot.replaying == slot.in_flight else ""  # only a replay's hang is reported
            self._kill(slot)
            self._case_failed(slot, "hang", f"no answer after {slot.limit:g} s{where}")

    def _event(self, slot: Slot, kind: str, payload) -> bool:
        """One event from the slot's worker; False when the worker's stream is done with (read no further)."""
        if kind == "begin":
            slot.in_flight, slot.since = payload, time.monotonic()
            if slot.replaying == payload:
                slot.replayed = "pass"  # until its outcome says otherwise
            asked = self.kin is not None and slot.replaying != payload and (self.hung or self.searched < 1.0)
            kin = self.kin(payload) if asked else None  # what the case's searched values are, where it sets any
            if kin is not None and kin in self.hung:
                self._kill(slot)  # before its kernel holds the device
                self._case_failed(slot, "hang", "set aside unrun: a case setting the same values hung")
                return False
            share = self.first
            if kin is not None:
                share = min(share, self.searched, self.after_hang if id(slot.unit) in self.hung_units else 1.0)
            slot.limit = self.timeout * self.slower(payload) * (1.0 if slot.replaying == payload else share)
        elif kind == "outcome":
            self.outcomes += 1
            if slot.replaying is not None and slot.replaying == slot.in_flight:
                slot.replayed = getattr(payload, "status", "pass")
            slot.skip.add(slot.in_flight)
            slot.in_flight = None
            self.cb.on_outcome(slot.unit, payload)
        elif kind == "call" and slot.replaying is not None and slot.replaying == slot.in_flight:
            slot.call = payload
        elif kind == "note" and payload.startswith("time ") and slot.part is not None:
            self.timed.note(slot.unit, slot.part, payload)  # held until the unit is done (workers.parts.Timed)
        elif kind == "note":
            if slot.part is None or slot.part[0] == 0:
                self.cb.on_note(slot.unit, payload)
        elif kind == "described":  # read no further: the slot's worker may be ended (an extra slot's) or replaced
            self._described(slot, payload)
            return False
        elif kind == "lost":  # the worker is gone, after its case's outcome; a fresh one goes on with the unit
            self._renew(slot, settled=slot.replaying is not None)
            if slot.replaying is None:
                self._resume(slot)
            else:  # a replay that lost the device ran to its end (resumed, a hang's replay ran its whole unit again)
                self._replayed(slot)
            return False
        elif kind == "done" and slot.replaying is not None:
            self._replayed(slot)
            return False
        elif kind in ("done", "failed"):
            self._ended(slot, kind, payload or "")
            return False
        return True

    def _renew(self, slot: Slot, settled: bool) -> None:
        """A fresh worker for the slot, unless it is an extra slot whose replay is now ``settled``: it ends (_next_unit)."""
        if settled and slot.extra:
            self._kill(slot)
        else:
            self._replace(slot)

    def _replayed(self, slot: Slot) -> None:
        """The replay alone ran to its end: the case was collateral (its outcome kept); the slot goes on."""
        alone = ("it passed when run alone in a fresh worker" if slot.replayed == "pass"
                 else f"not when it ran alone in a fresh worker (its outcome there: {slot.replayed})")
        self.cb.on_collateral(slot.unit, slot.replaying, alone)
        slot.skip.add(slot.replaying)
        slot.replaying = None
        self._go_on(slot)

    def _ended(self, slot: Slot, state: str, detail: str) -> None:
        """The slot's worker is through with its unit ("done", or "failed" and why); the slot takes the next."""
        key = id(slot.unit)
        parts = self.parts.get(key)
        if parts is not None and state == "done" and self.timed.again(slot.unit, slot.part, self.deadline):
            self.queue.insert(0, (slot.unit, slot.part._replace(until=0.0)))  # out again, last: it left cases out (Timed)
            return self._next_unit(slot)
        if parts is not None:  # a part of a split unit: the unit ends with its last part
            parts[0] -= 1
            parts[1] = parts[1] or (detail if state == "failed" else "")
            if parts[0]:
                return self._next_unit(slot)
            del self.parts[key]
            state, detail = ("failed", parts[1]) if parts[1] else (state, detail)
        if self.unsettled.get(key):  # a hang of this unit is set aside: done once it is settled
            self.ended[key] = (slot.unit, state, detail)
        else:
            self._done(slot.unit, state, detail)
        self._next_unit(slot)

    def _done(self, unit, state: str, detail: str) -> None:
        for note in self.timed.notes(unit):
            self.cb.on_note(unit, note)
        self.cb.on_unit_done(unit, state, detail)

    def _go_on(self, slot: Slot) -> None:
        """After a failed case is settled: the rest of the unit, or, for a hang set aside, the next unit."""
        if not slot.set_aside:
            return self._resume(slot)
        key = id(slot.unit)
        self.unsettled[key] -= 1
        if not self.unsettled[key] and key in self.ended:
            self._done(*self.ended.pop(key))
        self._next_unit(slot)

    def _described(self, slot: Slot, call) -> None:
        """Report the failed case with its description (None if describing it failed too)."""
        case_id, failure, how = slot.describing
        slot.describing = None
        if call is None:
            self._replace(slot)
        self.cb.on_failed(slot.unit, case_id, failure, how, call)
        self._go_on(slot)

    def _died(self, slot: Slot, how: str) -> None:
        """The slot's worker died (``how``, in words): blame the case in flight, or retry the unit."""
        if slot.describing is not None:
            return self._described(slot, None)
        if slot.in_flight is not None:
            return self._case_failed(slot, "crash", how + self._last_words(slot))
        # died outside any case: retry the unit once, then give up on it
        slot.setup_failures += 1
        self._replace(slot)
        if slot.setup_failures > SETUP_RETRIES:
            self._ended(slot, "failed", how)
        else:
            self._send_run(slot)

    def _case_failed(self, slot: Slot, kind: str, how: str) -> None:
        """A case killed its worker: replay it alone; if this was the replay, report it with its description (the
        one the replay's worker sent first, else asked of a fresh worker)."""
        case_id = slot.in_flight
        described = slot.replaying == case_id and slot.call is not None
        self._renew(slot, settled=described)
        if kind == "hang" and slot.replaying != case_id:  # set aside: replayed when no unit is left
            self.later.append((slot.unit, case_id, how))
            self._ahead()
            self.unsettled[id(slot.unit)] = self.unsettled.get(id(slot.unit), 0) + 1
            kin = self.kin(case_id) if self.kin else None
            if kin is not None:
                self.hung.add(kin)
                self.hung_units.add(id(slot.unit))
            slot.skip.add(case_id)
            self._replays_at_once()
            for idle in self.slots:  # a worker with no unit left to take replays it now
                if idle.unit is None and not self.queue and self.later:
                    self._next_unit(idle)
            self._resume(slot)
        elif slot.replaying == case_id:
            slot.replaying = None
            slot.skip.add(case_id)
            slot.describing, slot.since = (case_id, kind, how), time.monotonic()
            if described:
                self._described(slot, slot.call)
            else:
                self._send_describe(slot, case_id)
        else:
            slot.replaying, slot.call = case_id, None
            self._send_run(slot, only=case_id)

    def _resume(self, slot: Slot) -> None:
        """The rest of the slot's unit in its fresh worker; shared with the idle workers when nothing is left to hand
        out (see the design note)."""
        idle = [other for other in self.slots if other.unit is None and other is not slot]
        if idle and not self.queue and not self.later and slot.part is None and self.share is not None and self.share(slot.unit):
            count = len(idle) + 1
            parts = self.parts.setdefault(id(slot.unit), [1, ""])
            parts[0] += len(idle)
            slot.part = (0, count)
            for index, other in enumerate(idle, 1):
                other.unit, other.skip, other.part, other.setup_failures = slot.unit, set(slot.skip), (index, count), 0
                self._send_run(other)
        self._send_run(slot)
