"""What a finished sweep leaves on disk: a repro script per finding and the findings file."""

from __future__ import annotations

from pathlib import Path

from . import findings_file, groups as grouping, repro


def write_outputs(result, *, out: Path, json_path: str | None) -> tuple[list, dict[str, str]]:
    """Write repros (and the JSON when asked); returns the groups and what was written where."""
    groups = grouping.group(result.findings)
    written: dict[str, str] = {}
    repro_paths: dict[str, str] = {}
    if result.findings:
        repro_paths = repro.write_scripts(result.findings, out)
        written["repro scripts"] = str(out / "repros")
    if json_path:
        findings_file.write(
            json_path, command=result.run.command, device=result.run.device, torch_version=result.run.torch,
            cases=result.cases, seconds=result.seconds, findings=result.findings, groups=groups, repro_paths=repro_paths,
        )
        written["findings file"] = json_path
    return groups, written
