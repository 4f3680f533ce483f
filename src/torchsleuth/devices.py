"""Device strings as users write them: checked once, with what is available in the message.

A sweep can also spread its workers over several GPUs (``spread``, ``every_gpu``):
the units name the kind (``cuda``), and each worker process is pinned to one GPU
by ``CUDA_VISIBLE_DEVICES`` (``pinned``), so inside it that GPU is the only one,
``cuda:0``, and a case runs there exactly as on a one-GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import torch

from .errors import UsageError


def kind(device: str) -> str:
    """A device string's kind, without its index: ``cuda:1`` -> ``cuda``."""
    return device.split(":")[0]


def available() -> list[str]:
    found = ["cpu"]
    for kind in ("cuda", "mps", "xpu"):
        module = getattr(torch, kind, None)
        if module is not None and getattr(module, "is_available", lambda: False)():
            found.append(kind)
    return found


def parse(text: str) -> str:
    """A device torch can run on now, as a string ("cpu", "cuda", "cuda:1")."""
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError):
        raise UsageError(f"unknown device {text!r}; available here: {', '.join(available())}") from None
    if device.type != "cpu" and device.type not in available():
        raise UsageError(f"device {text!r} is not available here (torch {torch.__version__}); available: {', '.join(available())}")
    if device.index is not None and device.type != "cpu":
        count = getattr(torch, device.type).device_count()
        if device.index >= count:
            raise UsageError(f"device {text!r} does not exist: this machine has {count} {device.type} device(s)")
    return str(device)


def spread(text: str) -> tuple[str, tuple[int, ...]]:
    """``--devices cuda:0,cuda:1``: the kind the units name and the GPU indices the workers are spread over."""
    parsed = [parse(part.strip()) for part in text.split(",") if part.strip()]
    kinds = {torch.device(d).type for d in parsed}
    if not parsed or kinds != {"cuda"} or any(torch.device(d).index is None for d in parsed):
        raise UsageError(f"--devices {text!r}: give CUDA devices with their index, comma-separated (cuda:0,cuda:1)")
    indices = tuple(dict.fromkeys(torch.device(d).index for d in parsed))
    return "cuda", indices


def every_gpu(device: str) -> tuple[int, ...]:
    """``--device cuda`` on a machine with several GPUs means all of them; one GPU, an index or another kind: none."""
    if device != "cuda":
        return ()
    count = torch.cuda.device_count()
    return tuple(range(count)) if count > 1 else ()


def pinned(index: int) -> dict[str, str]:
    """The environment that shows a worker only GPU ``index`` (an index among those this process sees)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return {"CUDA_VISIBLE_DEVICES": visible.split(",")[index].strip()}
    return {"CUDA_VISIBLE_DEVICES": str(index)}


# NVIDIA MPS runs the CUDA work of many processes in one server's context, and a
# memory fault of one client (an illegal address) ends the work of every client
# running then (a device-side assert stays in its client). A sweep's workers make
# kernels fault on purpose, so under MPS one worker's crash is charged to the
# cases the others were running: on an H200 a whole-catalog sweep under MPS
# reported addmm and addmv as crashing, stalled for a minute, and replaced 519
# workers (bench/cuda-sweep.md). Workers therefore make ordinary contexts: pointed
# at a pipe directory with no control daemon in it, CUDA does not connect to the
# server (measured there: a process outside it survives another's illegal address).
MPS_PIPE = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"


def mps_pipe() -> str | None:
    """The pipe directory of an NVIDIA MPS control daemon this process's CUDA would connect to, or None."""
    directory = os.environ.get(MPS_PIPE) or MPS_DEFAULT_PIPE
    return directory if os.path.exists(os.path.join(directory, "control")) else None


def outside_mps(device: str, *, works=None) -> dict[str, str] | None:
    """The environment that keeps a sweep's workers out of an MPS server: ``{}`` where none is running (or the device
    is no CUDA GPU), None where the workers cannot leave it (the GPU is in exclusive-process mode, so only the server
    may make a context there: ``works(environment)`` says whether a process with it can use the GPU)."""
    if kind(device) != "cuda" or mps_pipe() is None:
        return {}
    empty = os.path.join(tempfile.gettempdir(), f"torchsleuth-outside-mps-{os.getuid()}")
    os.makedirs(empty, exist_ok=True)
    environment = {MPS_PIPE: empty}
    return environment if (works or _gpu_works)(environment) else None


def _gpu_works(environment: dict[str, str]) -> bool:
    """Whether a fresh interpreter with ``environment`` can run a kernel on the GPU (this process makes no context)."""
    check = "import torch; torch.ones(1, device='cuda').add_(1).cpu()"
    try:
        done = subprocess.run([sys.executable, "-c", check], env={**os.environ, **environment}, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def works(device: str) -> bool:
    """Whether the device still runs a kernel in this process (a CUDA error can poison it)."""
    if device == "cpu":
        return True
    try:
        module = getattr(torch, torch.device(device).type)
        probe = torch.ones(1, device=device) + 1
        module.synchronize()
        return float(probe) == 2.0
    except Exception:
        return False
