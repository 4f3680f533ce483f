"""Device strings as users write them: checked once, with what is available in the message.

A sweep can also spread its workers over several GPUs (``spread``, ``every_gpu``):
the units name the kind (``cuda``), and each worker process is pinned to one GPU
by ``CUDA_VISIBLE_DEVICES`` (``pinned``), so inside it that GPU is the only one,
``cuda:0``, and a case runs there exactly as on a one-GPU machine.
"""

from __future__ import annotations

import os

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
