"""What a finished run leaves on disk: a repro script per finding, the findings file, JUnit XML.

Design note. Every command's Python API (``torchsleuth.sweep``,
``optim.sweep``, ``shard.sweep``, ``watch``) ends its run here, through the
run frame (``frame.run_frame``), so a caller from Python gets the same files
the command line writes; the CLI only passes the paths through. The repro
scripts are each command's own (an optimizer's script is not an op's): the
command hands in its writer; the default is ``report.repro``'s, the op
scripts. Paths are checked before any work (``check``), so a typo in one
does not cost a sweep.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..errors import UsageError
from ..judge.records import Finding
from . import findings_file, groups as grouping, junit as junit_xml, repro, view

# A command's repro script writer: findings (as reported) and the folder -> finding id -> script path.
Scripts = Callable[[Iterable[Finding], Path], dict[str, Path]]


def check(*, out: str | Path | None = None, json: str | Path | None = None, junit: str | Path | None = None) -> None:
    """Refuse, before any work and without creating anything, output paths that cannot be written."""
    if out is not None and not creatable_dir(Path(out)):
        raise UsageError(f"cannot write to --out {str(out)!r}: give a writable directory (it is made if missing)")
    for flag, path in (("--json", json), ("--junit", junit)):
        if path:
            writable_file(path, flag)


def write_outputs(result, *, out: str | Path | None = None, json: str | Path | None = None, junit: str | Path | None = None,
                  rows: Sequence[tuple] = (), scripts: Scripts | None = None) -> dict[str, str]:
    """Write the outputs asked for; what was written where (label -> path), in the order the summary lists them.

    ``result`` is a ``frame.SweepResult``; ``out``: repro scripts into
    ``out/repros``; ``json``: the findings file; ``junit``: JUnit XML, a test
    case per op, variant and dtype from ``rows`` (``Store.outcome_rows``).
    """
    groups = list(result.groups) or grouping.group(result.findings)
    reported = [result.reported(f) for f in result.findings]
    written: dict[str, str] = {}
    repro_paths: dict[str, Path] = {}
    if reported and out is not None:
        repro_paths = (scripts or repro.write_scripts)(reported, Path(out))
        written["repro scripts"] = str(Path(out) / "repros")
    if json:
        findings_file.write(
            json, command=result.run.command, device=result.run.device, torch_version=result.run.torch,
            cases=result.cases, seconds=result.seconds, findings=reported, groups=groups, repro_paths=repro_paths,
            found_as={f.id: f.case_id for f in result.findings}, flaky=result.flaky,
            coverage=getattr(result, "coverage", None),
        )
        written["findings file"] = str(json)
    if junit:
        junit_xml.write(junit, view.build(result, groups), view.tallies(rows))
        written["junit"] = str(junit)
    return written


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
