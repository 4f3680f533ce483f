"""Worker processes that survive the ops they run.

Design note. A kernel bug can kill the process (segfault, abort) or never
return. Cases therefore run in worker processes (``spawn``: a fresh
interpreter, no forked thread pools). A worker takes one unit at a time and
streams events back over a pipe: ``("begin", case_id)`` before each case,
``("outcome", outcome)`` after it, ``("done", unit_key)`` at the end.

The parent waits on every pipe at once. When a worker's pipe closes early
it died; when a case runs past the timeout the worker is killed. Either
way the case that had begun and not finished is replayed alone in a fresh
worker first: a kernel that corrupts memory can kill the process several
cases later, and the case that happens to be running then is not to blame.
Only if the replay dies (or hangs) too is the case reported, through
``on_crash`` or ``on_hang``; if it passes, ``on_collateral`` says so. The
worker then resumes the unit after that case, skipping every case already
reported, so one bad kernel costs one case and the sweep goes on.

The pool knows nothing of what a unit or an event means beyond that; the
caller (torchsleuth.sweep) supplies the work function and handles events.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable, Iterable

# A worker that dies this many times on one unit without starting a case is
# given up on: the unit fails, the sweep goes on.
SETUP_RETRIES = 1


def _worker_main(conn: Connection, work: Callable, config, threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    import torch

    torch.set_num_threads(max(1, threads))
    while True:
        message = conn.recv()
        if message is None:
            return
        unit, skip, only = message
        try:
            for event in work(unit, config, frozenset(skip), only):
                conn.send(event)
        except Exception as e:  # outside any case: the unit cannot be set up
            conn.send(("failed", f"{type(e).__name__}: {e}"))
            continue
        conn.send(("done", unit))


@dataclass
class _Slot:
    process: multiprocessing.Process
    conn: Connection
    unit: object = None
    skip: set = field(default_factory=set)
    in_flight: str | None = None  # case id begun and not finished
    since: float = 0.0
    setup_failures: int = 0
    replaying: str | None = None  # case id being replayed alone after a death


class Pool:
    def __init__(self, work: Callable, config, *, workers: int, timeout: float, threads: int = 1):
        self.work, self.config = work, config
        self.workers, self.timeout, self.threads = max(1, workers), timeout, threads
        self.context = multiprocessing.get_context("spawn")
        self.slots: list[_Slot] = []

    def _start(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker_main, args=(child, self.work, self.config, self.threads), daemon=True)
        process.start()
        child.close()
        return _Slot(process=process, conn=parent)

    def run(
        self,
        units: Iterable,
        *,
        skip_for: Callable[[object], set],
        on_event: Callable[[object, str, object], None],
        on_crash: Callable[[object, str, str], None],
        on_hang: Callable[[object, str, float], None],
        on_unit_failed: Callable[[object, str], None],
        on_unit_done: Callable[[object], None],
        on_collateral: Callable[[object, str, str], None],
    ) -> None:
        """Run every unit; events arrive through the callbacks as ``(unit, ...)``."""
        self.callbacks = dict(on_crash=on_crash, on_hang=on_hang, on_collateral=on_collateral)
        queue = list(units)
        queue.reverse()
        try:
            self.slots = [self._start() for _ in range(min(self.workers, len(queue)))]
            for slot in self.slots:
                self._assign(slot, queue, skip_for)
            while any(slot.unit is not None for slot in self.slots):
                busy = [slot for slot in self.slots if slot.unit is not None]
                ready = wait([slot.conn for slot in busy], timeout=self._wait_time(busy))
                for slot in busy:
                    if slot.conn in ready:
                        self._drain(slot, queue, skip_for, on_event, on_crash, on_unit_failed, on_unit_done)
                    elif slot.in_flight is not None and time.monotonic() - slot.since > self.timeout:
                        self._kill(slot)
                        self._case_failed(slot, "hang", f"no answer after {self.timeout:g} s")
        finally:
            self.close()

    def _wait_time(self, busy: list[_Slot]) -> float:
        now = time.monotonic()
        left = [self.timeout - (now - slot.since) for slot in busy if slot.in_flight is not None]
        return max(0.05, min(left)) if left else 1.0

    def _assign(self, slot: _Slot, queue: list, skip_for) -> None:
        slot.unit, slot.in_flight = None, None
        if not queue:
            return
        slot.unit = queue.pop()
        slot.skip = set(skip_for(slot.unit))
        slot.setup_failures = 0
        slot.conn.send((slot.unit, slot.skip, None))

    def _drain(self, slot: _Slot, queue, skip_for, on_event, on_crash, on_unit_failed, on_unit_done) -> None:
        while True:
            try:
                if not slot.conn.poll():
                    return
                kind, payload = slot.conn.recv()
            except (EOFError, OSError):
                return self._died(slot, queue, skip_for, on_crash, on_unit_failed)
            if kind == "begin":
                slot.in_flight, slot.since = payload, time.monotonic()
            elif kind == "outcome":
                slot.skip.add(slot.in_flight)
                slot.in_flight = None
                on_event(slot.unit, kind, payload)
            elif kind == "done" and slot.replaying is not None:
                # the replayed case passed alone: its death was collateral
                self.callbacks["on_collateral"](slot.unit, slot.replaying, "it passed when run alone")
                slot.skip.add(slot.replaying)
                slot.replaying = None
                slot.conn.send((slot.unit, slot.skip, None))
                return
            elif kind == "done":
                on_unit_done(slot.unit)
                self._assign(slot, queue, skip_for)
                return
            elif kind == "failed":
                on_unit_failed(slot.unit, payload)
                self._assign(slot, queue, skip_for)
                return

    def _died(self, slot: _Slot, queue, skip_for, on_crash, on_unit_failed) -> None:
        slot.process.join(timeout=5)
        code = slot.process.exitcode
        how = _describe_exit(code)
        case_id = slot.in_flight
        if case_id is None:  # died outside any case: retry the unit once, then give up on it
            slot.setup_failures += 1
            self._replace(slot)
            if slot.setup_failures > SETUP_RETRIES:
                on_unit_failed(slot.unit, how)
                self._assign(slot, queue, skip_for)
            else:
                slot.conn.send((slot.unit, slot.skip, None))
            return
        self._case_failed(slot, "crash", how)

    def _case_failed(self, slot: _Slot, kind: str, how: str) -> None:
        """A case killed its worker: replay it alone, or, if this was the replay, report it."""
        case_id = slot.in_flight
        slot.in_flight = None
        self._replace(slot)
        if slot.replaying == case_id:
            slot.replaying = None
            self.callbacks["on_" + kind](slot.unit, case_id, how)
            slot.skip.add(case_id)
            slot.conn.send((slot.unit, slot.skip, None))
        else:
            slot.replaying = case_id
            slot.conn.send((slot.unit, slot.skip, case_id))

    def _replace(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            self._kill(slot)
        fresh = self._start()
        slot.process, slot.conn = fresh.process, fresh.conn

    def _kill(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            os.kill(slot.process.pid, signal.SIGKILL)
        slot.process.join(timeout=5)
        slot.conn.close()

    def close(self) -> None:
        for slot in self.slots:
            try:
                if slot.process.is_alive():
                    slot.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 2
        for slot in self.slots:
            slot.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(timeout=2)
        self.slots = []


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker died of {name}"
    return f"the worker exited with status {code}"
