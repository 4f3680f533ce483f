"""Exit codes and the one error type the CLI turns into exit status 2."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    CLEAN = 0  # the sweep ran and found nothing
    FINDINGS = 1  # the sweep ran and found something
    USAGE = 2  # bad input or an environment that cannot run the sweep


class UsageError(Exception):
    """Bad input from the user: one line saying what was wrong and what is allowed."""
