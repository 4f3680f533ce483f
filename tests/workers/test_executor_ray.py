"""``--executor ray``: the local pool's findings, its isolation and its resume, on a local Ray instance.

One Ray instance with two worker CPUs serves the module. The sweep compared is
small and planted twice: ``addcmul_`` drops its writes on some layouts (a
finding to shrink, group and diagnose) and ``neg`` kills its process on a
transposed input (a Ray worker dies mid-unit). It runs once on the local pool
and once on Ray; the two stores must hold the same cases, findings and
groups. Bad input runs in this process through ``cli.main``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import sys

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'torchsleuth[ray]'; the test extra has it)")

from torchsleuth import SweepConfig, resolve_ops, sweep  # noqa: E402
from torchsleuth.cli.main import main  # noqa: E402
from torchsleuth.frame import Silent  # noqa: E402

PLANTS = "torchsleuth.drill.plants"


def planted(**changes) -> SweepConfig:
    """The sweep every executor runs: neg and addcmul, functional and in-place, with both plants."""
    config = SweepConfig(ops=resolve_ops("neg,addcmul"), dtypes=("float32",), variants=("functional", "inplace"),
                         layouts=("contiguous", "transposed", "strided", "offset"), samples=1, workers=2,
                         imports=(f"{PLANTS}.dropped_write", f"{PLANTS}.crash"))
    return dataclasses.replace(config, **changes)

SMALL = ["ops", "--ops", "neg", "--dtypes", "float32", "--samples", "1", "--no-progress", "--no-compile"]


@pytest.fixture(scope="module")
def ray_instance():
    auth = os.environ.get("RAY_AUTH_MODE")  # ray.init sets it for this process; later tests' subprocesses need not inherit it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()
    if auth is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = auth


@pytest.fixture(scope="module")
def swept(ray_instance, tmp_path_factory):
    """The planted sweep on each executor: executor -> (result, database)."""
    folder = tmp_path_factory.mktemp("executors")
    done = {}
    for executor in ("local", "ray"):
        db = folder / f"{executor}.db"
        done[executor] = sweep(planted(executor=executor), db=db), db
    return done


def outcomes(db) -> dict[str, str]:
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute("SELECT case_id, status FROM outcomes WHERE run = 1").fetchall()
        assert not connection.execute("SELECT case_id FROM outcomes GROUP BY run, case_id HAVING COUNT(*) > 1").fetchall()
    finally:
        connection.close()
    return dict(rows)


def node_counts(result) -> int:
    """Cases the Ray note says the nodes did, summed: each outcome a task streamed back, once."""
    note = next(detail for kind, detail in result.notes if kind == "executor")
    assert note.startswith("Ray, a local instance (1 node, 2 CPUs): "), note
    return sum(int(part.split(" case")[0]) for part in note.split(": ", 1)[1].split(", "))


# --- (a) the same findings as the local pool ---------------------------------------------------


@pytest.mark.slow
def test_ray_finds_what_the_local_pool_finds(swept):
    (local, _), (on_ray, _) = swept["local"], swept["ray"]
    assert {f.id for f in local.findings} == {f.id for f in on_ray.findings}
    assert {f.kind for f in on_ray.findings} >= {"dropped_write", "crash"}, [f.summary for f in on_ray.findings]
    assert {g.id: set(g.findings) for g in local.groups} == {g.id: set(g.findings) for g in on_ray.groups}
    assert {g.id: g.diagnosis for g in local.groups} == {g.id: g.diagnosis for g in on_ray.groups}  # shrunk and diagnosed on Ray too
    assert local.statuses == on_ray.statuses and not on_ray.failed_units and not on_ray.flaky


# --- (b) a worker killed mid-unit: nothing lost, nothing counted twice ---------------------------


@pytest.mark.slow
def test_a_worker_killed_mid_unit_costs_one_case_and_nothing_is_lost_or_counted_twice(swept):
    (local, local_db), (on_ray, ray_db) = swept["local"], swept["ray"]
    assert outcomes(ray_db) == outcomes(local_db)  # every case, once, with the same status
    crashes = [f for f in on_ray.findings if f.kind == "crash"]
    assert [(f.op, f.variant, dict(f.layouts)) for f in crashes] == [("neg", "functional", {"input": "transposed"})], crashes
    crash = crashes[0]
    assert crash.call is not None and "the Ray worker on " in crash.detail, crash.detail  # replayed alone, then described
    assert crash.id == next(f.id for f in local.findings if f.kind == "crash")
    # every other outcome came back from a task exactly once: the unit resumed after the crash, not from its start
    assert node_counts(on_ray) == on_ray.cases - len(crashes)
    assert not [note for note in on_ray.notes if note[0] == "collateral"]


@pytest.mark.slow
def test_a_hanging_case_has_its_task_cancelled_and_is_a_hang(ray_instance, tmp_path):
    config = SweepConfig(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed"),
                         samples=1, workers=2, timeout=3.0, imports=(f"{PLANTS}.hang",), shrink=False, executor="ray")
    result = sweep(config, db=tmp_path / "hang.db")
    hangs = [f for f in result.findings if f.kind == "hang"]
    assert [dict(f.layouts) for f in hangs] == [{"input": "transposed"}], [f.summary for f in result.findings]
    assert "no answer after 3 s" in hangs[0].detail and result.statuses.get("pass")


@pytest.mark.slow
def test_what_one_sweeps_imports_register_never_reaches_another_sweeps_tasks(ray_instance, tmp_path):
    # The first sweep imports the plant that kills neg's process on a transposed input, but sweeps only contiguous
    # inputs, so the Ray workers that ran it live on with the plant registered. A sweep without the import, on the
    # same Ray instance, must not run in them: its transposed neg is clean.
    hidden = SweepConfig(ops=resolve_ops("neg,abs,sgn,exp"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                         samples=1, workers=2, imports=(f"{PLANTS}.crash",), shrink=False, executor="ray")
    assert not sweep(hidden, db=tmp_path / "planted.db").findings
    clean = dataclasses.replace(hidden, ops=resolve_ops("neg"), layouts=("contiguous", "transposed"), imports=())
    result = sweep(clean, db=tmp_path / "clean.db")
    assert not result.findings and result.statuses.get("pass") == result.cases, [f.summary for f in result.findings]


class _StopAfter(Silent):
    """A progress that interrupts the sweep after some outcomes, as ^C or a kill of the driver would."""

    def __init__(self, outcomes: int):
        self.left = outcomes

    def outcome(self, outcome) -> None:
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_an_interrupted_ray_sweep_resumes_where_it_stopped(swept, tmp_path):
    config = planted(executor="ray", shrink=False)
    db = tmp_path / "resumed.db"
    with pytest.raises(KeyboardInterrupt):
        sweep(config, db=db, progress=_StopAfter(5))
    assert len(outcomes(db)) >= 5
    resumed = sweep(config, db=db)
    assert resumed.resumed and resumed.run.id == 1
    assert outcomes(db) == outcomes(swept["local"][1])
    assert {f.id for f in resumed.findings} == {f.id for f in swept["local"][0].findings}


@pytest.mark.slow
def test_the_command_line_says_where_the_cases_ran(ray_instance, tmp_path, capsys):
    argv = [*SMALL, "--variants", "functional", "--layouts", "contiguous,transposed", "--search", "none", "--oracles", "none",
            "--no-shrink", "--executor", "ray", "--out", str(tmp_path / "out")]
    assert cli(argv) == 0
    captured = capsys.readouterr()
    assert "running on: Ray, a local instance (1 node, 2 CPUs), at most 2 units at once" in captured.err
    said = " ".join(captured.out.split())
    assert "note (executor): Ray, a local instance (1 node, 2 CPUs): 2 cases on " in said, said


def test_a_cluster_without_what_a_unit_asks_for_is_refused():
    from torchsleuth.errors import UsageError
    from torchsleuth.workers.ray_pool import Cluster

    cluster = Cluster(where="at head:6379", nodes=2, cpus=8, gpus=0)
    assert cluster.capacity("cpu") == 8 and cluster.capacity("cpu", threads=3) == 2
    with pytest.raises(UsageError, match="lacks a GPU a unit on cuda asks for"):
        cluster.capacity("cuda")


def test_where_the_units_run_is_not_part_of_the_run_key():
    local = SweepConfig(ops=("neg",), workers=2)
    assert SweepConfig(ops=("neg",), workers=8, executor="ray", ray_address="head:6379").key() == local.key()


# --- (c) bad input: one line, exit 2, nothing written ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("argv, fragments", [
    (["--executor", "ray", "--ray-address", "127.0.0.1:1"], ["--ray-address 127.0.0.1:1", "nothing answers", "ray start --head"]),
    (["--executor", "ray", "--ray-address", "ray://head:10001"], ["HOST:PORT", "auto"]),
    (["--ray-address", "127.0.0.1:6379"], ["--ray-address", "needs --executor ray"]),
    (["--executor", "ray", "--workers", "0"], ["--workers 0", "--executor ray", "N >= 1"]),
    (["--executor", "rey"], ["--executor", "'rey'", "local", "ray"]),
])
def test_bad_executor_input_is_one_line_and_exit_2(argv, fragments, ray_instance, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli([*SMALL, "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert not out.exists()


@pytest.mark.slow
def test_executor_ray_without_ray_installed_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    out = tmp_path / "out"
    assert cli([*SMALL, "--out", str(out), "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install 'torchsleuth[ray]'" in err, err
    assert not out.exists()


def cli(argv: list[str]) -> int:
    """``torchsleuth ARGV`` in this process: its exit status (argparse's own errors exit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code
