"""NVIDIA MPS: a sweep's workers make ordinary CUDA contexts, never an MPS server's, whose clients all lose their work
when one of them faults (devices.outside_mps). Here an MPS server is a pipe directory with a ``control`` entry, as the
CUDA driver finds one; on an H200 the same was checked with a real server (bench/cuda-sweep.md)."""

from __future__ import annotations

import os

from torchsleuth import devices
from torchsleuth.config import SweepConfig
from torchsleuth.judge.plugin import BUILTIN
from torchsleuth.workers.records import Callbacks, Settings, Work
from torchsleuth.workers.pool import Pool
from torchsleuth.sweep import _pool


def _work(unit, config, skip, only):
    for case in unit[1]:
        if case in skip or (only is not None and case != only):
            continue
        yield "begin", case
        with open(config, "a") as f:
            f.write(f"{os.getpid()} {case} {os.environ.get(devices.MPS_PIPE)}\n")
        if case == "die":
            os._exit(7)
        yield "outcome", case


def _describe(unit, config, case_id):
    return f"the call of {case_id}"


def _server(tmp_path, monkeypatch) -> str:
    pipe = tmp_path / "mps"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv(devices.MPS_PIPE, str(pipe))
    return str(pipe)


def test_under_an_mps_server_every_worker_and_every_replacement_runs_outside_it(tmp_path, monkeypatch):
    pipe = _server(tmp_path, monkeypatch)
    asked = []
    outside = devices.outside_mps("cuda", works=lambda environment: asked.append(environment) or True)
    assert asked == [outside] and outside[devices.MPS_PIPE] != pipe and not os.path.exists(os.path.join(outside[devices.MPS_PIPE], "control"))
    log = tmp_path / "log"
    pool = Pool(Work(run=_work, describe=_describe, config=str(log)), Settings(workers=2, timeout=30, spares=1, environ=outside))
    failed, outcomes = [], []
    pool.run([("one", ["a", "die", "b"]), ("two", ["c"])], Callbacks(
        skip_for=lambda unit: set(), on_outcome=lambda unit, outcome: outcomes.append(outcome),
        on_failed=lambda unit, case_id, kind, how, call: failed.append(case_id), on_collateral=lambda unit, case_id, how: None,
        on_unit_done=lambda unit, state, detail: None))
    pool.close()
    lines = [line.split() for line in log.read_text().splitlines()]
    assert sorted(outcomes) == ["a", "b", "c"] and failed == ["die"]
    assert len({pid for pid, _, _ in lines}) >= 3  # the first two workers, the replay's and the rest's
    assert {where for _, _, where in lines} == {outside[devices.MPS_PIPE]}  # every one of them outside the server
    assert os.environ[devices.MPS_PIPE] == pipe  # the parent's own environment is as it was
    assert "outside the NVIDIA MPS server" in pool.where()


def test_without_a_server_or_off_cuda_nothing_changes_and_where_the_gpu_refuses_ordinary_contexts_the_workers_cannot_leave(tmp_path, monkeypatch):
    never = lambda environment: (_ for _ in ()).throw(AssertionError("asked the GPU where no server runs"))  # noqa: E731
    monkeypatch.setenv(devices.MPS_PIPE, str(tmp_path / "nothing-here"))
    assert devices.mps_pipe() is None and devices.outside_mps("cuda", works=never) == {}
    pipe = _server(tmp_path, monkeypatch)
    assert devices.mps_pipe() == pipe
    assert devices.outside_mps("cpu", works=never) == {} and devices.outside_mps("mps", works=never) == {}
    assert devices.outside_mps("cuda:1", works=lambda environment: False) is None  # exclusive-process: only the server's context


def test_a_sweep_whose_workers_cannot_leave_an_mps_server_runs_one_worker_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "outside_mps", lambda device, **_: None)
    pool = _pool(SweepConfig(device="cpu", workers=4), tmp_path / "runs.db", BUILTIN)
    try:
        assert pool.workers == 1 and "MPS server holds it exclusively" in pool.where()
    finally:
        pool.close()
    monkeypatch.setattr(devices, "outside_mps", lambda device, **_: {})
    pool = _pool(SweepConfig(device="cpu", workers=4), tmp_path / "runs.db", BUILTIN)
    assert pool.workers == 4 and "MPS" not in pool.where()
