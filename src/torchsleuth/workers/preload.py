"""What the pool's fork server loads once, so that every worker forked from it starts warm (workers.pool).

Design note. A worker started by ``spawn`` is a fresh interpreter: it imports
torch and torchsleuth and loads OpInfo's catalog again, 3 s on a CPU and
10-15 s beside a GPU (bench/sweep-profile.md), and a GPU sweep starts one for
every crash, every hang and every replay alone. A fork server (Python's
``forkserver`` start method) is one such interpreter that does this once and
forks each worker from itself: the worker inherits the loaded modules and
the catalog (where it could be loaded, below) and pays only for its
device's context. Forward-mode AD's decompositions are loaded here too: the
first dual tensor a process makes imports them, compiling TorchScript (0.2
s), and a GPU sweep's hundreds of fresh workers each made one.

Forking is safe only from a process that holds no threads and no device
context. This module is imported in the server and does nothing else: torch
with one intra-op thread (no thread pool is ever made), torchsleuth, and
OpInfo's catalog. Where a GPU is present, OpInfo's modules ask the device at
import: its compute capability decides dtypes (``SM53OrLater``), torch's
``has_triton`` asks its properties, and where numba is installed a module asks
numba whether CUDA works; each makes a CUDA context or initializes the driver,
which would leave the server unsafe to fork from. So there the catalog is
loaded with the capability answered by NVML (the number the driver gives,
asked without a context; only where every GPU has the same one), triton's
device check left out for the load and its cached answer dropped after it,
numba kept out of the load (the modules take it for absent: only unittest
skips read that), and every other question for the device refused: a refusal
gives the load up. What a module might do below torch cannot be refused: a
server the load left unsafe anyway (``FORK_SAFE`` false while ``CATALOG`` is
true) is stopped by the pool, which starts another with ``LEAVE_CATALOG`` set
to "0" (workers.starts.start_context), whose workers each load the catalog
themselves (6 s of a worker's 10-15 s start beside a GPU; 255 worker starts
in a whole-catalog run on one H200, bench/cuda-sweep.md). The catalog was
once tried in a forked child first instead, which cost every GPU sweep 8.5 s
before its first unit (bench/cuda-sweep.md). ``torch.cuda.is_available`` is
asked through NVML, which makes no context. ``FORK_SAFE`` says whether the
server is safe once every module it preloads is imported (this one comes
last): no CUDA context made by torch, the CUDA driver not initialized
(torch's libraries may load it at import, which a fork survives; ``cuInit``
it does not), no thread besides the server's own. The pool asks one forked
child for it, and ``CATALOG``, before its first worker
(workers.starts.start_context) and spawns when the server is not safe.
"""

from __future__ import annotations

import os
import sys
import threading

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() without cuInit

import torch  # noqa: E402

torch.set_num_threads(1)
if os.environ.get("PYTORCH_JIT", "1") == "1" and __debug__:  # what a worker's first dual tensor imports (forward-mode AD):
    import torch._decomp.decompositions_for_jvp  # noqa: E402, F401  TorchScript compiled at import, 0.2 s a worker

from ..cases import opinfo  # noqa: E402
from .starts import LEAVE_CATALOG  # noqa: E402


class _DeviceAsked(BaseException):
    """Raised in place of making a CUDA context while the catalog loads (a BaseException: no ``except Exception`` in
    torch's modules may take it for a missing device)."""


def _nvml_capability() -> tuple[int, int] | None:
    """The compute capability every GPU of this machine has, asked of NVML (no CUDA context); None where NVML cannot
    be asked or the GPUs differ (which one a worker sees is not known here)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        count = ctypes.c_uint()
        if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        found = set()
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
                return None
            found.add((major.value, minor.value))
        return found.pop() if len(found) == 1 else None
    except (OSError, AttributeError):
        return None


def load_catalog_beside_a_gpu(capability: tuple[int, int]) -> bool:
    """OpInfo's catalog loaded without a CUDA context, the device's compute capability being ``capability``; False
    (and the load given up) where the catalog's modules ask the device anything else through torch. numba is kept
    out of the load (its CUDA check, which a module of the catalog makes at import, initializes the driver below
    torch): the catalog's modules then take numba for absent, which only unittest skips read."""
    import importlib.util

    import torch.utils._triton as triton

    def refuse(*args, **kwargs):
        raise _DeviceAsked

    def no_triton():
        return False  # triton's own check asks the device's properties; only unittest skips read it at import

    hidden = "numba" not in sys.modules and importlib.util.find_spec("numba") is not None
    saved = torch.cuda.get_device_capability, torch.cuda._lazy_init, triton.has_triton
    torch.cuda.get_device_capability = lambda device=None: capability
    torch.cuda._lazy_init = refuse
    triton.has_triton = no_triton
    if hidden:
        sys.modules["numba"] = None  # an import of it raises ImportError
    try:
        opinfo.catalog()
        return True
    except _DeviceAsked:
        return False
    finally:
        torch.cuda.get_device_capability, torch.cuda._lazy_init, triton.has_triton = saved
        if hidden and sys.modules.get("numba", 0) is None:
            del sys.modules["numba"]
        for module in list(sys.modules.values()):  # a module that took the stand-in by name gets the real one back
            if getattr(module, "has_triton", None) is no_triton:
                module.has_triton = saved[2]
        getattr(saved[2], "cache_clear", lambda: None)()  # an answer made while the device could not be asked


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


def safe_to_fork() -> bool:
    """No CUDA context made by torch, the driver not initialized, no thread but this one."""
    return not torch.cuda.is_initialized() and not _driver_initialized() and threading.active_count() == 1


if os.environ.get(LEAVE_CATALOG) == "0":  # set by workers.starts: a server before this one was left unsafe by the load
    CATALOG = False
elif not torch.cuda.is_available():  # NVML's answer: no context made
    CATALOG = bool(opinfo.catalog())
else:
    _capability = _nvml_capability()
    CATALOG = _capability is not None and safe_to_fork() and load_catalog_beside_a_gpu(_capability)

FORK_SAFE = safe_to_fork()
