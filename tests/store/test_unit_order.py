"""The order a sweep hands units to its pool: the costliest first, by the store's earlier runs; off the CPU, units that
hung last.

Which unit went first is read back from the store: a unit is marked running when the pool takes it, so with one
worker the ``units`` table's row order is the order they were handed out in.
"""

from __future__ import annotations

import sqlite3

import pytest

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.cases.records import Unit
from torchsleuth.store import costs

PLANTS = "torchsleuth.drill.plants"


def planted(**changes) -> SweepConfig:
    """abs, then neg, one worker; neg kills its worker on a transposed input."""
    spec = dict(ops=resolve_ops("abs,neg"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed"),
                samples=1, workers=1, imports=(f"{PLANTS}.crash",)) | changes
    return SweepConfig(**spec)


def handed_out(db, run: int) -> list[str]:
    return [unit for (unit,) in sqlite3.connect(db).execute("SELECT unit FROM units WHERE run = ? ORDER BY rowid", (run,))]


def test_a_unit_that_crashed_before_goes_first_the_next_time(tmp_path):
    db = tmp_path / "runs.db"
    first = sweep(planted(), db=db)
    assert [f.kind for f in first.findings] == ["crash"]
    assert handed_out(db, first.run.id) == ["abs|float32|cpu", "neg|float32|cpu"]  # no history: their own order
    found, hung = costs.of_store(sqlite3.connect(db), "cpu")
    assert found["neg|float32"] >= costs.CRASH_SECONDS > found["abs|float32"] and not hung

    second = sweep(planted(layouts=("contiguous", "transposed", "strided")), db=db)  # another run in the same store
    assert second.run.id != first.run.id
    assert handed_out(db, second.run.id) == ["neg|float32|cpu", "abs|float32|cpu"]
    assert [f.kind for f in second.findings] == ["crash"]  # the same finding: only the order changed


@pytest.mark.slow
def test_off_the_cpu_a_unit_that_hung_goes_last_and_on_the_cpu_first(tmp_path):
    db = tmp_path / "runs.db"
    hung = sweep(planted(imports=(f"{PLANTS}.hang",), timeout=3.0), db=db)
    assert [f.kind for f in hung.findings] == ["hang"]
    found, which = costs.of_store(sqlite3.connect(db), "cpu")
    assert which == {"neg|float32"} and found["neg|float32"] >= costs.HANG_TIMEOUTS * 3.0 > found["abs|float32"]
    # on the CPU a hang holds one core: the costliest first, the unknown (zeta) as a typical unit, the cheap abs last
    units = [Unit(op=op, dtype="float32", device="cpu") for op in ("abs", "zeta", "neg")]
    assert [u.op for u in costs.order(units, sqlite3.connect(db), "cpu")] == ["neg", "zeta", "abs"]
    # the same history on a GPU, which time-slices between processes: a hanging kernel slows every worker, so last
    gpu = tmp_path / "gpu.db"
    gpu.write_bytes(db.read_bytes())
    with sqlite3.connect(gpu) as store:
        store.execute("UPDATE runs SET device = 'cuda'")
    units = [Unit(op=op, dtype="float32", device="cuda:0") for op in ("neg", "abs", "zeta")]
    assert [u.op for u in costs.order(units, sqlite3.connect(gpu), "cuda:0")] == ["zeta", "abs", "neg"]
    assert [u.op for u in costs.order(units, sqlite3.connect(db), "cuda:0")] == ["neg", "abs", "zeta"]  # no GPU run: as given


def test_units_of_unknown_or_equal_cost_keep_their_order():
    units = [Unit(op=op, dtype="float32", device="cuda") for op in ("a", "b", "c", "d", "e")]
    order = costs.longest_first(units, {"d|float32": 50.0, "b|float32": 7.0, "e|float32": 0.1})
    assert [u.op for u in order] == ["d", "b", "a", "c", "e"]


def test_costs_are_read_from_the_latest_runs_only():
    # a store that kept every sweep: only the latest few runs on the device's kind are read (each takes a while)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, command TEXT, device TEXT, config TEXT)")
    db.execute("CREATE TABLE outcomes (run INTEGER, unit TEXT, seconds REAL)")
    db.execute("CREATE TABLE findings (run INTEGER, case_id TEXT, kind TEXT)")
    for run in range(1, costs.LATEST_RUNS + 2):
        db.execute("INSERT INTO runs VALUES (?, 'ops', 'cpu', '{}')", (run,))
        db.execute("INSERT INTO outcomes VALUES (?, 'abs|float32|cpu', ?)", (run, float(run)))
    db.execute("INSERT INTO runs VALUES (99, 'ops', 'cuda', '{}')")  # another kind of device: not read for the CPU
    db.execute("INSERT INTO outcomes VALUES (99, 'sum|float32|cuda:0', 5.0)")
    db.execute("INSERT INTO outcomes VALUES (1, 'neg|float32|cpu', 9.0)")  # only in the oldest run, past the latest few
    found, hung = costs.of_store(db, "cpu")
    assert found == {"abs|float32": float(costs.LATEST_RUNS + 1)} and not hung
    assert costs.of_store(db, "cuda:0")[0] == {"sum|float32": 5.0}
