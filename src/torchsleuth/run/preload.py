"""What the pool's fork server loads once, so that every worker forked from it starts warm (run.pool).

Design note. A worker started by ``spawn`` is a fresh interpreter: it imports
torch and torchsleuth and loads OpInfo's catalog again, 3 s on a CPU and
10-15 s beside a GPU (bench/sweep-profile.md), and a GPU sweep starts one for
every crash, every hang and every replay alone. A fork server (Python's
``forkserver`` start method) is one such interpreter that does this once and
forks each worker from itself: the worker inherits the loaded modules and
the catalog (where it could be loaded, below) and pays only for its
device's context.

Forking is safe only from a process that holds no threads and no device
context. This module is imported in the server and does nothing else: torch
with one intra-op thread (no thread pool is ever made), torchsleuth, and,
where no GPU is present, the catalog. Where one is, OpInfo's modules ask the
device at import (its compute capability decides dtypes, ``SM53OrLater``, and
``has_triton`` makes a context), which would leave the server unsafe to fork
from, so each worker loads the catalog itself (6 s of its 10-15 s) and the
fork saves the imports only. ``torch.cuda.is_available`` is asked through NVML,
which makes no context. ``FORK_SAFE`` says whether that held once every module
the server preloads is imported (this one comes last): no CUDA context made
by torch, the CUDA driver not initialized (torch's libraries may load it at
import, which a fork survives; ``cuInit`` it does not), no thread besides the
server's own. The pool asks one forked child for it before its first worker
(run.pool.start_context) and spawns when it is false.
"""

from __future__ import annotations

import os
import threading

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() without cuInit

import torch  # noqa: E402

torch.set_num_threads(1)

from ..cases import opinfo  # noqa: E402

CATALOG = not torch.cuda.is_available()  # NVML's answer: no context made
if CATALOG:
    opinfo.catalog()


# What every CUDA driver call but cuInit returns before cuInit.
CUDA_ERROR_NOT_INITIALIZED = 3


def _driver_initialized() -> bool:
    """Whether this process has initialized the CUDA driver (``cuInit``), asked of the driver without initializing it;
    False where it is not even loaded."""
    try:
        with open("/proc/self/maps") as maps:
            if not any("libcuda.so" in line for line in maps):
                return False
        import ctypes

        context = ctypes.c_void_p()
        return ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(context)) != CUDA_ERROR_NOT_INITIALIZED
    except OSError:  # no /proc (not Linux), or a driver that cannot be asked: assume the worst
        return True


FORK_SAFE = not torch.cuda.is_initialized() and not _driver_initialized() and threading.active_count() == 1


def fork_safe(conn) -> None:
    """The forked child's answer to the pool: whether its server was safe to fork from."""
    conn.send(FORK_SAFE)
    conn.close()
