"""How the pool's workers start: forked from a fork server, or spawned (workers.pool).

Design note. A spawned worker is a fresh interpreter: it imports torch and
torchsleuth and loads OpInfo's catalog again (3 s on a CPU, 10-15 s beside a
GPU; bench/worker-start.md), and a sweep starts one for every crash, every
hang and every replay alone. On Linux, for a sweep on the CPU or a CUDA GPU
(``default_start``), workers are forked from a fork server instead: one
interpreter that imports torch, torchsleuth and the modules in ``preload``
and loads the catalog once (workers.preload, beside a GPU too), and forks each
worker from itself.

The pool asks the server, through one forked child, whether it is safe to
fork from (no CUDA initialized, no thread of its own) and whether it holds the
catalog (``start_context``). Where loading the catalog left it unsafe (beside
a GPU, a module doing at import what no stand-in catches), the pool stops it
and starts one that leaves the catalog to each worker; where the server is
unsafe all the same, the pool spawns its workers.

The server's preload takes as long as a worker's start (about 13 s beside an
H200: torch 4-5 s, the catalog 6-8.5 s), and the first worker waits for it. A sweep has its own start to make at the same time (it
imports the same modules and loads the catalog to plan its units: 10-12 s
beside an H200), so it starts the server first (``begin``): the server loads
while the sweep plans, and the pool's first question finds it ready or
nearly so. There is one server per process: the first ``preload`` given is the
one it loads, and its answer holds for every pool after.

Every worker hashes strings alike (``hash_seed``: the parent's
``PYTHONHASHSEED``, or 0): OpInfo's sample functions iterate over sets of
strings, so a case's sample index named one sample in one worker and another
in the next. The server is started with that seed, and a spawned worker too.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import sys
from multiprocessing.connection import Connection

from .. import devices
from ..errors import UsageError

# Overrides how workers start (``forkserver`` or ``spawn``), whatever the device.
START = "TORCHSLEUTH_WORKER_START"
STARTS = ("forkserver", "spawn")
# The devices whose sweeps fork their workers by default (measured: bench/worker-start.md).
FORKED_BESIDE = ("cpu", "cuda")
# Set to "0" in the environment of a fork server that leaves the catalog to its workers (workers.preload reads it): one
# started after a server that loaded it was left unsafe to fork from.
LEAVE_CATALOG = "TORCHSLEUTH_SERVER_CATALOG"
# How long the pool waits for the fork server's first answer (it imports torch and loads the catalog first).
PRELOAD_SECONDS = 180.0

_fork_safe: bool | None = None  # the fork server's answer, asked once per process (there is one server)
_server_catalog = False  # whether that server holds OpInfo's catalog (workers.preload.CATALOG): its workers start without loading it


def default_start(device: str = "cpu") -> str:
    """How workers start: ``$TORCHSLEUTH_WORKER_START`` where set; otherwise ``forkserver`` on Linux for a sweep on
    the CPU or a CUDA GPU, ``spawn`` elsewhere (macOS's frameworks do not survive a fork) and beside other
    accelerators, where forked workers were never measured (bench/worker-start.md)."""
    chosen = os.environ.get(START, "").strip()
    if chosen and chosen not in STARTS:
        raise UsageError(f"{START}={chosen!r} is not a start method; allowed: {', '.join(STARTS)}")
    if chosen:
        return chosen
    return "forkserver" if sys.platform == "linux" and devices.kind(device) in FORKED_BESIDE else "spawn"


def hash_seed() -> dict[str, str]:
    """The environment that makes a worker hash strings as every other worker does (see the design note)."""
    return {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED") or "0"}


class temporary_environ:
    """``os.environ`` with ``changes`` while the block runs: what a process started in it (a spawned worker, the fork
    server) starts with; as it was afterwards."""

    def __init__(self, changes: dict[str, str]):
        self.changes, self.saved = changes, {name: os.environ.get(name) for name in changes}

    def __enter__(self):
        os.environ.update(self.changes)

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def begin(start: str, preload: tuple[str, ...] = ()) -> None:
    """Start the fork server now, preloading ``preload`` then workers.preload, and return at once (it loads while the
    caller goes on); nothing where ``start`` is not ``forkserver``, off Linux, or where this process has one."""
    if start != "forkserver" or sys.platform != "linux" or _fork_safe is not None:
        return
    context = multiprocessing.get_context("forkserver")
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is None:  # set once a server is running
        context.set_forkserver_preload([*preload, f"{__package__}.preload"])  # preload last: it judges the others
    with temporary_environ(hash_seed()):  # the server starts now, and its workers hash as it does
        multiprocessing.forkserver.ensure_running()


def _fork_safe_child(conn: Connection) -> None:
    """The forked child's answer: workers.preload's, from the module its server holds (importing it anywhere else would make
    the load it makes); no server that preloaded it is no server to fork from."""
    preload = sys.modules.get(f"{__package__}.preload")
    conn.send((preload.FORK_SAFE, preload.CATALOG) if preload is not None else (False, False))
    conn.close()


def _ask(context) -> tuple[bool, bool]:
    """The fork server's answer, through one child forked from it: (safe to fork from, holds the catalog)."""
    parent, child = context.Pipe(duplex=False)
    probe = context.Process(target=_fork_safe_child, args=(child,), daemon=True)
    probe.start()  # returns once the server has preloaded and forked it
    child.close()
    answer = parent.recv() if parent.poll(PRELOAD_SECONDS) else (False, False)
    probe.join(timeout=5)
    return answer


def _restarted_without_catalog() -> bool:
    """Stop the fork server and start another that leaves the catalog to its workers (workers.preload.LEAVE_CATALOG);
    False where this Python's server cannot be stopped."""
    server = multiprocessing.forkserver._forkserver
    if not hasattr(server, "_stop"):
        return False
    server._stop()
    with temporary_environ({**hash_seed(), LEAVE_CATALOG: "0"}):  # the server's own environment, not its workers'
        multiprocessing.forkserver.ensure_running()
    return True


def start_context(start: str, preload: tuple[str, ...] = ()):
    """The multiprocessing context workers start from: ``forkserver`` (the server ``begin`` started, or started now)
    where asked for, the platform has it and its server proved safe to fork from; ``spawn`` otherwise. A server that
    loading the catalog left unsafe is replaced by one that leaves it to the workers (workers.preload's design note)."""
    global _fork_safe, _server_catalog
    if start == "forkserver" and sys.platform == "linux":
        context = multiprocessing.get_context("forkserver")
        if _fork_safe is None:
            try:
                begin(start, preload)
                _fork_safe, _server_catalog = _ask(context)
                if not _fork_safe and _server_catalog and _restarted_without_catalog():
                    _fork_safe, _server_catalog = _ask(context)
            except (OSError, EOFError):  # the server failed to start
                _fork_safe = False
        if _fork_safe:
            return context
    return multiprocessing.get_context("spawn")


def server_holds_catalog() -> bool:
    """Whether the fork server this process's workers are forked from holds OpInfo's catalog (said in the pool's note)."""
    return bool(_fork_safe and _server_catalog)
