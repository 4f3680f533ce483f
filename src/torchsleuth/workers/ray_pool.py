"""Ray tasks as the worker pool: a sweep's units fanned out over a Ray cluster.

Design note. ``RayPool`` has ``workers.pool.Pool``'s interface and meaning; only
the transport differs. Each unit is one Ray task, a streaming generator that
yields the local pool's events (``begin``, ``outcome``, ``note``, ``done``,
``failed``, ``lost``) as they happen, after a first ``("where", node)``; at
most ``workers`` tasks are in flight. The driver holds the one store and reads
every task's stream at once (``ray.wait``). A task asks for one CPU per intra-op
thread and, on CUDA, one GPU.

What a worker's death or hang means is workers.dispatch's, shared with the local
pool. A task whose worker dies (a crashing kernel, a killed process, a lost
node: any ``RayError`` from its stream) has the case it was running replayed
alone in a new task; a case past its time limit has its task cancelled
(``ray.cancel(force=True)`` kills the worker) and is replayed the same way.
Ray's own retries are off (``max_retries=0``): a retry would rerun the unit
from its start, crashing case included, where the dispatcher resumes after it.

Two Ray settings carry the isolation. The stream has a backpressure of one
object: a task waits at each ``yield`` until the driver has taken the event,
so that ``begin`` is in the driver's hands before the case runs; without it a
worker that dies takes its unread events with it, and the driver would blame
the wrong case. And a task on an accelerator runs once per worker process
(``max_calls=1``, Ray's own default for GPU tasks): a CUDA error poisons the
process, and the next unit gets a fresh one. A sweep with ``--import``
modules runs its tasks in a runtime environment of its own (an environment
variable naming them): Ray keeps the worker processes of each environment
apart, so what those modules register (a kernel overridden with
``torch.library``) never reaches another sweep's tasks on the same cluster.

Ray is optional (``pip install 'torchsleuth[ray]'``): this module imports it
only inside functions, and ``connect`` turns its absence, or a cluster that
does not answer, into one ``UsageError``. What workers print stays in Ray's
logs on their node (``/tmp/ray/session_latest/logs``), off the terminal.
"""

from __future__ import annotations

import collections
import logging
import socket
from dataclasses import dataclass

from .. import devices
from ..errors import UsageError
from .dispatch import Dispatcher
from .records import Settings, Slot, Work
from .parts import Leaving
from .pool import unit_events
from .starts import hash_seed

# Seconds to wait for a --ray-address to accept a connection before saying it does not answer.
CONNECT_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """The Ray cluster a sweep runs on: where, and what it has."""

    where: str  # "a local instance" or "at HOST:PORT"
    nodes: int
    cpus: int
    gpus: int

    def capacity(self, device: str, threads: int = 1) -> int:
        """How many units it runs at once: a GPU each on CUDA, ``threads`` CPUs each elsewhere; UsageError if none."""
        cuda = devices.kind(device) == "cuda"
        units = self.gpus if cuda else self.cpus // max(1, threads)
        if units < 1:  # its tasks would wait for ever
            need = "a GPU" if cuda else f"the {max(1, threads)} CPU{_s(max(1, threads))}"
            raise UsageError(f"the Ray cluster ({self}) lacks {need} a unit on {device} asks for; start Ray on a node that has it "
                             "(`ray start --address=HEAD:6379`)")
        return units

    def __str__(self) -> str:
        gpus = f", {self.gpus} GPU{_s(self.gpus)}" if self.gpus else ""
        return f"Ray, {self.where} ({self.nodes} node{_s(self.nodes)}, {self.cpus} CPU{_s(self.cpus)}{gpus})"


def connect(address: str | None) -> Cluster:
    """Ray in this process: joined at ``address`` (``HOST:PORT`` or ``auto``), or a local instance started; what it has.

    A process that has called ``ray.init`` already keeps its Ray. Raises
    ``UsageError`` when Ray is not installed or nothing answers at ``address``.
    """
    ray = importable()
    if address is not None:
        _check_address(address)
    if not ray.is_initialized():
        try:
            ray.init(address=address or "local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     runtime_env={"env_vars": hash_seed()})  # its workers hash strings as the local pool's do
        except (ConnectionError, RuntimeError, ValueError) as e:
            if address == "auto":
                why = "this machine has joined no Ray cluster; start one with `ray start --head` (others join it with `ray start --address=HEAD:6379`)"
            else:  # the address answers as a GCS does (_check_address): most often the cluster wants its token
                why = (f"{_first_line(e)}; a cluster with token authentication needs RAY_AUTH_MODE=token here and its token "
                       "(`ray get-auth-token` on the head)")
            raise UsageError(f"--ray-address {address}: {why}; or leave out --ray-address to start a local Ray instance") from None
    resources = ray.cluster_resources()
    return Cluster(where=f"at {address}" if address else "a local instance", nodes=sum(1 for n in ray.nodes() if n.get("Alive")),
                   cpus=int(resources.get("CPU", 0)), gpus=int(resources.get("GPU", 0)))


def importable():
    """The ``ray`` module; UsageError saying how to install it where it is not."""
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray, which is not installed here: pip install 'torchsleuth[ray]' "
                         "(or leave out --executor to run on the local pool)") from None
    return ray


def _check_address(address: str) -> None:
    """``HOST:PORT`` where a gRPC server (a Ray head's GCS) answers, or ``auto``; Ray Client's ``ray://`` is not supported.

    Checked here because ``ray.init`` retries an address that does not answer as a GCS for many minutes.
    """
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    if address.startswith("ray://") or not host or not port.isdigit():
        raise UsageError(f"--ray-address {address!r}: expected HOST:PORT, the head node's address (port 6379 unless "
                         "`ray start --head --port` said otherwise), or auto (the cluster this machine has joined)")
    try:
        grpc = _speaks_http2(host.strip("[]"), int(port))
    except OSError as e:
        raise UsageError(f"--ray-address {address}: nothing answers there ({e.strerror or e}); start the head node with "
                         "`ray start --head`, or leave out --ray-address to start a local Ray instance") from None
    if not grpc:
        raise UsageError(f"--ray-address {address}: something answers there, but not as a Ray head node does (no gRPC); "
                         "give the head's GCS port (6379 unless `ray start --head --port` said otherwise)")


def _speaks_http2(host: str, port: int) -> bool:
    """Whether the server at host:port answers HTTP/2's connection preface with its settings, as every gRPC server does."""
    with socket.create_connection((host, port), timeout=CONNECT_SECONDS) as connection:
        connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # the preface, empty SETTINGS
        head = b""
        try:
            while len(head) < 9:
                chunk = connection.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            return False
    return len(head) == 9 and head[3] == 4  # a frame header of type SETTINGS


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _s(count: int) -> str:
    return "" if count == 1 else "s"


# --- in the Ray worker -------------------------------------------------------------------------


def _unit_events(shared: tuple, unit, skip: frozenset, only: str | None, part: tuple[int, int] | None = None):
    """The Ray task of a unit: where it runs, then the local pool's events (workers.pool.unit_events)."""
    import ray
    import torch

    work, _, config, threads = shared
    torch.set_num_threads(max(1, threads))
    yield "where", f"{ray.util.get_node_ip_address()} (node {ray.get_runtime_context().get_node_id()[:8]})"
    # after "lost" the task ends, and its worker process with it (max_calls=1 on an accelerator)
    yield from unit_events(work, unit, config, Leaving(skip, part), only)


def _description(shared: tuple, unit, case_id: str):
    """The Ray task that describes a case that killed its workers (None if describing it fails too)."""
    _, describe, config, _ = shared
    try:
        return describe(unit, config, case_id)
    except Exception:
        return None


# --- on the driver -----------------------------------------------------------------------------


@dataclass(kw_only=True)
class _RaySlot(Slot):
    task: object = None  # the unit's ObjectRefGenerator, or a description's ObjectRef
    node: str = ""  # where the unit's task runs (its "where" event)


class RayPool(Dispatcher):
    """``workers.pool.Pool`` over Ray tasks (see the design note); ``address`` as for ``connect``. ``log`` is Ray's own."""

    def __init__(self, work: Work, settings: Settings, *, address: str | None = None):
        """``settings``: its workers, timeout and threads; ``work``'s kin and the settings' shares and start are the
        local pool's: each case of a Ray task may take the whole timeout."""
        import ray

        self.cluster = connect(address)
        self.workers, self.timeout, self.threads = max(1, settings.workers), settings.timeout, settings.threads
        self.slower, self.share, self.deadline = work.slower, work.share, settings.deadline
        threads, config = settings.threads, work.config
        device = devices.kind(str(getattr(config, "device", "cpu")))
        self.cluster.capacity(device, threads)  # a cluster that has nothing to run a unit on is an error, not a wait
        self.resources = {"num_cpus": max(1, threads), **({"num_gpus": 1} if device == "cuda" else {})}
        imports = tuple(getattr(config, "imports", ()) or ())
        if imports:  # what a --import registers stays in its process: Ray keeps the workers of each environment apart
            self.resources["runtime_env"] = {"env_vars": {"TORCHSLEUTH_IMPORTS": ",".join(imports)}}
        once = {"max_calls": 1} if device != "cpu" else {}
        self.unit_task = ray.remote(num_returns="streaming", max_retries=0, _generator_backpressure_num_objects=1, **once)(_unit_events)
        self.describe_task = ray.remote(max_retries=0, **once)(_description)
        self.shared = ray.put((work.run, work.describe, config, threads))
        self.slots: list[_RaySlot] = []
        self.cases: collections.Counter[str] = collections.Counter()  # node -> cases whose outcome it sent

    def _start(self) -> _RaySlot:
        return _RaySlot()  # its task starts with its first unit

    def _ready(self, busy: list[_RaySlot], timeout: float) -> list[_RaySlot]:
        import ray

        tasks = [slot.task for slot in busy]
        ray.wait(tasks, num_returns=1, timeout=timeout)
        ready, _ = ray.wait(tasks, num_returns=len(tasks), timeout=0)  # every one ready now, not only the first
        return [slot for slot in busy if any(slot.task is task for task in ready)]

    def where(self) -> str:
        """Where the cases ran, for the run's notes: the cluster, and how many cases each node did."""
        done = ", ".join(f"{count} case{_s(count)} on {node}" for node, count in sorted(self.cases.items()))
        return f"{self.cluster}: {done or 'no cases'}"

    def close(self) -> None:
        """End the tasks still in flight; Ray itself stays up for this process (``ray.shutdown()`` ends it)."""
        for slot in self.slots:
            if slot.unit is not None:
                self._kill(slot)
        self.slots = []

    # --- the dispatcher's transport ------------------------------------------------------------

    def _send_run(self, slot: _RaySlot, only: str | None = None) -> None:
        slot.task = self.unit_task.options(**self.resources).remote(self.shared, slot.unit, frozenset(slot.skip), only, slot.part)

    def _send_describe(self, slot: _RaySlot, case_id: str) -> None:
        slot.task = self.describe_task.options(**self.resources).remote(self.shared, slot.unit, case_id)

    def _replace(self, slot: _RaySlot) -> None:
        # the old task has died or been cancelled already (or ends by itself, after "lost"); the next is sent anew
        slot.task, slot.node, slot.in_flight = None, "", None

    def _kill(self, slot: _RaySlot) -> None:
        import ray

        if slot.task is not None:
            try:
                ray.cancel(slot.task, force=True)
            except Exception:  # finished already, or its worker is gone
                pass

    def _drain(self, slot: _RaySlot) -> None:
        import ray

        if slot.describing is not None:  # a description's answer
            try:
                call = ray.get(slot.task)
            except ray.exceptions.RayError:
                call = None
            slot.task = None
            return self._described(slot, call)
        while ray.wait([slot.task], timeout=0)[0]:
            try:
                kind, payload = ray.get(next(slot.task))
            except StopIteration:
                return self._died(slot, f"its Ray task on {slot.node or 'a node'} ended before its unit did")
            except ray.exceptions.RayError as e:
                return self._died(slot, _how(e, slot.node))
            if kind == "where":
                slot.node = payload
                continue
            if kind == "outcome":
                self.cases[slot.node] += 1
            if not self._event(slot, kind, payload):
                return


def _how(error: Exception, node: str) -> str:
    """A task's death in words, as ``on_failed`` reports it."""
    import ray

    where = f" on {node}" if node else ""
    if isinstance(error, ray.exceptions.WorkerCrashedError):
        return f"the Ray worker{where} died"
    if isinstance(error, ray.exceptions.NodeDiedError):
        return f"the Ray node{where} went away"
    return f"the Ray task{where} failed: {type(error).__name__}: {_first_line(error)}"
