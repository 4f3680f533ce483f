"""Worker processes that survive the ops they run.

Design note. A kernel bug can kill the process (segfault, abort), never
return, or leave an accelerator unusable (a CUDA device-side assert or
misaligned address poisons the process's context). Cases therefore run in
worker processes (forked from a clean fork server, or spawned: never forked
from a process with thread pools or a device context; see below). A
worker takes one unit at a time and streams events back over a pipe:
``("begin", case_id)`` before each case, ``("outcome", outcome)`` after it,
``("call", description)`` between them for a case replayed alone,
``("note", "KIND DETAIL")`` for what a unit says that is no outcome (the search's
budget), ``("done", None)`` at the end, ``("failed", why)`` if the unit cannot be set
up, and ``("lost", why)`` when the device it runs on no longer works (the
worker then exits and is replaced).

The parent waits on every pipe at once. When a worker's pipe closes early
it died; when a case runs past the timeout the worker is killed. Either way
the case that had begun and not finished is replayed alone in a fresh
worker first: a kernel that corrupts memory can kill the process several
cases later, and the case that happens to be running then is not to blame.
Only if the replay dies (or hangs) too is the case reported, through
``on_failed(unit, case_id, kind, how, call)``, where ``call`` is the case's
description, which the replay's worker sends before it runs the case (or,
where it could not, ``describe`` run in another fresh worker); if the replay
passes, ``on_collateral`` says so. The worker then resumes the unit after
that case, skipping every case already reported, so one bad kernel costs one
case and the sweep goes on.

A worker's start costs seconds (3 s on a CPU, 10-15 s beside a GPU: importing
torch, loading OpInfo's catalog, making the device's context; bench/sweep-profile.md),
and every death and every replay alone asks for a fresh one: on a GPU, where
device-side asserts end workers by the hundred, that waiting was a quarter of a
whole-catalog sweep (bench/cuda-sweep.md). Two things cut it. On Linux, for a
sweep on the CPU or a CUDA GPU, workers are forked from a fork server that has
imported torch, torchsleuth and the modules in ``preload`` and loaded the
catalog once (workers.starts, workers.preload): a replacement is ready in 0.01 s
instead of 2.2 on a CPU; beside a GPU it makes only its device's context. A
forked worker takes the parent's environment as it is when the worker starts,
as a spawned one does. And once a pool has replaced a worker, it
keeps ``spares`` more started and warmed (``warm(config)`` run before the worker
waits for work: the catalog loaded, the device's context made), and a replacement
takes a spare that is ready; the pool starts another in its place (up to half
the workers once no unit is left to hand out: the units still running then are
those that crash case after case). A pool whose workers never die never starts one.
Beside a GPU a start can take 3-23 s once kernels have faulted the device by the
dozen, and the crashing units take the spares as fast as they are made; so on a
shared accelerator the replay of each hang set aside gets a worker of its own,
started as the hang is set aside (``reserved``, ``_ahead``).

Every worker hashes strings alike (workers.starts.hash_seed), so that a case's
sample index names the same sample in a replay, a resumed unit or a shrink.

With ``pins`` (one environment per GPU, devices.pinned) the workers are spread
over several GPUs: each process starts with the next pin's environment in turn,
and a replacement, a spare it takes included, has the pin of the worker it
replaces, so every GPU keeps its share of the workers.

Whatever a worker prints (a CUDA device-side assert, glibc's heap-corruption
abort) goes to the ``log`` file when one is given, not to the terminal. Where
a worker was when it died, or hung (asked just before it is killed), goes to a
file of its own beside the log, and into the crash or hang it is reported as
(workers.faults).

The pool knows nothing of what a unit or an event means beyond that; the
caller (torchsleuth.sweep) supplies the work and describe functions. What the
events mean (the replay, the report, the retries) is workers.dispatch's, which the
Ray pool (workers.ray_pool) shares.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Callable

from .. import devices
from . import faults
from .dispatch import Dispatcher
from .records import Settings, Slot, Work
from .parts import Leaving
from .starts import temporary_environ, default_start, hash_seed, server_holds_catalog, start_context


class DeviceLost(Exception):
    """Raised by the work function: the device no longer works in this process."""


class DeviceUnavailable(Exception):
    """Raised by the warm-up function: this process cannot run a kernel on the device at all, from its start."""


# The status a worker exits with when its device cannot run a kernel from its start (DeviceUnavailable). Beside an
# H200 whose driver refused new contexts near the end of a catalog sweep, each fresh worker's cases were recorded as
# raised ("No CUDA GPUs are available", 204 of them) and every unit's rest went to another such worker, 5,263 of them
# (run S, bench/cuda-sweep.md); now its units fail, saying so.
UNAVAILABLE = 4

# How long a worker whose pipe closed has to exit before it is taken for one that stopped answering.
EXIT_WAIT = 5.0


def _worker_main(conn: Connection, work: Callable, describe: Callable, config, threads: int, log: str | None,
                 warm: Callable | None = None, environ: dict | None = None, stacks: str | None = None) -> None:
    if environ is not None:  # forked from the server: the parent's environment now, not the server's
        os.environ.clear()
        os.environ.update(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    if log is not None:
        # what kernels print (device-side asserts, allocator aborts, C++ traces) goes to
        # the log, not over the user's progress bar; file descriptors, so C code's too
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if stacks is not None:  # where this worker's Python stacks go when it dies or is asked (workers.faults)
        faults.arm(stacks)
    import torch

    torch.set_num_threads(max(1, threads))
    if warm is not None:
        try:
            warm(config)
        except DeviceUnavailable as e:  # no case could be judged here: the unit is failed for it (_describe_exit)
            print(f"torchsleuth worker: {e}", file=sys.stderr, flush=True)
            os._exit(UNAVAILABLE)
        except Exception:  # what fails here fails again in the unit, where it is reported
            pass
    while True:
        message = conn.recv()
        if message is None:
            return
        verb, unit, *rest = message
        if verb == "describe":
            try:
                conn.send(("described", describe(unit, config, rest[0])))
            except Exception:
                conn.send(("described", None))
            continue
        skip, only, part = rest
        for event in unit_events(work, unit, config, Leaving(skip, part), only):
            conn.send(event)
            if event[0] == "lost":  # the device no longer works in this process: end it
                conn.close()
                os._exit(0)


def unit_events(work: Callable, unit, config, skip: frozenset, only: str | None):
    """A unit's events as a worker sends them: ``work``'s own, then ``done``; ``lost`` when the device no longer works
    in the process (``DeviceLost``), ``failed`` when the unit cannot be set up (an error outside any case)."""
    try:
        yield from work(unit, config, skip, only)
    except DeviceLost as e:
        yield "lost", str(e)
        return
    except Exception as e:
        yield "failed", f"{type(e).__name__}: {e}"
        return
    yield "done", None


@dataclass(kw_only=True)
class _Slot(Slot):
    process: multiprocessing.Process
    conn: Connection
    pin: dict | None = None  # the environment that pins its worker to a GPU
    closed: float | None = None  # when its pipe closed, its worker not yet seen to exit (``_drain``)


def stacks_directory(log: str | None) -> str:
    """Where the workers' stacks go (workers.faults), made now: beside the log (``runs.workers.log`` ->
    ``runs.workers.stacks``), so that a run killed before its pool closed leaves them beside its store, where the next
    run over that store takes them over and removes them; a temporary directory for a pool without a log."""
    if log is None:
        return tempfile.mkdtemp(prefix="torchsleuth-stacks-")
    path = os.path.splitext(log)[0] + ".stacks"
    os.makedirs(path, exist_ok=True)
    return path


def default_spares(workers: int) -> int:
    """Warm spares a pool keeps once it has replaced a worker: one for every four workers, at least one."""
    return max(1, workers // 4)


class Pool(Dispatcher):
    def __init__(self, work: Work, settings: Settings):
        self.work, self.describe, self.config, self.warm = work.run, work.describe, work.config, work.warm
        self.slower, self.kin, self.share = work.slower, work.kin, work.share
        self.log, self.workers, self.timeout, self.threads = settings.log, max(1, settings.workers), settings.timeout, settings.threads
        self.environ, self.remark = dict(settings.environ or {}), settings.remark  # what every worker's environment adds; said by where()
        self.first, self.searched, self.after_hang = settings.first, settings.searched, settings.after_hang  # see workers.dispatch
        self.deadline = settings.deadline
        self.spares = default_spares(self.workers) if settings.spares is None else settings.spares
        self.start, self.preload = settings.start or default_start(), tuple(settings.preload)
        self.context = None  # chosen at the first worker's start (start_context)
        self.slots: list[_Slot] = []
        self.spare: list[_Slot] = []  # started workers waiting for a slot (none until the first replacement)
        self.reserved: list[_Slot] = []  # started for the replays of the hangs set aside, on a shared accelerator (_ahead)
        self.started = 0  # worker processes started, spares included
        self.dying: list[multiprocessing.Process] = []  # workers killed and not yet seen to exit (_kill)
        self.pins = list(settings.pins)
        self.stacks: str | None = None  # the directory the workers' stacks are written to (stacks_directory), made at the first start

    def _ready(self, busy: list[_Slot], timeout: float) -> list[_Slot]:
        """A slot is ready when its worker sent something, or, once its pipe closed, when the worker exited."""
        exits = [slot.closed + EXIT_WAIT - time.monotonic() for slot in busy if slot.closed is not None]
        ready = wait([_awaited(slot) for slot in busy], timeout=max(0.0, min([timeout, *exits])))
        return [slot for slot in busy if _awaited(slot) in ready]

    # --- workers --------------------------------------------------------------------------

    def _start(self, pin: dict | None = None) -> _Slot:
        if pin is None and self.pins:  # the next GPU in turn
            pin = self.pins[self.started % len(self.pins)]
        if self.context is None:
            self.context = start_context(self.start, self.preload)
        forked = self.context.get_start_method() == "forkserver"
        parent, child = self.context.Pipe()
        changes = {**hash_seed(), **self.environ, **(pin or {})}
        environ = {**os.environ, **changes} if forked else None  # a spawned interpreter starts with os.environ
        if self.stacks is None:
            self.stacks = stacks_directory(self.log)
        process = self.context.Process(target=_worker_main, args=(child, self.work, self.describe, self.config, self.threads, self.log, self.warm,
                                                                  environ, self.stacks), daemon=True)
        with temporary_environ(changes):
            process.start()
        child.close()
        self.started += 1
        return _Slot(process=process, conn=parent, pin=pin)

    def _replace(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            self._kill(slot)
        fresh = self._take_spare(slot.pin) or self._start(slot.pin)
        slot.process, slot.conn, slot.in_flight, slot.closed = fresh.process, fresh.conn, None, None
        while len(self.spare) < self._spares_wanted():  # started now, warm by the next replacement; where the last was needed
            self.spare.append(self._start(slot.pin))

    def _fresh(self) -> _Slot:
        """A worker started for the replays where one is alive, else a warm spare, on any GPU (a hang's replay beyond
        the workers starts at once), else a new worker."""
        return self._take_spare(None, any_pin=True, among=self.reserved) or self._take_spare(None, any_pin=True) or self._start()

    def _ahead(self) -> None:
        """On a shared accelerator, a worker started now for each hang set aside (at most one a worker) and kept for
        its replay, which begins as the last unit is handed out: a worker started then, or a spare, was not yet warm
        when a whole-catalog run ended crashing case after case (the spares taken as fast as they were made, a
        start there taking 14-20 s; bench/cuda-sweep.md), and the replays, the run's last minute, began that late."""
        if self.first < 1.0 and self.queue and len(self.reserved) < min(len(self.later), self.workers):
            self.reserved.append(self._start())

    def _spares_wanted(self) -> int:
        """``spares``; half the workers once no unit is left to hand out, when the units still running are the ones
        that crash case after case (their rest split among the workers: workers.dispatch) and each crash would wait for
        a start."""
        return self.spares if self.queue else max(self.spares, self.workers // 2)

    def _take_spare(self, pin: dict | None, any_pin: bool = False, among: list[_Slot] | None = None) -> _Slot | None:
        """A spare worker (of ``among``: the spares unless given) still alive with this pin (or any, with ``any_pin``;
        the oldest, the likeliest to be warm), or None."""
        spares = self.spare if among is None else among
        for spare in [s for s in spares if not s.process.is_alive()]:
            spares.remove(spare)
            spare.process.join(timeout=1)
            spare.conn.close()
        for spare in spares:
            if any_pin or spare.pin == pin:
                spares.remove(spare)
                return spare
        return None

    def _last_words(self, slot: _Slot) -> str:
        """Where the slot's worker died or hangs (workers.faults): asked first when it is still alive."""
        if self.stacks is None:
            return ""
        if slot.process.is_alive() and slot.closed is None:  # a worker that hangs answers; one that is exiting cannot
            faults.ask(slot.process.pid, self.stacks)
        return faults.place(slot.process.pid, self.stacks)

    def _kill(self, slot: _Slot) -> None:
        """End the slot's worker without waiting for it to exit: beside a GPU a process's exit tears down its device
        context, and the parent waited for that with every other worker waiting on it (the ten hang replays that end
        a whole-catalog run on an H200 started 0.26-1.2 s apart, each after such a wait; bench/cuda-sweep.md). The
        killed are reaped as they exit (``is_alive`` does it) and at ``close``."""
        if slot.process.is_alive():
            os.kill(slot.process.pid, signal.SIGKILL)
            if slot.process not in self.dying:
                self.dying.append(slot.process)
        slot.conn.close()
        self.dying = [process for process in self.dying if process.is_alive()]

    def _send_run(self, slot: _Slot, only: str | None = None) -> None:
        slot.conn.send(("run", slot.unit, slot.skip, only, slot.part))

    def _send_describe(self, slot: _Slot, case_id: str) -> None:
        slot.conn.send(("describe", slot.unit, case_id))

    def where(self) -> str:
        """Where the cases ran, for the run's notes."""
        gpus = f" over GPUs {', '.join(p['CUDA_VISIBLE_DEVICES'] for p in self.pins)}" if self.pins else ""
        server = ", forked from a fork server" + (" holding OpInfo's catalog" if server_holds_catalog() else "")
        started = {"forkserver": server, "spawn": ", spawned"}.get(self.context and self.context.get_start_method(), "")
        mps = ", outside the NVIDIA MPS server" if devices.MPS_PIPE in self.environ else ""
        remark = f" ({self.remark})" if self.remark else ""
        return f"local pool, {self.workers} worker{'s' if self.workers != 1 else ''}{gpus}{started}{mps}{remark}: {self.outcomes} cases on this machine"

    # --- events -----------------------------------------------------------------------------

    def _drain(self, slot: _Slot) -> None:
        if slot.closed is not None:
            return self._exited(slot)
        while True:
            try:
                if not slot.conn.poll():
                    return
                kind, payload = slot.conn.recv()
            except (EOFError, OSError):
                slot.closed = time.monotonic()
                return self._exited(slot)
            # "lost": the worker exits by itself; not waited for (it is killed as it is replaced and reaped as it
            # exits): beside a GPU the exit tears down a faulted device context, seconds in which the parent, the one
            # process handing out units and starting replays, waited 5 s a crash (bench/cuda-sweep.md, run R)
            if not self._event(slot, kind, payload):
                return

    def _exited(self, slot: _Slot) -> None:
        """A slot whose pipe closed: once its worker has exited (or ``EXIT_WAIT`` has passed), what it died of is known
        and the slot goes on (``_died``). Until then the parent serves the other slots: the worker's exit, beside a GPU
        the teardown of its device context, can take seconds, and the parent waited for it, up to 5 s, with every other
        worker's next unit waiting on it."""
        if slot.process.exitcode is not None or time.monotonic() - slot.closed >= EXIT_WAIT:
            self._died(slot, _describe_exit(slot.process.exitcode))

    def _check_time(self, slot: _Slot) -> None:
        if slot.closed is not None:  # its worker is gone: no case of it can run past its time
            return self._exited(slot)
        super()._check_time(slot)

    def close(self) -> None:
        self.slots, self.spare, self.reserved = self.slots + self.spare + self.reserved, [], []
        for slot in self.slots:
            try:
                if slot.process.is_alive():
                    slot.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 2
        for slot in self.slots:
            slot.process.join(timeout=max(0.0, deadline - time.monotonic()))
        for slot in self.slots:
            if slot.process.is_alive():
                slot.process.kill()
                self.dying.append(slot.process)
        # killed with SIGKILL (those that did not stop, all at once): they exit once the kernel has torn them down (a
        # GPU context with a hung kernel in it too), side by side, so they are waited for together, not one after another
        deadline = time.monotonic() + 5
        for process in self.dying:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        self.slots, self.dying = [], []
        if self.stacks is not None:
            shutil.rmtree(self.stacks, ignore_errors=True)
            self.stacks = None


def _awaited(slot: _Slot):
    """What the parent waits on for a slot: its worker's pipe, or, once that closed, the worker's exit."""
    return slot.conn if slot.closed is None else slot.process.sentinel


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code == UNAVAILABLE:
        return "the worker could not run a kernel on its device from its start (see the worker output)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker died of {name}"
    return f"the worker exited with status {code}"
