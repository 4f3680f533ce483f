"""Exit codes, the one error type the CLI turns into exit status 2, and an error told in one line."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    CLEAN = 0  # the sweep ran and found nothing
    FINDINGS = 1  # the sweep ran and found something
    USAGE = 2  # bad input or an environment that cannot run the sweep
    SCRIPT_FAILED = 3  # the script `torchsleuth watch` ran raised or exited non-zero (its traceback is the user's)
    NOTHING_CHECKED = 4  # the run judged nothing: every case skipped or raised, or a watched script made no judgeable call


class UsageError(Exception):
    """Bad input from the user: one line saying what was wrong and what is allowed."""


def one_line(error: BaseException) -> str:
    """``error`` as its type and the first line of its message (at most 200 characters): how outcomes quote errors."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}"
