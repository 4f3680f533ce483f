"""Naming a stored run on the command line: ``RUN`` for report, diff and repro.

A RUN is one of
  ``7``            run 7 in the --db database;
  ``latest``       the newest run in the --db database;
  ``PATH``         the newest run in the database file PATH;
  ``PATH:7``       run 7 in the database file PATH.
An id or ``latest`` that names nothing, or a path that is no database, is a
usage error that says which runs exist.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ..errors import UsageError
from .sqlite import RunInfo, Store

DEFAULT_DB = "torchsleuth-out/runs.db"

FORMS = "a run id, 'latest', a database file, or FILE:ID"


def open_run(spec: str, db: str | None = None) -> tuple[Store, RunInfo]:
    """The store and run that ``spec`` names (see the module's note). The caller closes the store."""
    path, run_id = _split(spec, db or DEFAULT_DB)
    store = open_store(path)
    try:
        runs = store.runs()
        if not runs:
            raise UsageError(f"{path} holds no runs yet; run `torchsleuth ops --db {path}` first")
        if run_id is None:
            return store, runs[-1]
        for run in runs:
            if run.id == run_id:
                return store, run
        raise UsageError(f"no run {run_id} in {path}; it holds runs {_ids(runs)}")
    except BaseException:
        store.close()
        raise


def open_store(path: str | Path) -> Store:
    """An existing database, never a new empty one (a typo must not look like 'no findings')."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no database at {str(path)!r}; give --db the file a sweep wrote (default {DEFAULT_DB}), "
                         "or sweep first (torchsleuth ops --ops NAME writes it)")
    try:
        # closing(): a connection's own ``with`` only ends a transaction, it does not close
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as probe:
            probe.execute("SELECT id FROM runs LIMIT 1").fetchall()
    except sqlite3.Error:
        raise UsageError(f"{str(path)!r} is not a torchsleuth database") from None
    return Store(path)


def _split(spec: str, db: str) -> tuple[str, int | None]:
    spec = spec.strip()
    if spec == "latest":
        return db, None
    if spec.isdigit():
        return db, int(spec)
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    if sep and tail == "latest":
        return head, None
    if Path(spec).suffix in (".db", ".sqlite") or Path(spec).exists():
        return spec, None
    raise UsageError(f"cannot read {spec!r} as a run: give {FORMS}")


def _ids(runs: list[RunInfo]) -> str:
    ids = [str(r.id) for r in runs]
    return ", ".join(ids) if len(ids) <= 12 else ", ".join(ids[:5]) + ", ..., " + ", ".join(ids[-5:])
