"""What a finished run leaves on disk: a repro script per finding, the findings file, JUnit XML.

Design note. Every command's Python API (``torchsleuth.sweep``,
``optim.sweep``, ``shard.sweep``, ``watch``) ends its run here, through the
run frame (``frame.run_frame``), so a caller from Python gets the same files
the command line writes; the CLI only passes the paths through. The repro
scripts are each command's own (an optimizer's script is not an op's): the
command hands in its writer; the default is ``report.repro``'s, the op
scripts. Paths are checked before any work (``check``, from ``paths``, which
the command line also calls before torch loads), so a typo in one does not
cost a sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..judge.records import Finding
from .. import paths
from . import findings_file, groups as grouping, junit as junit_xml, repro, view

# Refuse, before any work, output paths that cannot be written (``paths.check``: beside what writes them).
check = paths.check

# A command's repro script writer: findings (as reported) and the folder -> finding id -> script path.
Scripts = Callable[[Iterable[Finding], Path], dict[str, Path]]


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
            coverage=getattr(result, "coverage", None), internal=getattr(result, "internal", ()),
        )
        written["findings file"] = str(json)
    if junit:
        junit_xml.write(junit, view.build(result, groups), view.tallies(rows))
        written["junit"] = str(junit)
    return written
