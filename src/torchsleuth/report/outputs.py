"""What a finished sweep leaves on disk: a repro script per finding and the findings file."""

from __future__ import annotations

from pathlib import Path

from . import findings_file, groups as grouping, repro


def write_outputs(result, *, out: Path, json_path: str | None) -> tuple[list, dict[str, str]]:
    """Write repros (and the JSON when asked); returns the groups and what was written where."""
    groups = list(result.groups) or grouping.group(result.findings)
    reported = [result.reported(f) for f in result.findings]
    written: dict[str, str] = {}
    repro_paths: dict[str, str] = {}
    if reported:
        repro_paths = repro.write_scripts(reported, out)
        written["repro scripts"] = str(out / "repros")
    if json_path:
        findings_file.write(
            json_path, command=result.run.command, device=result.run.device, torch_version=result.run.torch,
            cases=result.cases, seconds=result.seconds, findings=reported, groups=groups, repro_paths=repro_paths,
            found_as={f.id: f.case_id for f in result.findings}, flaky=result.flaky,
        )
        written["findings file"] = json_path
    return groups, written
