"""Peer processes for the ``capability`` oracle: one per CPU capability, long-lived.

Design note. ATen chooses its CPU kernels (``DispatchStub``) once per
process, from ``ATEN_CPU_CAPABILITY`` read at the first dispatch, so each
capability needs a process of its own. A process per case would pay a torch
import and the OpInfo catalog (about 4 s here) for every case; instead the
worker that first needs a capability starts one peer for it and keeps it for
the worker's life:

* ``python -m torchsleuth.oracles.capability.peers`` with ``ATEN_CPU_CAPABILITY`` set, then a
  setup message: the worker's intra-op thread count (a reduction split over
  another number of threads sums in another order, which is no capability's
  doing) and the modules the worker's ``--import`` loaded (the user's kernels
  must be registered in the peer too). The peer answers with the capability
  it really runs under, which must be the one asked for.
* Messages are length-prefixed pickles over the peer's stdin and stdout. The
  peer moves its fd 1 onto fd 2 first, so what a kernel prints goes to the
  worker's log and never into the channel.
* A request is a case id and the call's tensors exactly as the worker laid
  them out (whole storages, guards included), so both sides see the same
  bytes: the peer regenerates nothing but the call's structure (the function,
  the non-tensor arguments), since random fills are capability-dispatched
  themselves and could make different samples. The answer is the result's
  leaves (``torch.save`` bytes) or what the call raised.
* A peer that dies during a request is restarted and the request made once
  more; a second death is reported as the case's (``PeerDied``). One that
  does not answer within ``PEER_TIMEOUT`` seconds is killed and restarted
  (``PeerHung``). Peers die with their worker (``PR_SET_PDEATHSIG`` on Linux;
  elsewhere at EOF on stdin, once idle).

``make_call`` is the one way both sides build a case's call, so a difference
between them is the capability's alone.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Any

import torch

from ...cases import opinfo
from ...cases.records import Case
from ...judge.calls import functional_of, make_call
from ...run import call, tree
from ...search import edits

# Seconds a peer may take to start (torch and the OpInfo catalog) and to answer one call.
START_TIMEOUT = 120.0
PEER_TIMEOUT = 45.0
_HEADER = struct.Struct("<Q")


class PeerDied(Exception):
    """The peer process died during a request (twice: once retried)."""


class PeerHung(Exception):
    """The peer did not answer in time."""


class PeerFailed(Exception):
    """The peer could not be set up (an --import failed, or the capability is not the one asked)."""


# --- the call, the same on both sides ------------------------------------------------------


def pack(tensors: tree.Tensors) -> bytes:
    """The tensors as bytes: each whole storage with its view (shape, stride, offset)."""
    found = {}
    for path, t in tensors.items():
        storage = call.storage_of(t.detach()).clone()
        found[path] = (storage, tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.requires_grad)
    buffer = io.BytesIO()
    torch.save(found, buffer)
    return buffer.getvalue()


def unpack(data: bytes) -> tree.Tensors:
    packed = torch.load(io.BytesIO(data), weights_only=False)
    return {path: storage.as_strided(shape, stride, offset).requires_grad_(grad)
            for path, (storage, shape, stride, offset, grad) in packed.items()}


def leaves_of(result: Any) -> list[tuple[str, Any]]:
    """The result's leaves, paths as the judge names them (``out[1]``, ``grad[input]``), detached."""
    from ...judge.compare import flatten

    return [(path, _plain(value) if isinstance(value, torch.Tensor) else value) for path, value in flatten(result)]


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached; autograd's efficient zero tensor (``sgn``'s gradient) as real zeros, which serialize."""
    t = t.detach()
    if getattr(t, "_is_zerotensor", lambda: False)():
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return t


def result_bytes(result: Any) -> bytes:
    leaves = leaves_of(result)
    buffer = io.BytesIO()
    torch.save(leaves, buffer)
    return buffer.getvalue()


def result_of(data: bytes) -> list:
    return torch.load(io.BytesIO(data), weights_only=False)


def capability_name(reported: str) -> str:
    """``torch.backends.cpu.get_cpu_capability()``'s answer as ATEN_CPU_CAPABILITY spells it."""
    return {"NO AVX": "default", "Z VECTOR": "zvector"}.get(reported, reported.lower())


def current() -> str:
    """The capability this process's kernels run under."""
    return capability_name(torch.backends.cpu.get_cpu_capability())


# --- framing --------------------------------------------------------------------------------


def _send(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None  # EOF: the other side is gone
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, deadline: float | None = None):
    header = _read_exactly(fd, _HEADER.size, deadline)
    if header is None:
        raise EOFError
    data = _read_exactly(fd, _HEADER.unpack(header)[0], deadline)
    if data is None:
        raise EOFError
    return pickle.loads(data)


# --- the worker's side ------------------------------------------------------------------------


class Peer:
    """One peer process under one capability (started on first use, restarted after a death)."""

    def __init__(self, capability: str, imports: tuple[str, ...], threads: int):
        self.capability, self.imports, self.threads = capability, imports, threads
        self.process: subprocess.Popen | None = None
        self.ready = False

    def start(self) -> None:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=self.capability)
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, bufsize=0)
        _send(self.process.stdin, {"imports": self.imports, "threads": self.threads, "cwd": os.getcwd()})
        self.ready = False

    def _handshake(self) -> None:
        try:
            kind, detail = _receive(self.process.stdout.fileno(), time.monotonic() + START_TIMEOUT)
        except (EOFError, TimeoutError):
            self.stop()
            raise PeerFailed(f"the {self.capability} peer did not start ({self._exit()})") from None
        if kind != "ready":
            self.stop()
            raise PeerFailed(f"the {self.capability} peer could not be set up: {detail}")
        if detail != self.capability:
            self.stop()
            raise PeerFailed(f"ATEN_CPU_CAPABILITY={self.capability} gave a process running {detail}")
        self.ready = True

    def request(self, case_id: str, tensors: bytes, timeout: float = PEER_TIMEOUT):
        """``("ok", result bytes)``, ``("raised", text)`` or ``("error", text)``; PeerDied or PeerHung otherwise."""
        for attempt in (1, 2):
            if self.process is None or self.process.poll() is not None:
                self.start()
            if not self.ready:
                self._handshake()
            try:
                _send(self.process.stdin, ("call", case_id, tensors))
                return _receive(self.process.stdout.fileno(), time.monotonic() + timeout)
            except TimeoutError:
                self.stop()
                raise PeerHung(f"no answer under {self.capability} after {timeout:g} s") from None
            except (EOFError, BrokenPipeError, OSError):
                how = self._exit()
                self.stop()
                if attempt == 2:
                    raise PeerDied(f"the {self.capability} process {how}, twice") from None
        raise AssertionError("unreachable")

    def _exit(self) -> str:
        if self.process is None:
            return "was not started"
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            try:
                return f"died of {signal.Signals(-code).name}"
            except ValueError:
                return f"died of signal {-code}"
        return f"exited with status {code}"

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.process, self.ready = None, False


_PEERS: dict[str, Peer] = {}


def peers(capabilities: tuple[str, ...], imports: tuple[str, ...]) -> dict[str, Peer]:
    """The running peers for ``capabilities``, started together on first use (their imports overlap)."""
    threads = torch.get_num_threads()
    for capability in capabilities:
        peer = _PEERS.get(capability)
        if peer is not None and (peer.imports != imports or peer.threads != threads):
            peer.stop()
            peer = None
        if peer is None:
            _PEERS[capability] = peer = Peer(capability, imports, threads)
        if peer.process is None:
            peer.start()
    return {c: _PEERS[c] for c in capabilities}


def stop_all() -> None:
    for peer in _PEERS.values():
        peer.stop()
    _PEERS.clear()


atexit.register(stop_all)  # a worker that ends normally takes its peers with it


# --- the peer's side ------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the worker that started it dies (a hung kernel reads no EOF)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _answer(case_id: str, data: bytes):
    import warnings

    case = Case.parse(case_id)
    entry = opinfo.get(case.op)
    functions = opinfo.functions(entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sample = edits.sample_of(case)
        tensors = unpack(data)
        try:
            functional = None
            if case.variant == "backward":
                functional = call.compute(make_call(functional_of(case), functions["functional"], sample))
            prepared = make_call(case, functions[case.variant], sample, functional)
            result = call.compute(prepared, tensors)
        except Exception as e:
            text = str(e).strip().splitlines()
            return "raised", f"{type(e).__name__}: {text[0][:200] if text else ''}"
        return "ok", result_bytes(result)


def main() -> None:
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:
        return
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever kernels print goes to the worker's log, not into the channel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's parent handles Ctrl-C
    try:
        setup = _receive(0)
    except EOFError:
        return
    try:
        os.chdir(setup["cwd"])
        torch.set_num_threads(setup["threads"])
        from ...run.imports import load_imports

        load_imports(tuple(setup["imports"]))
        opinfo.catalog()
    except Exception as e:
        _send(channel, ("failed", f"{type(e).__name__}: {e}"))
        return
    _send(channel, ("ready", current()))
    while True:
        try:
            verb, case_id, data = _receive(0)
        except EOFError:
            return
        try:
            answer = _answer(case_id, data)
        except Exception as e:  # torchsleuth itself failed here, not the op
            answer = ("error", f"torchsleuth failed in the {current()} peer: {type(e).__name__}: {e}")
        _send(channel, answer)


if __name__ == "__main__":
    main()
