"""Many checks as one report: what a test session's ``--torchsleuth-report PATH`` writes.

Design note. Each ``check`` is a run of its own (its own store, its own
repro scripts' text); a session of tests makes many. ``merge`` adds their results
into one ``SweepResult`` (counts summed, findings and groups listed in the
order the checks ran, each group once), and ``write`` hands it to the same
writers a sweep uses: the findings file, the repro scripts, and the HTML page
``torchsleuth report`` makes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Iterable

from ..report import html, outputs, view
from ..store.coverage import Coverage
from ..frame import SweepResult
from .api import CheckResult


def merge(results: Iterable[CheckResult]) -> SweepResult | None:
    """One result holding every check's cases, findings and groups (None for no checks)."""
    results = [r.sweep for r in results]
    if not results:
        return None
    statuses: Counter = Counter()
    reasons: dict[str, Counter] = {}
    for result in results:
        statuses.update(result.statuses)
        for status, counts in result.reasons.items():
            reasons.setdefault(status, Counter()).update(counts)
    groups = {g.id: g for result in results for g in result.groups}  # a group met twice (the same op checked again) once
    return dataclasses.replace(
        results[0], statuses=dict(statuses), reasons={s: dict(c) for s, c in reasons.items()},
        failed_units=sum((r.failed_units for r in results), ()), notes=sum((r.notes for r in results), ()),
        findings=sum((r.findings for r in results), ()), seconds=sum(r.seconds for r in results), groups=tuple(groups.values()),
        shrunk={k: v for r in results for k, v in r.shrunk.items()}, flaky=sum((r.flaky for r in results), ()),
        internal=sum((r.internal for r in results), ()),
        coverage=Coverage(ops=sum((r.coverage.ops for r in results), ())), written={},
    )


def write(results: Iterable[CheckResult], folder: str | Path) -> dict[str, str]:
    """``folder/findings.json``, ``folder/report.html`` and ``folder/repros/`` for every check; what was written where."""
    folder = Path(folder)
    outputs.check(out=folder, json=folder / "findings.json")
    results = list(results)
    merged = merge(results)
    if merged is None:
        return {}
    scripts = {r.sweep.reported(f).id: r.scripts[f.id] for r in results for f in r.sweep.findings if f.id in r.scripts}
    written = outputs.write_outputs(merged, out=folder, json=folder / "findings.json", scripts=_writer(scripts))
    html.write(folder / "report.html", view.build(merged, repros=True))
    return {**written, "html report": str(folder / "report.html")}


def _writer(scripts: dict[str, str]):
    """A script writer (report.outputs.Scripts) that writes each check's own script: it was made with what the check
    knew (the op's module to import first)."""

    def write_each(findings, directory: Path) -> dict[str, Path]:
        target = Path(directory) / "repros"
        target.mkdir(parents=True, exist_ok=True)
        written = {}
        for finding in findings:
            if finding.id in scripts and finding.id not in written:
                written[finding.id] = target / f"{finding.id}.py"
                written[finding.id].write_text(scripts[finding.id], encoding="utf-8")
        return written

    return write_each
