"""What the investigation scripts share: torchsleuth importable from this checkout, and their output kept in --out."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if importlib.util.find_spec("torchsleuth") is None:  # a machine where it is not installed: this checkout's
    sys.path.insert(0, os.path.join(ROOT, "src"))


@contextlib.contextmanager
def tee(out: str | None, name: str):
    """Everything written to stdout inside, by this process and the processes it starts, goes to ``OUT/NAME`` too."""
    if not out:
        yield
        return
    os.makedirs(out, exist_ok=True)
    sys.stdout.flush()
    copy = subprocess.Popen(["tee", os.path.join(out, name)], stdin=subprocess.PIPE)
    saved = os.dup(1)
    os.dup2(copy.stdin.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        copy.stdin.close()
        copy.wait()
