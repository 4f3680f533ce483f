"""Every run, case outcome and finding in one SQLite file; a killed sweep resumes.

Design note. A run is identified by what it sweeps (``SweepConfig.key``,
which leaves out how many workers and the like). Starting a sweep whose key
matches a run that never finished continues that run: its finished units are
not run again, and a unit that was cut off resumes after its last stored
case. Outcomes and findings are keyed by ``(run, case id)`` and ``(run,
finding id)`` and inserted with ``INSERT OR IGNORE``, so a case stored once
is never counted twice, whatever order the kill and the rerun happen in.
Writes are batched into a transaction at most every ``COMMIT_SECONDS`` and
at every unit's end; a kill loses at most that much work, which the rerun
redoes. Every unit handed out asks which of its cases are stored already
(``cases_done``), so outcomes are indexed by unit too: without it each ask
read the whole run, 70 ms at the end of a whole-catalog run, in the one
process that hands out the units (bench/cuda-sweep.md).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..cases import layouts
from ..cases.records import Unit
from ..config import RunConfig
from ..errors import UsageError
from ..judge.records import Finding, Outcome
from ..shrink.records import Diagnosis, Shrunk
from .. import codec

COMMIT_SECONDS = 1.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    command TEXT NOT NULL,
    device TEXT NOT NULL,
    config TEXT NOT NULL,
    torch TEXT NOT NULL,
    version TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    seconds REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS units (
    run INTEGER NOT NULL,
    unit TEXT NOT NULL,
    state TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run, unit)
);
CREATE TABLE IF NOT EXISTS outcomes (
    run INTEGER NOT NULL,
    case_id TEXT NOT NULL,
    unit TEXT NOT NULL,
    op TEXT NOT NULL,
    variant TEXT NOT NULL,
    dtype TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (run, case_id)
);
CREATE INDEX IF NOT EXISTS outcomes_by_unit ON outcomes (run, unit);
CREATE TABLE IF NOT EXISTS notes (
    run INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS findings (
    run INTEGER NOT NULL,
    id TEXT NOT NULL,
    case_id TEXT NOT NULL,
    op TEXT NOT NULL,
    kind TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run, id)
);
CREATE TABLE IF NOT EXISTS shrunk (
    run INTEGER NOT NULL,
    finding TEXT NOT NULL,
    status TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run, finding)
);
CREATE TABLE IF NOT EXISTS reached (
    run INTEGER NOT NULL,
    op TEXT NOT NULL,
    overload TEXT NOT NULL,
    PRIMARY KEY (run, op, overload)
);
CREATE TABLE IF NOT EXISTS reached_by_family (
    run INTEGER NOT NULL,
    op TEXT NOT NULL,
    overload TEXT NOT NULL,
    family TEXT NOT NULL,
    PRIMARY KEY (run, op, overload, family)
);
CREATE TABLE IF NOT EXISTS diagnoses (
    run INTEGER NOT NULL,
    grp TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run, grp)
);
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunInfo:
    id: int
    key: str
    command: str
    device: str
    config: dict
    torch: str
    version: str
    started: float
    finished: float | None
    seconds: float


class Store:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise UsageError(f"cannot use {str(path)!r} as the database ({e}); give --db a writable file path") from None
        self._pending = 0
        self._last_commit = time.monotonic()
        self.db.execute("BEGIN")

    # --- runs -------------------------------------------------------------------------

    def start(self, config: RunConfig, *, torch_version: str, version: str) -> tuple[RunInfo, bool]:
        """The unfinished run with this config's key, resumed; else a new run. Returns (run, resumed).

        ``config`` is any command's (``SweepConfig``, ``OptimConfig``, ``ShardConfig``, ``WatchConfig``).
        """
        row = self.db.execute(
            "SELECT id FROM runs WHERE key = ? AND finished IS NULL AND torch = ? ORDER BY id DESC LIMIT 1",
            (config.key(), torch_version),
        ).fetchone()
        if row is not None:
            return self.run(row[0]), True
        config_json = json.dumps(codec.encode(config), sort_keys=True)
        cursor = self.db.execute(
            "INSERT INTO runs (key, command, device, config, torch, version, started) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (config.key(), config.command, config.device, config_json, torch_version, version, time.time()),
        )
        self.commit()
        return self.run(cursor.lastrowid), False

    def run(self, run_id: int) -> RunInfo:
        row = self.db.execute(
            "SELECT id, key, command, device, config, torch, version, started, finished, seconds FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise UsageError(f"no run {run_id} in {self.path}; `torchsleuth runs --db {self.path}` lists them")
        return RunInfo(id=row[0], key=row[1], command=row[2], device=row[3], config=json.loads(row[4]), torch=row[5], version=row[6],
                       started=row[7], finished=row[8], seconds=row[9])

    def runs(self) -> list[RunInfo]:
        return [self.run(r[0]) for r in self.db.execute("SELECT id FROM runs ORDER BY id")]

    def add_seconds(self, run_id: int, seconds: float) -> None:
        self.db.execute("UPDATE runs SET seconds = seconds + ? WHERE id = ?", (seconds, run_id))

    def finish(self, run_id: int) -> None:
        self.db.execute("UPDATE runs SET finished = ? WHERE id = ?", (time.time(), run_id))
        self.commit()

    # --- units and outcomes -------------------------------------------------------------

    def finished_units(self, run_id: int) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT unit FROM units WHERE run = ? AND state != 'running'", (run_id,))}

    def cases_done(self, run_id: int, unit: Unit) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT case_id FROM outcomes WHERE run = ? AND unit = ?", (run_id, unit.key))}

    def unit_state(self, run_id: int, unit: Unit, state: str, detail: str = "") -> None:
        self.db.execute(
            "INSERT INTO units (run, unit, state, detail) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(run, unit) DO UPDATE SET state = excluded.state, detail = excluded.detail",
            (run_id, unit.key, state, detail),
        )
        if state != "running":
            self.commit()

    def add(self, run_id: int, outcome: Outcome) -> bool:
        """Store one outcome and its findings; False if the case was stored already."""
        case = outcome.case
        cursor = self.db.execute(
            "INSERT OR IGNORE INTO outcomes (run, case_id, unit, op, variant, dtype, status, reason, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, case.id, case.unit.key, case.op, case.variant, case.dtype, outcome.status, outcome.reason, outcome.seconds),
        )
        if cursor.rowcount == 0:
            return False
        if outcome.status in ("pass", "finding"):  # a kernel that refused the call was not judged
            self.db.executemany("INSERT OR IGNORE INTO reached (run, op, overload) VALUES (?, ?, ?)",
                                [(run_id, case.op, overload) for overload in outcome.reached])
            self.db.executemany("INSERT OR IGNORE INTO reached_by_family (run, op, overload, family) VALUES (?, ?, ?, ?)",
                                [(run_id, case.op, overload, family) for overload in outcome.reached for family in layouts.families(case.layouts)])
        for finding in outcome.findings:
            self.db.execute(
                "INSERT OR IGNORE INTO findings (run, id, case_id, op, kind, record) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, finding.id, finding.case_id, finding.op, finding.kind, json.dumps(codec.encode(finding))),
            )
        self._pending += 1
        if time.monotonic() - self._last_commit > COMMIT_SECONDS:
            self.commit()
        return True

    def replace(self, run_id: int, outcome: Outcome) -> None:
        """Store a stored case's outcome anew, with its findings (a replay's: the refusal differential, shrink.refusals)."""
        case = outcome.case
        self.db.execute("UPDATE outcomes SET status = ?, reason = ?, seconds = ? WHERE run = ? AND case_id = ?",
                        (outcome.status, outcome.reason, outcome.seconds, run_id, case.id))
        for finding in outcome.findings:
            self.db.execute(
                "INSERT OR IGNORE INTO findings (run, id, case_id, op, kind, record) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, finding.id, finding.case_id, finding.op, finding.kind, json.dumps(codec.encode(finding))),
            )
        self.commit()

    def add_shrunk(self, run_id: int, shrunk: Shrunk) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO shrunk (run, finding, status, record) VALUES (?, ?, ?, ?)",
            (run_id, shrunk.finding, shrunk.status, json.dumps(codec.encode(shrunk))),
        )
        self.commit()

    def shrunk(self, run_id: int) -> dict[str, Shrunk]:
        rows = self.db.execute("SELECT finding, record FROM shrunk WHERE run = ?", (run_id,))
        return {r[0]: codec.decode(Shrunk, json.loads(r[1])) for r in rows}

    def add_diagnosis(self, run_id: int, diagnosis: Diagnosis) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO diagnoses (run, grp, record) VALUES (?, ?, ?)",
            (run_id, diagnosis.group, json.dumps(codec.encode(diagnosis))),
        )
        self.commit()

    def diagnoses(self, run_id: int) -> dict[str, Diagnosis]:
        rows = self.db.execute("SELECT grp, record FROM diagnoses WHERE run = ?", (run_id,))
        return {r[0]: codec.decode(Diagnosis, json.loads(r[1])) for r in rows}

    def note(self, run_id: int, kind: str, detail: str) -> None:
        """Something the user should hear of that is neither an outcome nor a finding."""
        self.db.execute("INSERT INTO notes (run, kind, detail) VALUES (?, ?, ?)", (run_id, kind, detail))

    def notes(self, run_id: int) -> list[tuple[str, str]]:
        return list(self.db.execute("SELECT kind, detail FROM notes WHERE run = ?", (run_id,)))

    def commit(self) -> None:
        self.db.execute("COMMIT")
        self.db.execute("BEGIN")
        self._pending = 0
        self._last_commit = time.monotonic()

    # --- reading back -----------------------------------------------------------------------

    def findings(self, run_id: int) -> list[Finding]:
        rows = self.db.execute("SELECT record FROM findings WHERE run = ? ORDER BY op, id", (run_id,))
        return [codec.decode(Finding, json.loads(r[0])) for r in rows]

    def finding(self, finding_id: str) -> tuple[int, Finding] | None:
        row = self.db.execute("SELECT run, record FROM findings WHERE id = ? ORDER BY run DESC LIMIT 1", (finding_id,)).fetchone()
        return None if row is None else (row[0], codec.decode(Finding, json.loads(row[1])))

    def status_counts(self, run_id: int) -> Counter:
        return Counter(dict(self.db.execute("SELECT status, COUNT(*) FROM outcomes WHERE run = ? GROUP BY status", (run_id,)).fetchall()))

    def reasons(self, run_id: int, status: str) -> Counter:
        rows = self.db.execute("SELECT reason, COUNT(*) FROM outcomes WHERE run = ? AND status = ? GROUP BY reason", (run_id, status))
        return Counter(dict(rows.fetchall()))

    def reached(self, run_id: int) -> dict[str, set[str]]:
        """Op -> the aten overloads its cases reached (``Outcome.reached``)."""
        found: dict[str, set[str]] = {}
        for op, overload in self.db.execute("SELECT op, overload FROM reached WHERE run = ?", (run_id,)):
            found.setdefault(op, set()).add(overload)
        return found

    def reached_by_family(self, run_id: int) -> dict[str, set[str]]:
        """Overload -> the layout families (cases.layouts.families) of the judged cases that reached it, any op's."""
        found: dict[str, set[str]] = {}
        for overload, family in self.db.execute("SELECT overload, family FROM reached_by_family WHERE run = ?", (run_id,)):
            found.setdefault(overload, set()).add(family)
        return found

    def variant_counts(self, run_id: int) -> dict[tuple[str, str], int]:
        """(op, variant) -> cases stored."""
        rows = self.db.execute("SELECT op, variant, COUNT(*) FROM outcomes WHERE run = ? GROUP BY op, variant", (run_id,))
        return {(op, variant): count for op, variant, count in rows}

    def failed_units(self, run_id: int) -> list[tuple[str, str]]:
        return list(self.db.execute("SELECT unit, detail FROM units WHERE run = ? AND state = 'failed'", (run_id,)))

    def case_seconds(self, run_id: int) -> dict[str, float]:
        """The case id of each finding -> the seconds its case took (what replaying it costs)."""
        rows = self.db.execute("SELECT o.case_id, o.seconds FROM outcomes o JOIN findings f ON f.run = o.run AND f.case_id = o.case_id "
                               "WHERE o.run = ?", (run_id,))
        return {case_id: seconds or 0.0 for case_id, seconds in rows}

    def outcome_rows(self, run_id: int) -> list[tuple]:
        return list(self.db.execute("SELECT case_id, status, reason, seconds FROM outcomes WHERE run = ? ORDER BY case_id", (run_id,)))

    def close(self) -> None:
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error:
            pass
        self.db.close()

