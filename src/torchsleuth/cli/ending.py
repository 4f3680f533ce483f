"""How a command that judges ends: its summary, the line saying nothing was checked, and its exit status.

Design note. Each exit status means one thing (``errors.ExitCode``): 0 the
run checked something and found nothing, 1 findings, 2 a usage or
environment error (before any work), 3 the watched script itself failed,
4 nothing was checked (every case was skipped or raised, or a watched
script made no call torchsleuth could judge). A run that checked nothing is
not clean: a CI job must not pass on it, so it has a status of its own and a
line that says why.
"""

from __future__ import annotations

from ..errors import ExitCode
from ..report import terminal


def judged(result) -> int:
    """The cases of a stored run that were judged (passed or found something)."""
    return result.statuses.get("pass", 0) + result.statuses.get("finding", 0)


def finish(result, *, db: str | None, checked: int | None = None, why: str = "") -> int:
    """Print the summary of ``result`` (a ``frame.SweepResult``); its exit status.

    ``checked``: what the run judged, when the stored cases do not say it
    (a watch's op calls and steps); ``why``: the reason given when nothing was.
    """
    terminal.summary(result, written=result.written, db=db)
    if result.findings:
        return ExitCode.FINDINGS
    if (judged(result) if checked is None else checked) == 0:
        cases = "its one case" if result.cases == 1 else f"every one of its {result.cases} cases"
        print(f"nothing was checked: {why or (f'{cases} was skipped or raised (the tables above say why)' if result.cases else 'no case ran')}")
        return ExitCode.NOTHING_CHECKED
    return ExitCode.CLEAN
