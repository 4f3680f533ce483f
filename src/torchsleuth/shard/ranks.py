"""Real gloo ranks kept for many cases: N spawned CPU processes in one process group, and what they saw merged.

Design note. A case judged on real process groups needs every rank of its
mesh to run it, in step: the same inputs, the same collectives in the same
order. ``Ranks(n)`` spawns ``n`` processes (start method spawn) that join
one gloo group through a file store in a fresh temporary folder, each
loading the user's ``--import`` modules first (ranks are other processes:
a rule registered in the parent is not theirs). The parent then sends every
rank the same case id (with a ``blame`` flag); each runs it with run.py in
a ``world.Real`` and sends back its ``Ran`` as ``torch.save`` bytes (never
shared-memory tensors). One group serves every mesh of its size (``4`` and
``2x2`` alike) for as long as it is healthy, so a case costs its own
collectives, not a process start (seconds).

A group stops being trusted when a case leaves it out of step: no answer
within the case's time limit (a ``hang``: all its processes are killed), a
rank that died (gloo aborts a rank on mismatched collective sizes), or
ranks that disagree on the status (one returned early while another waits
in a collective, which the group's collective timeout, passed to
``init_process_group`` and to the sub-groups of 2-D meshes, turns into an
error rather than a 30-minute wait), or on its reason after a case as long
as that timeout.
The group is then killed and started afresh on the next case. A group that
cannot start at all says why in every case sent to it, without retrying.

Teardown: every rank waits at a barrier, destroys the group and leaves with
``os._exit(0)``: gloo's C++ teardown at interpreter exit aborts a rank about
one launch in ten (torchrun.leave).

``merge`` turns the ranks' ``Ran`` of one case into the one the judge reads
(rank 0's expected values, claims and trace, each rank's value of every
result); the torchrun mode merges what it gathers with it too. ``Groups``
keeps one ``Ranks`` per mesh size, started on first use.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import signal
import tempfile
import time
from datetime import timedelta
from multiprocessing import get_context
from multiprocessing.connection import wait

import torch

from ..cases.records import Case
from ..run.imports import load_imports
from . import cases as shard_cases, run as running
from .run import Ran, line
from .support import quiet_dtensor
from .world import Real

CASE_SECONDS = 300.0  # a case (all its ranks) that takes longer is a hang
COLLECTIVE_SECONDS = 30.0  # a collective some rank never joins raises after this
START_SECONDS = 300.0  # joining the group, imports made


class Ranks:
    """``size`` spawned processes in one gloo group, each running every case it is sent, in order."""

    def __init__(self, size: int, *, imports: tuple[str, ...] = (), threads: int = 1, case_seconds: float = CASE_SECONDS,
                 collective_seconds: float = COLLECTIVE_SECONDS):
        self.size, self.imports, self.threads = size, tuple(imports), threads
        self.case_seconds, self.collective_seconds = case_seconds, collective_seconds
        self.processes: list = []
        self.conns: list = []
        self.folder = ""
        self.broken = ""  # why the group cannot start: said for every case after
        self.starts = 0  # groups started (the first, and one after each case that broke one)
        self.order: list[int] = []  # the ranks in the order they answered the last case

    def start(self) -> None:
        """Start the group now, if it is not running (else the first case starts it, its time counted in the case's)."""
        if not self.processes and not self.broken:
            self._start()

    def run(self, case: Case, *, blame: bool = False) -> list[Ran]:
        """Every rank's ``Ran`` of ``case``, in rank order; a case that broke the group restarts it (see the design note)."""
        self.start()
        if self.broken:
            return [Ran(status="error", reason=self.broken)] * self.size
        sent = time.monotonic()
        try:
            for conn in self.conns:
                conn.send((case.id, blame))
        except OSError:  # a rank gone between cases (killed from outside): _answers names it
            pass
        answers = self._answers()
        # out of step: the next case gets a fresh group. Ranks that share a status but not its reason (each its own
        # local shape in the error) are out of step only if one may have sat in a collective until it timed out.
        waited = time.monotonic() - sent >= self.collective_seconds
        if (len({a.status for a in answers}) > 1 or any(a.status in ("hang", "crash") for a in answers)
                or (waited and len({a.reason for a in answers}) > 1)):
            self.close(kill=True)
        return answers

    def _answers(self) -> list[Ran]:
        deadline = time.monotonic() + self.case_seconds
        found: list[Ran | None] = [None] * self.size
        pending = set(range(self.size))
        self.order = []
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                late = ", ".join(map(str, sorted(pending)))
                reason = f"no answer from rank{'s' if len(pending) > 1 else ''} {late} of {self.size} gloo ranks after {self.case_seconds:g} s"
                return [a or Ran(status="hang", reason=reason) for a in found]
            watched = [self.conns[r] for r in pending] + [self.processes[r].sentinel for r in pending]
            ready = wait(watched, timeout=left)
            for rank in sorted(pending):
                conn, process = self.conns[rank], self.processes[rank]
                if conn in ready or conn.poll():
                    try:
                        found[rank] = _loads(conn.recv_bytes())
                        pending.discard(rank)
                        self.order.append(rank)
                        continue
                    except (EOFError, OSError):
                        pass
                if process.sentinel in ready or not process.is_alive():
                    process.join(timeout=1)
                    reason = f"rank {rank} of {self.size} gloo ranks died running the case ({_exit_words(process.exitcode)})"
                    return [a or Ran(status="crash", reason=reason) for a in found]
        return [a for a in found if a is not None]

    def _start(self) -> None:
        context = get_context("spawn")
        self.folder = tempfile.mkdtemp(prefix="torchsleuth-ranks-")
        self.starts += 1
        for rank in range(self.size):
            parent, child = context.Pipe()
            process = context.Process(target=_rank_main, daemon=True,
                                      args=(rank, self.size, self.folder, self.imports, self.threads, self.collective_seconds, child))
            process.start()
            child.close()
            self.processes.append(process)
            self.conns.append(parent)
        deadline = time.monotonic() + START_SECONDS
        for rank, conn in enumerate(self.conns):
            why = ""
            if not conn.poll(max(deadline - time.monotonic(), 0)):
                why = f"no rank ready after {START_SECONDS:g} s"
            else:
                try:
                    kind, detail = conn.recv()
                    why = "" if kind == "ready" else detail
                except (EOFError, OSError):
                    why = f"rank {rank} died starting ({_exit_words(self.processes[rank].exitcode)})"
            if why:
                self.close(kill=True)
                self.broken = f"{self.size} gloo ranks could not start: {why}"
                return

    def close(self, *, kill: bool = False) -> None:
        """End the group: politely (barrier, destroy, exit) unless ``kill``; its processes are gone after."""
        if not kill:
            for conn in self.conns:
                try:
                    conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
            deadline = time.monotonic() + self.collective_seconds + 5
            for process in self.processes:
                process.join(timeout=max(deadline - time.monotonic(), 0.1))
        for process in self.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = ""


class Groups:
    """One ``Ranks`` per mesh size, started on first use; ``close()`` (or leaving the ``with``) ends them all."""

    def __init__(self, *, imports: tuple[str, ...] = (), threads: int = 1, case_seconds: float = CASE_SECONDS,
                 collective_seconds: float = COLLECTIVE_SECONDS):
        self.options = dict(imports=imports, threads=threads, case_seconds=case_seconds, collective_seconds=collective_seconds)
        self.groups: dict[int, Ranks] = {}

    def ranks(self, size: int) -> Ranks:
        if size not in self.groups:
            self.groups[size] = Ranks(size, **self.options)
        return self.groups[size]

    def run(self, case: Case, *, blame: bool = False) -> Ran:
        """``case`` run on the ranks of its mesh, merged."""
        ranks = self.ranks(shard_cases.mesh_of(case).ranks)
        return merge(ranks.run(case, blame=blame), order=ranks.order)

    def close(self, size: int | None = None) -> None:
        for n in [size] if size is not None else list(self.groups):
            if n in self.groups:
                self.groups.pop(n).close()

    def __enter__(self) -> Groups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def merge(rans: list[Ran], *, order: list[int] | tuple = ()) -> Ran:
    """The ``Ran`` the judge reads from every rank's: rank 0's, with ``actual[path]`` each rank's value.

    A group that failed (a hang, a dead rank) gives its status; a rank whose
    argument did not round-trip makes the case a round-trip failure on that
    rank; else, when ranks disagree (on the status, or, with ``order``, on
    the reason of one they share), the case gets the status of the rank
    that left the others (``raised`` unless it skipped), naming it: of the
    ranks that did not run it, the first to answer when ``order`` (the ranks
    in the order they answered) is known, since the others were left waiting
    in a collective; else the first by rank.
    """
    first = rans[0]
    for failed in ("hang", "crash"):
        gone = next((r for r in rans if r.status == failed), None)
        if gone is not None:
            return Ran(status="hang" if failed == "hang" else "raised", reason=gone.reason, facts=first.facts)
    same = all(r.status == first.status for r in rans)
    if same and first.status == "ran":
        actual = {p: [r.actual[p][0] if p in r.actual else None for r in rans] for p in first.actual}
        return dataclasses.replace(first, actual=actual)
    if same and (not order or all(r.reason == first.reason for r in rans)):
        return first
    for rank, r in enumerate(rans):
        if r.status == "roundtrip":
            path, placement, wrong = r.roundtrip
            wrong = dataclasses.replace(wrong, path=f"{wrong.path}@rank{rank}")
            return dataclasses.replace(r, roundtrip=(path, placement, wrong), reason=f"rank {rank}: {r.reason}")
    rank = next(i for i in (order or range(len(rans))) if rans[i].status != "ran")
    odd = rans[rank]
    status = odd.status if odd.status in ("skip", "unsupported", "raised", "error") else "raised"
    others = ", ".join(f"rank {i} {r.status}" for i, r in enumerate(rans) if i != rank and (r.status, r.reason) != (odd.status, odd.reason))
    reason = f"rank {rank} {odd.status}: {odd.reason}" if odd.reason else f"rank {rank}: {odd.status}"
    return Ran(status=status, reason=f"{reason} ({others})" if others else reason, facts=first.facts)


def _rank_main(rank: int, size: int, folder: str, imports: tuple[str, ...], threads: int, collective_seconds: float, conn) -> None:
    """One spawned rank: join the group, then run each case the parent sends until it sends None."""
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        torch.set_num_threads(threads)
        quiet_dtensor()
        load_imports(imports)
        timeout = timedelta(seconds=collective_seconds)
        # the sub-groups a 2-D DeviceMesh makes take new_group's default timeout (30 min), not the world's
        dist.distributed_c10d.default_pg_timeout = timeout
        dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=size, timeout=timeout)
    except BaseException as e:
        conn.send(("failed", f"rank {rank}: {line(e)}"))
        conn.close()
        os._exit(1)
    conn.send(("ready", ""))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            os._exit(1)
        if message is None:
            break
        case_id, blame = message
        try:
            case = Case.parse(case_id)
            ran = running.run(case, Real(shard_cases.mesh_of(case), case.device), blame=blame)
        except Exception as e:  # torchsleuth's own failure on this case: shown apart, as the sweep shows it
            ran = Ran(status="error", reason=line(e))
        conn.send_bytes(_dumps(ran))
    try:
        dist.barrier()  # no rank tears the group down while another still uses it
        dist.destroy_process_group()
    finally:
        conn.close()
        os._exit(0)


def _dumps(ran: Ran) -> bytes:
    buffer = io.BytesIO()
    torch.save(ran, buffer)
    return buffer.getvalue()


def _loads(data: bytes) -> Ran:
    return torch.load(io.BytesIO(data), weights_only=False)


def _exit_words(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
