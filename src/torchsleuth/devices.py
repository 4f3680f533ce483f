"""Device strings as users write them: checked once, with what is available in the message."""

from __future__ import annotations

import torch

from .errors import UsageError


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
