"""torchsleuth shard on spawned gloo ranks: the persistent groups, the merge, the sweep on them, the rerun of what
the simulator cannot judge, and resuming.

The planted rule (``PLANT``) is loaded with ``--import``, since ranks are other processes; it patches DTensor
only in a spawned process, so this test process stays clean (its own DTensor is used by the other tests).
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.judge.records import Mismatch
from torchsleuth.shard import support
from torchsleuth.shard.ranks import Ranks, merge
from torchsleuth.shard.run import Ran
from shard_plants import split_factor_dropped_module

needs_dtensor = pytest.mark.skipif(bool(support.missing()), reason=support.missing() or "")

# DTensor's rule for transpose dropping a _StridedShard's split factor from the placement it claims
# (as test_shard.py's RANK_PLANT), in spawned processes only.
PLANT = split_factor_dropped_module(spawned_only=True)

# In the ranks: rank 1 never answers composite.flatten_sum, and skips softmax alone (rank 0 then waits in a
# collective until the group's collective timeout).
ODD_RANK = """\
import time

import torch.distributed as dist

from torchsleuth.shard import run as running

_original = running.run


def _run(case, world, *, blame=False):
    if dist.get_rank() == 1 and case.op == "composite.flatten_sum":
        time.sleep(600)
    if dist.get_rank() == 1 and case.op == "softmax":
        return running.Ran(status="skip", reason="planted: rank 1 leaves")
    return _original(case, world, blame=blame)


running.run = _run
"""

SMALL = ["--mesh", "2", "--placements", "shard", "--variants", "functional", "--combinations", "2", "--depth", "catalog",
         "--no-progress"]


def _shard(tmp_path, name: str, *arguments: str) -> tuple[int, dict]:
    from torchsleuth.cli.main import main

    out = tmp_path / name
    code = main(["shard", *arguments, *SMALL, "--out", str(out), "--json", str(out / "f.json")])
    return code, json.loads((out / "f.json").read_text())


# --- the merge ----------------------------------------------------------------------------


def test_the_merge_keeps_rank_0s_record_with_every_ranks_values():
    ran = [Ran(status="ran", expected={"out": torch.ones(2)}, actual={"out": [torch.full((2,), float(r))]}, claimed={"out": "S0"})
           for r in range(3)]
    merged = merge(ran)
    assert merged.status == "ran" and merged.claimed == {"out": "S0"} and merged.expected is ran[0].expected
    assert [float(v[0]) for v in merged.actual["out"]] == [0.0, 1.0, 2.0]


def test_the_merge_names_the_rank_that_left_the_others_waiting():
    timeout = Ran(status="raised", reason="RuntimeError: Timed out waiting 30000ms")
    left = Ran(status="skip", reason="DTensor cannot place input")
    merged = merge([timeout, left, timeout], order=[1, 0, 2])
    assert merged.status == "skip" and merged.reason.startswith("rank 1 skip: DTensor cannot place input")
    assert "rank 0 raised" in merged.reason
    # without the order (a torchrun gather), the first rank that did not run the case
    assert merge([Ran(status="ran"), Ran(status="raised", reason="boom")]).reason.startswith("rank 1 raised: boom")
    wrong = Mismatch(path="input", attribute="values", expected="1", actual="2")
    roundtrip = Ran(status="roundtrip", reason="input does not come back", roundtrip=("input", "S0", wrong))
    merged = merge([Ran(status="raised", reason="timed out"), roundtrip])
    assert merged.status == "roundtrip" and merged.roundtrip[2].path == "input@rank1"
    assert merge([Ran(status="ran"), Ran(status="hang", reason="no answer")]).status == "hang"


# --- the persistent group -------------------------------------------------------------------


@pytest.mark.slow
@needs_dtensor
def test_a_case_that_hangs_or_desynchronises_the_group_restarts_it(tmp_path):
    (tmp_path / "odd_rank.py").write_text(ODD_RANK)
    # softmax's rank 0 waits out the collective timeout inside the case, on a fresh group: the case's own limit leaves it
    # 15 s more, for a loaded machine (the suite runs in two processes; 5 s more was too few under load)
    ranks = Ranks(2, imports=(str(tmp_path / "odd_rank.py"),), case_seconds=25, collective_seconds=10)
    clean = Case.parse("composite.flatten_softmax|functional|float32|cpu|s0|input=S0|@shard:2")
    try:
        first = ranks.run(clean)
        assert [r.status for r in first] == ["ran", "ran"] and ranks.starts == 1
        assert merge(ranks.run(clean)).status == "ran" and ranks.starts == 1  # the same group serves the next case
        hung = ranks.run(Case.parse("composite.flatten_sum|functional|float32|cpu|s0|input=S0|@shard:2"))
        assert merge(hung).status == "hang" and "no answer from rank 1 of 2" in merge(hung).reason
        left = ranks.run(Case.parse("softmax|functional|float32|cpu|s0|input=S0|@shard:2"))
        merged = merge(left, order=ranks.order)
        assert merged.status == "skip" and merged.reason.startswith("rank 1 skip: planted: rank 1 leaves"), merged.reason
        assert merge(ranks.run(clean)).status == "ran"
        assert ranks.starts == 3  # restarted after the hang and after the disagreement
    finally:
        ranks.close()
    assert not ranks.processes


# --- the sweep on ranks --------------------------------------------------------------------------


@pytest.mark.slow
@needs_dtensor
def test_without_localtensormode_every_case_runs_on_gloo_ranks_and_the_planted_rule_is_found(tmp_path, monkeypatch, capsys):
    (tmp_path / "plant.py").write_text(PLANT)
    monkeypatch.setattr(support, "simulator", lambda: "torch 2.4.1 has no LocalTensorMode")
    code, found = _shard(tmp_path, "planted", "--ops", "composite.flatten_transpose", "--import", str(tmp_path / "plant.py"))
    assert "torch 2.4.1 has no LocalTensorMode: every case runs on spawned gloo ranks" in capsys.readouterr().out
    assert code == 1 and found["cases"] == 2
    (finding,) = found["findings"]
    assert finding["kind"] == "sharding_mismatch" and finding["op"] == "aten.transpose.int"
    # the blame, rerun on the ranks (for the case as shrunk there, whose split factor may be smaller)
    assert re.search(r"First wrong rule: aten\.transpose\.int\(SS0x\d+\) -> S1", finding["summary"]), finding["summary"]
    code, found = _shard(tmp_path, "clean", "--ops", "composite.flatten_transpose")
    assert code == 0 and found["cases"] == 2 and not found["findings"]


@pytest.mark.slow
@needs_dtensor
def test_backend_gloo_without_torchrun_spawns_its_ranks_and_finds_the_planted_rule(tmp_path):
    (tmp_path / "plant.py").write_text(PLANT)
    code, found = _shard(tmp_path, "out", "--backend", "gloo", "--ops", "composite.flatten_transpose", "--import",
                         str(tmp_path / "plant.py"), "--no-shrink")
    assert code == 1
    (finding,) = found["findings"]
    assert finding["kind"] == "sharding_mismatch" and finding["op"] == "aten.transpose.int"


@pytest.mark.slow
@needs_dtensor
@pytest.mark.skipif(bool(support.simulator()), reason=support.simulator() or "")
def test_a_round_trip_only_the_simulator_fails_is_judged_on_gloo_and_blamed_on_the_simulator(tmp_path, monkeypatch):
    from torchsleuth.store.sqlite import Store

    api = support.dtensor()
    original = api.distribute_tensor

    def doubled_on_dim_1(tensor, mesh, placements, *args, **kwargs):  # this process only: the ranks place right
        placed = original(tensor, mesh, placements, *args, **kwargs)
        return placed * 2 if any(isinstance(p, api.Shard) and p.dim == 1 for p in placements) else placed

    monkeypatch.setattr(api, "distribute_tensor", doubled_on_dim_1)
    code, found = _shard(tmp_path, "out", "--ops", "composite.flatten_transpose", "--workers", "0", "--gloo", "0")
    assert code == 1
    (finding,) = found["findings"]
    assert finding["kind"] == "roundtrip_mismatch" and finding["reference"] == "roundtrip"
    assert "a bug in the simulator, not in DTensor" in finding["summary"]
    assert finding["case_id"] == "composite.flatten_transpose|functional|float32|cpu|s0|input=S1|@shard:2"
    store = Store(tmp_path / "out" / "runs.db")
    try:
        rows = {r[0]: r[1:3] for r in store.outcome_rows(1)}
    finally:
        store.close()
    simulated = rows["composite.flatten_transpose|functional|float32|cpu|s0|input=S1|@shard:2"]
    assert simulated[0] == "skip" and "rerun on real gloo ranks" in simulated[1]
    assert rows["composite.flatten_transpose|functional|float32|cpu|s0|input=S1|@shard-gloo:2"][0] == "pass"  # judged there
    assert len(rows) == 3


@pytest.mark.slow
@needs_dtensor
def test_a_killed_run_on_ranks_resumes_without_running_a_case_twice(tmp_path, monkeypatch):
    from torchsleuth.shard import sweep as shard_sweep
    from torchsleuth.shard.cases import ShardConfig
    from torchsleuth.frame import Silent

    ran: list[str] = []
    real_case = shard_sweep.real_case

    def counted(case, groups):
        ran.append(case.id)
        return real_case(case, groups)

    monkeypatch.setattr(shard_sweep, "real_case", counted)
    config = ShardConfig(backend="gloo", ops=("composite.flatten_softmax", "composite.flatten_sum"), variants=("functional",),
                         meshes=("2",), kinds=("shard",), combinations=2, gloo=0, shrink=False)

    class Interrupt(Silent):
        seen = 0

        def outcome(self, outcome):
            self.seen += 1
            if self.seen == 3:  # the first case of the second unit stored, the rest not run
                raise KeyboardInterrupt

    db = str(tmp_path / "runs.db")
    with pytest.raises(KeyboardInterrupt):
        shard_sweep.sweep(config, db=db, progress=Interrupt())
    assert len(ran) == 3
    resumed = shard_sweep.sweep(config, db=db)
    assert resumed.resumed and resumed.cases == 4 and resumed.statuses == {"pass": 4}
    assert len(ran) == len(set(ran)) == 4  # each case ran once, over the two calls
