"""The user's ``--import`` modules (custom kernels, backends), loaded once per process.

Every worker imports them before its first case; a repro script or a peer
process that must see the same kernels asks which were loaded (``IMPORTED``).
"""

from __future__ import annotations

import importlib
import runpy

# What each --import loaded, kept for the life of the process (a .py file's
# globals: a torch.library.Library held only by a file's top level unregisters
# its kernels when it is collected); each is loaded once per process.
IMPORTED: dict[str, object] = {}


def load_imports(imports: tuple[str, ...]) -> None:
    """Import the user's modules before any case runs, each once."""
    for name in imports:
        if name not in IMPORTED:
            IMPORTED[name] = runpy.run_path(name, run_name="__torchsleuth_import__") if name.endswith(".py") else importlib.import_module(name)


def loaded() -> tuple[str, ...]:
    """The --import modules this process has loaded, in order (repro scripts import them too)."""
    return tuple(IMPORTED)
