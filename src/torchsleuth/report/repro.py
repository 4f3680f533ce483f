"""Repro scripts: one standalone Python file per finding, needing only torch.

Design note. This is the one dispatch: an oracle plug-in's finding gets the
script its oracle writes (``Registry.script``), every other finding the
generic script of the references and contracts (``scripts.checks.generic_script``).
What a script is made of (the kit of helpers, the parts, the checks) lives
in ``torchsleuth.scripts``, below this stage, so the oracles use it without
importing the reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from ..judge.plugin import BUILTIN, Registry
from ..judge.records import Finding
from ..scripts.checks import generic_script


def script(finding: Finding, *, torch_version: str | None = None, oracles: Registry | None = None,
           imports: tuple[str, ...] = ()) -> str:
    """A standalone script that rebuilds ``finding``'s call and exits 1 while it is wrong (``imports``: the run's
    ``--import`` modules, which the generic script imports first)."""
    torch_version = torch_version or torch.__version__
    own = (oracles or BUILTIN).script(finding, torch_version)  # an oracle's finding checks its own property
    return own if own is not None else generic_script(finding, torch_version, imports)


def write_scripts(findings: Iterable[Finding], directory: str | Path, *, torch_version: str | None = None,
                  oracles: Registry | None = None, imports: tuple[str, ...] = ()) -> dict[str, Path]:
    """Each finding's script as ``directory/repros/<id>.py``; finding id -> path."""
    folder = Path(directory) / "repros"
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for finding in findings:
        if finding.id in written:
            continue
        path = folder / f"{finding.id}.py"
        path.write_text(script(finding, torch_version=torch_version, oracles=oracles, imports=imports), encoding="utf-8")
        written[finding.id] = path
    return written

