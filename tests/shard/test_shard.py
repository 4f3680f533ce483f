"""torchsleuth shard: placements, planted sharding rules, the simulator's checks, gloo, the CLI.

The planted rules patch DTensor's sharding propagation for one aten op (the
result's claimed placements are rewritten after the real rule ran), so the
op computes what it always did but claims a placement that does not
describe it: the class of bug in the second seed story.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.shard import placements as placing, support
from shard_plants import no_rule, planted_rule, split_factor_dropped_module

pytestmark = pytest.mark.skipif(bool(support.missing()), reason=support.missing() or "")


def partial_claimed_as_shard(p):
    from torch.distributed.tensor import Partial, Shard

    return Shard(0) if isinstance(p, Partial) else p


def strided_split_factor_dropped(p):
    from torch.distributed.tensor import Shard

    return Shard(p.dim) if isinstance(p, support.strided_shard()) else p


def run(case_id: str):
    from torchsleuth.shard.sweep import run_case

    return run_case(Case.parse(case_id))


# --- placements ------------------------------------------------------------------------


def test_placement_text_round_trips_and_names_each_kind():
    for text in ("R", "S1", "Psum", "Pmax", "SS0x2", "SS1x3.S1", "R.Pavg"):
        assert placing.text(placing.parse(text)) == text
    assert placing.words("SS0x2.S0") == "(_StridedShard(0, sf=2), Shard(0))"


def test_options_cover_every_kind_and_only_even_strided_shards():
    mesh = placing.mesh("2")
    opts = placing.options((8, 5), "float32", mesh)
    assert {"R", "S0", "S1", "Psum", "Pavg", "Pmax", "Pmin", "SS0x2"} <= set(opts)
    assert "SS1x2" not in opts  # 5 rows do not split evenly into 2 x 2: DTensor refuses it
    assert not any(o.startswith("P") for o in placing.options((4,), "bool", mesh))
    assert "Pavg" not in placing.options((4,), "int64", mesh)
    two_d = placing.options((4, 6), "float32", placing.mesh("2x2"))
    assert "Psum.Pmax" not in two_d and "Psum.Psum" in two_d and "SS0x2.S0" in two_d


def test_combinations_name_each_argument_alone_first_and_keep_the_budget():
    arguments = {name: placing.options((4, 4), "float32", placing.mesh("2")) for name in ("input", "other")}
    chosen = placing.combinations(arguments, 6, seed="x")
    assert len(chosen) == 6
    assert [len(c) for c in chosen[:4]] == [1, 1, 1, 1]
    assert {p for c in chosen[:4] for p in c} == {"input", "other"}


def test_bad_mesh_and_placement_kind_are_usage_errors():
    from torchsleuth.errors import UsageError

    with pytest.raises(UsageError, match="not a mesh shape"):
        placing.mesh("2x")
    with pytest.raises(UsageError, match="placement kind"):
        placing.kinds("shard,diagonal")


# --- planted rules ---------------------------------------------------------------------


def test_a_rule_claiming_shard_where_the_result_is_partial_is_found_with_its_op_and_placement():
    case = "composite.flatten_sum_inner|functional|float32|cpu|s0|input=S1|@shard:2"
    assert run(case).status == "pass"
    with planted_rule(torch.ops.aten.sum.dim_IntList, partial_claimed_as_shard):
        outcome = run(case)
    assert outcome.status == "finding"
    (finding,) = outcome.findings
    assert finding.kind == "sharding_mismatch" and finding.reference == "sharding"
    assert finding.op == "aten.sum.dim_IntList"
    assert finding.layouts == (("input", "S1"),)
    assert "claims (Shard(0))" in finding.summary and "(Shard(1))" in finding.summary
    assert run(case).status == "pass"  # the plant is gone with its context


def test_a_rule_dropping_a_strided_shards_split_factor_is_found_with_its_op_and_placement():
    case = "composite.flatten_transpose|functional|float32|cpu|s0|input=S1|@shard:2"
    assert run(case).status == "pass"
    with planted_rule(torch.ops.aten.transpose.int, strided_split_factor_dropped):
        outcome = run(case)
    (finding,) = outcome.findings
    assert finding.kind == "sharding_mismatch" and finding.op == "aten.transpose.int"
    assert finding.layouts == (("input", "S1"),)
    assert "aten.transpose.int(SS0x12) -> S1" in finding.summary  # the rule, with the split factor it dropped
    assert finding.mismatch.mismatched > 0


def test_the_dropped_split_factor_is_found_in_backward_too():
    case = "composite.flatten_transpose|backward|float32|cpu|s0|input=S1.R|@shard:2x2"
    assert run(case).status == "pass"
    with planted_rule(torch.ops.aten.transpose.int, strided_split_factor_dropped):
        outcome = run(case)
    assert outcome.status == "finding" and outcome.findings[0].variant == "backward"


def test_a_missing_rule_is_an_unsupported_skip_never_a_finding():
    case = "softmax|functional|float32|cpu|s0|input=S0|@shard:2"
    with no_rule(torch.ops.aten._softmax.default):
        outcome = run(case)
    assert outcome.status == "skip" and not outcome.findings
    assert outcome.reason.startswith("unsupported: softmax: DTensor has no sharding rule for aten._softmax.default")


def test_clean_ops_stay_clean_on_every_kind_of_placement():
    for case in ("composite.flatten_softmax|functional|float32|cpu|s0|input=SS0x2|@shard:2",
                 "composite.flatten_layer_norm|backward|float32|cpu|s0|input=S1.S0|@shard:2x2",
                 "composite.flatten_sum|functional|float32|cpu|s0|input=Psum|@shard:3",
                 "composite.view_mean|functional|float32|cpu|s1|input=S2|@shard:2",   # uneven: 5 on 2 ranks
                 "composite.flatten_stack|functional|float32|cpu|s0|input=SS0x3.S0|@shard:2x3",
                 "composite.flatten_select|backward|float32|cpu|s0|input=Pmax|@shard:4"):
        outcome = run(case)
        assert outcome.status == "pass", (case, outcome.reason, [f.summary for f in outcome.findings])


def test_partial_shares_of_infinities_and_nans_reduce_back_to_them():
    from torchsleuth.shard import split

    v = torch.tensor([1.5, -float("inf"), float("inf"), float("nan"), -3.0])
    reduce = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "max": lambda s: s.amax(0), "min": lambda s: s.amin(0)}
    for name, back in reduce.items():
        for size in (2, 3):
            got = back(torch.stack([split.share(v, name, i, size) for i in range(size)]))
            assert torch.allclose(got, v, equal_nan=True), (name, size, got)  # inf - inf would make a NaN


def test_an_input_with_infinities_round_trips_through_partial_sum_and_is_judged():
    # _safe_softmax's sample is mostly -inf: its Partial(sum) shares used to sum to NaN (a roundtrip_mismatch)
    outcome = run("torch.ops.aten._safe_softmax.default|backward|float32|cpu|s0|input=Psum|@shard:2")
    assert outcome.status == "pass", (outcome.reason, [f.summary for f in outcome.findings])


def test_a_result_the_simulator_cannot_gather_is_not_blamed_on_the_op():
    # torch 2.13: embedding's _MaskPartial result asks LocalTensorMode's per-rank ints for guard_int, which
    # they lack; on real gloo process groups the same gather is right (bench/shard.md)
    outcome = run("nn.functional.embedding|functional|float32|cpu|s0|input=S0|@shard:2")
    assert not outcome.findings, [f.summary for f in outcome.findings]
    assert outcome.status == "pass" or "simulator limitation" in outcome.reason


@pytest.mark.slow
def test_a_backward_repro_script_runs_and_says_fixed_once_the_rule_is_right(tmp_path):
    from torchsleuth.shard import repro

    with planted_rule(torch.ops.aten.transpose.int, strided_split_factor_dropped):
        outcome = run("composite.flatten_transpose|backward|float32|cpu|s0|input=S1|@shard:2")
    (finding,) = outcome.findings
    script = tmp_path / "r.py"
    script.write_text(repro.script(finding))
    # without the plant: the input requiring grad used to make LocalTensorMode refuse to place it (exit 2)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "fixed (LocalTensorMode)" in done.stdout, done.stdout + done.stderr


# --- the simulator, checked ----------------------------------------------------------------


def test_the_self_check_finds_localtensormode_misplacing_a_plain_tensor_with_strided_shard():
    # torch 2.13's LocalTensorMode gives every rank rank 0's shard (bench/shard.md); the op is never blamed
    outcome = run("composite.distribute_tensor|functional|float32|cpu|s0|input=SS0x2|@shard:2")
    assert outcome.status == "skip" and outcome.reason.startswith("not judged")
    (finding,) = outcome.findings
    assert finding.kind == "roundtrip_mismatch" and finding.op == "distribute_tensor" and finding.reference == "roundtrip"
    # placed from a replicated LocalTensor, as the sweep places every other op's inputs, it round-trips
    assert run("composite.distribute_tensor|functional|float32|cpu|s0|input=S0|@shard:2").status == "pass"


# In the fast tier although it takes seconds: its test of shard.gloo and of shard.ranks' side in this process.
def test_gloo_process_groups_confirm_a_clean_case_and_contradict_the_simulator_where_it_is_wrong():
    from torchsleuth.shard import gloo

    clean = Case.parse("softmax|functional|float32|cpu|s0|input=S1|@shard:2")
    simulator_bug = Case.parse("composite.distribute_tensor|functional|float32|cpu|s0|input=SS0x2|@shard:2")
    outcomes = {o.case.id: o for o in gloo.cross_check([clean, simulator_bug])}
    confirmed = outcomes[gloo.checked(clean).id]
    assert confirmed.status == "pass", confirmed.reason
    wrong = outcomes[gloo.checked(simulator_bug).id]
    assert wrong.status == "finding"
    (finding,) = wrong.findings
    assert finding.kind == "simulator_mismatch" and finding.reference == "gloo"


# --- the command ---------------------------------------------------------------------------


# In the fast tier although it takes seconds: its test of shard.shrink.
def test_cli_finds_the_planted_rule_shrinks_it_and_writes_the_findings_file_and_repro(tmp_path, capsys):
    from torchsleuth.cli.main import main

    out = tmp_path / "out"
    with planted_rule(torch.ops.aten.transpose.int, strided_split_factor_dropped):
        code = main(["shard", "--workers", "0", "--depth", "catalog", "--ops", "composite.flatten_transpose", "--mesh", "2", "--placements", "shard",
                     "--gloo", "0", "--variants", "functional", "--combinations", "2", "--out", str(out), "--json", str(out / "f.json"),
                     "--no-progress"])
    assert code == 1
    data = json.loads((out / "f.json").read_text())
    assert data["command"] == "shard" and data["findings"]
    finding = data["findings"][0]
    assert finding["kind"] == "sharding_mismatch" and finding["op"] == "aten.transpose.int"
    assert finding["args"][0]["layout"] == "S1"
    script = out / finding["repro"]
    text = script.read_text()
    assert "torchrun --nproc-per-node 2" in text and "LocalTensorMode" in text
    # without the plant the repro script, run alone, finds the rule right again
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fixed (LocalTensorMode)" in done.stdout
    capsys.readouterr()
    assert main(["repro", finding["id"], "--db", str(out / "runs.db")]) == 0
    assert "torchrun" in capsys.readouterr().out


def test_cli_a_clean_selection_exits_0(tmp_path):
    from torchsleuth.cli.main import main

    # in a pool of two workers, as the command runs by default
    code = main(["shard", "--workers", "2", "--depth", "catalog", "--ops", "composite.flatten_softmax", "--mesh", "2x2", "--gloo", "0", "--combinations", "3",
                 "--out", str(tmp_path), "--no-progress"])
    assert code == 0


def test_a_killed_run_resumes_without_running_anything_twice(tmp_path):
    """The run frame every command shares: cut off midway through a unit, the same call resumes after its last stored case."""
    from torchsleuth.shard.cases import ShardConfig
    from torchsleuth.shard.sweep import sweep
    from torchsleuth.frame import Silent

    config = ShardConfig(ops=("composite.flatten_softmax", "composite.flatten_sum"), variants=("functional",), meshes=("2",),
                         combinations=3, gloo=0, shrink=False, workers=0)

    class Interrupt(Silent):
        seen = 0

        def outcome(self, outcome):
            self.seen += 1
            if self.seen == 4:  # the first case of the second unit: stored, the rest of the unit not run
                raise KeyboardInterrupt

    class Counting(Silent):
        started, seen = None, ()

        def start(self, *, units, done, resumed):
            self.started = (units, done, resumed)

        def outcome(self, outcome):
            self.seen += (outcome.case.id,)

    db = str(tmp_path / "runs.db")
    with pytest.raises(KeyboardInterrupt):
        sweep(config, db=db, progress=Interrupt())
    progress = Counting()
    resumed = sweep(config, db=db, progress=progress, json=tmp_path / "findings.json")
    whole = sweep(config, db=str(tmp_path / "whole.db"))
    assert resumed.resumed and resumed.run.id == 1 and resumed.run.finished is not None
    assert progress.started == (2, 1, True) and len(set(progress.seen)) == len(progress.seen) == whole.cases - 4
    assert resumed.statuses == whole.statuses and resumed.cases == whole.cases == 6
    assert json.loads((tmp_path / "findings.json").read_text())["cases"] == 6


# What ``--import`` loads in every rank of a torchrun launch: DTensor's rule for transpose,
# dropping a _StridedShard's split factor from the placement it claims (as ``planted_rule`` does).
RANK_PLANT = split_factor_dropped_module()


# In the fast tier although it takes seconds: shard.torchrun runs only in a launch's ranks, and no rank can be this
# process once the simulator has run here (its fake default process group stays: world.Simulated).
def test_torchrun_mode_judges_on_rank_0_which_alone_writes_and_reports(tmp_path):
    from pathlib import Path

    (tmp_path / "rank_plant.py").write_text(RANK_PLANT)
    torchrun = Path(sys.executable).with_name("torchrun")
    # --standalone: the launch's rendezvous on a free port, not torchrun's fixed 29500 (two suites at once, or pytest -n 2)
    done = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "torchsleuth.cli.main", "shard", "--backend", "gloo",
                           "--import", "rank_plant.py", "--depth", "catalog", "--ops", "composite.flatten_transpose", "--mesh", "2", "--placements", "shard",
                           "--variants", "functional", "--combinations", "2", "--depth", "catalog", "--out", "out", "--json", "out/f.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    # rank 0 exits 1 (findings), which torchrun reports as a failed launch
    assert done.returncode != 0 and re.search(r"exitcode\s*:\s*1\b", done.stderr), done.stdout + done.stderr
    assert done.stdout.count("run 1  shard on cpu") == 1, done.stdout  # one summary: rank 0's
    assert "repro scripts: out/repros" in done.stdout and "findings file: out/f.json" in done.stdout
    data = json.loads((tmp_path / "out" / "f.json").read_text())
    assert data["command"] == "shard" and data["cases"] == 2
    (finding,) = data["findings"]
    assert finding["kind"] == "sharding_mismatch" and finding["op"] == "aten.transpose.int"
    assert (tmp_path / "out" / finding["repro"]).is_file()


def test_cli_usage_errors_are_one_line_and_exit_2(tmp_path, capsys):
    from torchsleuth.cli.main import main

    assert main(["shard", "--mesh", "2x", "--out", str(tmp_path)]) == 2
    assert main(["shard", "--placements", "diagonal", "--out", str(tmp_path)]) == 2
    assert main(["shard", "--ops", "sofmax", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "did you mean softmax" in err[2]


def test_a_torch_without_dtensor_is_told_so_in_one_line_and_exits_2(tmp_path, capsys, monkeypatch):
    # (a torch without LocalTensorMode, before 2.10, runs every case on spawned gloo ranks: test_shard_ranks.py)
    import builtins

    from torchsleuth.cli.main import main
    from torchsleuth.shard import support

    real_import = builtins.__import__

    def without_dtensor(name, globals=None, locals=None, fromlist=(), level=0):  # a torch before 2.4
        if name in ("torch.distributed.tensor", "torch.distributed._tensor") or (
                name == "torch.distributed" and {"tensor", "_tensor"} & set(fromlist or ())):
            raise ImportError(f"no {name}")
        return real_import(name, globals, locals, fromlist, level)

    support.missing.cache_clear()
    support.dtensor.cache_clear()
    monkeypatch.setattr(builtins, "__import__", without_dtensor)
    try:
        assert main(["shard", "--out", str(tmp_path / "out")]) == 2
    finally:
        monkeypatch.undo()
        support.missing.cache_clear()
        support.dtensor.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no DTensor" in err[0] and "torch 2.4 or later" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_repro_script_names_an_opinfo_callable_by_name_and_variant_not_by_its_index():
    """An index into op_db differs between torch releases: the script would call another op there."""
    from torchsleuth.cases import opinfo
    from torchsleuth.shard.repro import _opinfo_source

    for op in ("view", "nn.functional.layer_norm"):
        source = _opinfo_source(op)
        assert "op_db[" not in source
        assert eval(source) is opinfo.get(op).op
