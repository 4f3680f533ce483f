"""A sweep killed with SIGKILL resumes where it stopped: nothing lost, nothing counted twice.

The killed sweep and an uninterrupted one of the same command run side by side,
each in a database of its own; the killed one is then rerun with the same
arguments and the two databases must hold the same cases with the same statuses.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

# 'a*' in float32 is a few dozen op units: long enough (seconds) to be killed midway.
SWEEP = ["ops", "--ops", "a*", "--dtypes", "float32", "--samples", "1", "--workers", "1", "--no-progress"]

# Imported by every worker: makes one early unit (acosh, the third) take a few
# seconds, longer than the store's commit interval, so that a kill can land in
# the middle of a unit whose first cases are already stored. acosh is computed
# from other ops (the same way in every run being compared); the judge itself
# never calls acosh, so nothing else slows down.
SLOW_ACOSH = """
import time
import warnings

import torch

_lib = torch.library.Library("aten", "IMPL")


def _acosh(self):
    time.sleep(0.1)
    return torch.log(self + torch.sqrt(self * self - 1))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("acosh", _acosh, "CPU")
"""
SMALL = ["ops", "--ops", "addcmul", "--dtypes", "float32", "--samples", "1", "--variants", "functional",
         "--layouts", "contiguous,transposed", "--workers", "0", "--no-progress", "--no-compile"]
TIMEOUT = 300


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "torchsleuth.cli.main", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200"}


def torchsleuth(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=environment())


def query(db: Path, sql: str, *params):
    connection = sqlite3.connect(db, timeout=30)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def outcomes(db: Path, run: int) -> dict[str, str]:
    return dict(query(db, "SELECT case_id, status FROM outcomes WHERE run = ?", run))


def findings(db: Path, run: int) -> set[str]:
    return {r[0] for r in query(db, "SELECT id FROM findings WHERE run = ?", run)}


def stored(db: Path) -> tuple[int, int, bool]:
    """(outcomes committed, units finished, run finished), or zeros while the file is not ready."""
    if not db.exists():
        return 0, 0, False
    try:
        (count,), = query(db, "SELECT COUNT(*) FROM outcomes")
        (units,), = query(db, "SELECT COUNT(*) FROM units WHERE state != 'running'")
        finished = query(db, "SELECT finished FROM runs")
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0, 0, False
    return count, units, bool(finished) and finished[0][0] is not None


def cut_units(db: Path) -> dict[str, int]:
    """Units still running that already have stored cases: unit -> cases stored."""
    try:
        return dict(query(db, "SELECT u.unit, COUNT(*) FROM units u JOIN outcomes o ON o.run = u.run AND o.unit = u.unit "
                              "WHERE u.state = 'running' GROUP BY u.unit"))
    except sqlite3.OperationalError:
        return {}


def assert_group_gone(group: int) -> None:
    """No process of the killed sweep's group (its workers) is left."""
    deadline = time.monotonic() + 30
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "a worker outlived the kill"
        time.sleep(0.05)


def summary_cases(stdout: str) -> int:
    match = re.search(r"(\d+) cases in", stdout)
    assert match, stdout
    return int(match.group(1))


@pytest.fixture
def processes():
    """Sweeps started in sessions of their own; any still running at the end are killed with their workers."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.slow
def test_killed_sweep_resumes_where_it_stopped(tmp_path, processes):
    (tmp_path / "slow_acosh.py").write_text(SLOW_ACOSH)
    sweep = [*SWEEP, "--import", "slow_acosh.py"]
    reference_db, killed_db = tmp_path / "reference.db", tmp_path / "killed.db"
    reference = subprocess.Popen(command(*sweep, "--db", str(reference_db), "--out", "reference"), cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(), start_new_session=True)
    processes.append(reference)
    killed = subprocess.Popen(command(*sweep, "--db", str(killed_db), "--out", "killed"), cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(), start_new_session=True)
    processes.append(killed)
    # kill -9 the whole process group once whole units are stored and one is cut midway
    deadline = time.monotonic() + TIMEOUT
    while True:
        count, units, finished = stored(killed_db)
        assert not finished and killed.poll() is None, "the sweep ended before it could be killed"
        if units >= 2 and cut_units(killed_db):
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert_group_gone(killed.pid)

    # what the kill left: one unfinished run, some of its cases, a unit cut midway
    assert query(killed_db, "SELECT id, finished FROM runs") == [(1, None)]
    before = outcomes(killed_db, 1)
    cut = cut_units(killed_db)
    assert before and cut

    # a different sweep on the same database starts a run of its own; it does not take over run 1
    other = torchsleuth(*SMALL, "--db", str(killed_db), "--out", "other", cwd=tmp_path)
    assert other.returncode == 0, other.stdout + other.stderr
    assert "resuming" not in other.stderr and "(run 2)" in other.stdout
    assert outcomes(killed_db, 1) == before

    rerun = torchsleuth(*sweep, "--db", str(killed_db), "--out", "killed", cwd=tmp_path)
    assert rerun.returncode in (0, 1), rerun.stdout + rerun.stderr
    assert "resuming" in rerun.stderr
    assert "(run 1)" in rerun.stdout and "run 3" not in rerun.stdout

    # the uninterrupted sweep, run alongside, is the answer
    stdout, stderr = reference.communicate(timeout=TIMEOUT)
    assert reference.returncode in (0, 1), stderr
    expected = outcomes(reference_db, 1)
    assert len(before) < len(expected) and set(before) <= set(expected)
    for unit, count in cut.items():
        assert 0 < count < sum(1 for case in expected if case.startswith(unit.split("|")[0] + "|")), unit
    assert rerun.returncode == reference.returncode, rerun.stdout + rerun.stderr

    after = outcomes(killed_db, 1)
    assert after == expected  # same cases, same statuses: nothing lost, nothing extra
    assert {case: after[case] for case in before} == before  # what was stored before the kill stands
    assert findings(killed_db, 1) == findings(reference_db, 1)
    assert summary_cases(rerun.stdout) == summary_cases(stdout) == len(expected)  # nothing counted twice
    done_units = "SELECT COUNT(*) FROM units WHERE run = 1 AND state = 'done'"
    assert query(killed_db, done_units) == query(reference_db, done_units)
    runs = query(killed_db, "SELECT id, finished IS NOT NULL FROM runs ORDER BY id")
    assert runs == [(1, 1), (2, 1)]


@pytest.mark.slow
def test_finished_run_rerun_starts_a_new_run(tmp_path):
    db = tmp_path / "runs.db"
    first = torchsleuth(*SMALL, "--db", str(db), cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "(run 1)" in first.stdout and "resuming" not in first.stderr
    second = torchsleuth(*SMALL, "--db", str(db), cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "(run 2)" in second.stdout and "resuming" not in second.stderr
    assert query(db, "SELECT id, finished IS NOT NULL FROM runs ORDER BY id") == [(1, 1), (2, 1)]
    assert outcomes(db, 2) == outcomes(db, 1) and len(outcomes(db, 1)) > 0
    assert summary_cases(second.stdout) == summary_cases(first.stdout) == len(outcomes(db, 1))


def test_asking_which_cases_of_a_unit_are_stored_reads_that_units_rows_only_in_new_and_older_stores(tmp_path):
    # every unit handed out asks this (the resume point); a scan of the whole run made it 70 ms a unit at the end of
    # a whole-catalog run, in the process that hands units out
    from torchsleuth.store.sqlite import Store

    older = tmp_path / "older.db"  # a store written before the index: opening it adds the index
    with sqlite3.connect(older) as db:
        db.execute("CREATE TABLE outcomes (run INTEGER NOT NULL, case_id TEXT NOT NULL, unit TEXT NOT NULL, op TEXT NOT NULL, "
                   "variant TEXT NOT NULL, dtype TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, "
                   "seconds REAL NOT NULL, PRIMARY KEY (run, case_id))")
        db.executemany("INSERT INTO outcomes VALUES (1, ?, ?, 'neg', 'functional', 'float32', 'pass', '', 0.0)",
                       [(f"neg|{i}", "neg|float32|cpu" if i % 2 else "abs|float32|cpu") for i in range(100)])
    for path in (tmp_path / "new.db", older):
        store = Store(path)
        plan = " ".join(row[-1] for row in store.db.execute(
            "EXPLAIN QUERY PLAN SELECT case_id FROM outcomes WHERE run = ? AND unit = ?", (1, "neg|float32|cpu")))
        assert "USING INDEX outcomes_by_unit" in plan and not plan.startswith("SCAN"), plan
        store.db.close()
    with sqlite3.connect(older) as db:
        assert len(db.execute("SELECT case_id FROM outcomes WHERE run = 1 AND unit = 'neg|float32|cpu'").fetchall()) == 50
