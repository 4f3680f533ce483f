"""Output paths a user gives (``--out``, ``--json``, ``--junit``), checked before any work: written to, or refused.

Design note. A path that cannot be written must cost nothing: not a sweep,
and not even torch's import, so this module imports the standard library
only (the command line checks the paths it is given with it before the parser
loads the commands, ``cli/precheck.py``; every command's run checks them
again, through ``report.outputs``, since the Python API is called without the
command line). Whether a folder takes new files is tried, by making and
removing a folder in the nearest one that exists: permission bits do not say
it (root may write anywhere but /proc, a disk may be full). Nothing is left
behind: a folder that does not exist yet is made when the run writes to it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UsageError


def check(*, out: str | Path | None = None, json: str | Path | None = None, junit: str | Path | None = None) -> None:
    """Refuse, before any work and without creating anything, output paths that cannot be written."""
    if out is not None and not creatable_dir(Path(out)):
        raise UsageError(f"cannot write to --out {str(out)!r}: give a writable directory (it is made if missing)")
    for flag, path in (("--json", json), ("--junit", junit)):
        if path:
            writable_file(path, flag)


def writable_file(path: str | Path, flag: str) -> None:
    """Refuse a file path that cannot be written (a folder, or under a regular file or a folder that takes no new file)."""
    if Path(path).is_dir() or not creatable_dir(Path(path).resolve().parent):
        raise UsageError(f"cannot write the {flag} file {str(path)!r}: not a writable file path")


def creatable_dir(path: Path) -> bool:
    """Whether ``path`` is a writable directory, or could be made one: tried, by making and removing a folder in the
    nearest one that exists (permission bits alone do not say it: root may write anywhere but /proc, a full disk, ...)."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    if not path.is_dir():
        return False
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".torchsleuth-", dir=path))
    except OSError:
        return False
    return True
