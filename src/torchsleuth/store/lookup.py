"""Reading a store back for the commands that look into it: ``repro``, ``diff``, ``runs``.

Design note. ``reported_finding`` is the one place that decides which version
of a finding a user is shown: the stored finding of the newest run that has
it, shrunk when the shrink stage shrank it (its own id, the shrunk case's
call). Every
command that shows a single finding goes through it, so that they never
disagree about what was found.

The other readers are the few queries the report side needs and ``Store``
has no method for. They take the ids they need, not whole runs, because a
run of the whole catalog holds hundreds of thousands of outcomes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from ..judge.records import Finding
from .sqlite import RunInfo, Store

# SQLite allows 999 bound parameters per statement in older builds.
_BATCH = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class Reported:
    """A finding as it is shown to the user, and the run it was found in."""

    run: RunInfo
    finding: Finding


def reported_finding(store: Store, finding_id: str) -> Reported | None:
    """The finding ``finding_id`` as the user should see it (see the design note); None if unknown."""
    found = store.finding(finding_id.strip())
    if found is None:
        return None
    run_id, finding = found
    shrunk = store.shrunk(run_id).get(finding.id)
    return Reported(run=store.run(run_id), finding=finding if shrunk is None else shrunk.reported(finding))


def close_finding_ids(store: Store, finding_id: str, *, limit: int = 3) -> list[str]:
    """Stored finding ids a mistyped ``finding_id`` may have meant: ones it begins, then look-alikes."""
    typed = finding_id.strip()
    known = [row[0] for row in store.db.execute("SELECT DISTINCT id FROM findings ORDER BY id")]
    # a truncated id (copied from a narrow table) is the commonest slip
    close = [known_id for known_id in known if typed and known_id.startswith(typed)][:limit]
    for known_id in difflib.get_close_matches(typed, known, n=limit, cutoff=0.6):
        if known_id not in close and len(close) < limit:
            close.append(known_id)
    return close


def statuses(store: Store, run_id: int, case_ids: Iterable[str]) -> dict[str, str]:
    """The stored status of each of ``case_ids`` in the run; a case the run never stored is absent."""
    wanted = sorted(set(case_ids))
    found: dict[str, str] = {}
    for start in range(0, len(wanted), _BATCH):
        batch = wanted[start : start + _BATCH]
        marks = ", ".join("?" * len(batch))
        rows = store.db.execute(f"SELECT case_id, status FROM outcomes WHERE run = ? AND case_id IN ({marks})", (run_id, *batch))
        found.update(rows.fetchall())
    return found


def run_counts(store: Store) -> dict[int, tuple[int, int]]:
    """Run id -> (cases stored, findings stored), for every run that has any."""
    cases = dict(store.db.execute("SELECT run, COUNT(*) FROM outcomes GROUP BY run").fetchall())
    findings = dict(store.db.execute("SELECT run, COUNT(*) FROM findings GROUP BY run").fetchall())
    return {run: (cases.get(run, 0), findings.get(run, 0)) for run in cases.keys() | findings.keys()}


def failures(store: Store) -> dict[int, str]:
    """Run id -> why it failed, for the runs stored as failed (a watched script that raised: a note of kind ``failed``)."""
    return dict(store.db.execute("SELECT run, detail FROM notes WHERE kind = 'failed'").fetchall())
