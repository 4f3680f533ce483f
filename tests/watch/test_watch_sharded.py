"""``torchsleuth watch`` on sharded training: the seed story's rule bugs planted into a tensor-parallel MLP and an FSDP2
model, each named by op, placements, module and step on 2 gloo ranks, its repro reporting it; parity; clean runs clean.

Each launch is a few gloo processes (seconds each): the module fixtures run each command once and the tests read
what it wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchsleuth.judge.records import Finding
from torchsleuth.shard import support
from torchsleuth.watch import parity, ranks

from shard_plants import rule_plant

EXAMPLES = Path(__file__).parents[2] / "examples"
needs_dtensor = pytest.mark.skipif(bool(support.missing()), reason=support.missing() or "")


def watch(folder: Path, script: str, *flags: str, plant: tuple[str, ...] = (), torchrun: bool = False,
          nproc: int = 2) -> tuple[subprocess.CompletedProcess, dict]:
    """``torchsleuth watch`` of an example for 2 steps on ``nproc`` ranks (``--nproc``, or under torchrun), and the
    findings file it wrote (with ``folder``, where the file's repro paths start, as its ``"folder"``)."""
    folder.mkdir(parents=True, exist_ok=True)
    if plant:
        (folder / "plant.py").write_text(rule_plant(*plant))
        flags = (*flags, "--import", str(folder / "plant.py"))
    command = ["watch", "--out", str(folder / "out"), "--json", str(folder / "findings.json"), *flags, str(EXAMPLES / script), "2"]
    if torchrun:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m", "torchsleuth", *command]
    else:
        command = [sys.executable, "-m", "torchsleuth", *command[:1], "--nproc", str(nproc), *command[1:]]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    data = json.loads((folder / "findings.json").read_text()) if (folder / "findings.json").exists() else {}
    return done, {**data, "folder": str(folder)}


def by_op(data: dict) -> dict[str, dict]:
    return {f["op"]: f for f in data.get("findings", [])}


@pytest.fixture(scope="module")
def tp_planted(tmp_path_factory):
    """The TP MLP with softmax over a sharded dim not replicated first, and a mean that loses _StridedShard's split."""
    return watch(tmp_path_factory.mktemp("tp"), "train_tp_mlp.py", "--parity",
                 plant=("reduced_dim_not_replicated", "strided_kept_as_shard"))


@pytest.fixture(scope="module")
def fsdp2_planted(tmp_path_factory):
    """The FSDP2 model with sum's rule claiming its partial sums Replicate (the all-reduce forgotten)."""
    return watch(tmp_path_factory.mktemp("fsdp2"), "train_fsdp2.py", "--parity", plant=("partial_claimed_replicated",))


@pytest.fixture(scope="module")
def mesh2d_planted(tmp_path_factory):
    """The 2-D model (FSDP2 over dp, tensor and sequence parallel over tp) on a 2x2 mesh of 4 ranks, with layer_norm's
    backward over the sequence-sharded tokens claiming its weight's and bias's partial sums Replicate, and a row sum of
    the 2-D shards losing _StridedShard's split factor."""
    return watch(tmp_path_factory.mktemp("mesh2d"), "train_2d.py", "--parity", nproc=4,
                 plant=("norm_grads_claimed_replicated", "strided_kept_as_shard"))


@pytest.mark.slow
@needs_dtensor
def test_on_a_2d_mesh_sequence_parallel_and_fsdp2_tp_rule_bugs_are_named_and_their_repros_report_them(mesh2d_planted):
    done, data = mesh2d_planted
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    found = by_op(data)
    assert set(found) == {"aten.native_layer_norm_backward.default", "aten.sum.dim_IntList", "parity"}  # the rest is right
    # sequence parallel: the norm's backward on the tp mesh, named by its module and parameters
    norm = found["aten.native_layer_norm_backward.default"]
    assert "on a 2 mesh (tp) with input (Shard(1)) of shape [2, 4, 8]" in norm["summary"]
    assert "the rule claims out[1] (Replicate), out[2] (Replicate)" in norm["summary"]
    assert "Step 0, in backward (NativeLayerNormBackward0) of norm. Wrong on every rank." in norm["summary"]
    assert "is norm.weight" in norm["detail"] and "is norm.bias" in norm["detail"] and "train_2d.py" in norm["detail"]
    # FSDP2 + TP: a row sum of a weight's 2-D shards, _StridedShard over dp
    rows = found["aten.sum.dim_IntList"]
    assert "on a 2x2 mesh (dp, tp) with input (_StridedShard(0, sf=2), Shard(0)) of shape [16, 8]" in rows["summary"]
    assert "the rule claims out (Shard(0), Shard(0))" in rows["summary"] and "Step 0, outside any module." in rows["summary"]
    assert "Wrong on every rank." in rows["summary"] and "train_2d.py" in rows["detail"]
    # parity: the first step and a parameter whose gradient the norm's rule wrote
    assert re.search(r"on one rank at step 0: the gradient of norm\.(weight|bias) differs", found["parity"]["summary"])
    # the run's time is the ranks' (not the gathering's alone), its counts each rank's
    assert data["seconds"] > 0.1 and " in 0.0 s" not in done.stdout
    assert "DTensor calls judged on each rank" in done.stdout and "2 optimizer steps" in done.stdout
    # the 2-D repro: its 4 ranks simulated under LocalTensorMode, then on 4 gloo processes
    run = subprocess.run([sys.executable, str(Path(data["folder"]) / rows["repro"])], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "BUG PRESENT (LocalTensorMode)" in run.stdout and run.stdout.count("BUG PRESENT (real process groups)") == 4


@pytest.mark.slow
@needs_dtensor
def test_a_softmax_rule_that_skips_the_gather_is_named_with_its_placements_module_and_step(tp_planted):
    done, data = tp_planted
    assert done.returncode == 1, done.stderr[-2000:]
    softmax = by_op(data)["aten._softmax.default"]
    assert softmax["kind"] == "sharding_mismatch" and softmax["reference"] == "sharding"
    summary = softmax["summary"]
    assert "input (Shard(2)) of shape [2, 4, 16]" in summary and "the rule claims out (Shard(2))" in summary
    assert "Step 0, in forward of block." in summary and "Wrong on every rank." in summary
    assert "train_tp_mlp.py" in softmax["detail"] and "in forward" in softmax["detail"]  # the user's stack


@pytest.mark.slow
@needs_dtensor
def test_a_mean_that_loses_the_split_factor_is_named_with_the_strided_placement(tp_planted):
    _, data = tp_planted
    mean = by_op(data)["aten.mean.dim"]
    assert "input (_StridedShard(0, sf=2)) of shape [8, 8]" in mean["summary"]
    assert "the rule claims out (Shard(0))" in mean["summary"] and "Step 0, outside any module." in mean["summary"]
    assert set(by_op(data)) == {"aten._softmax.default", "aten.mean.dim", "parity"}  # nothing else: the rest is right


@pytest.mark.slow
@needs_dtensor
def test_the_repro_reports_the_planted_softmax_simulated_and_on_gloo_ranks(tp_planted):
    _, data = tp_planted
    softmax = by_op(data)["aten._softmax.default"]
    script = Path(data["folder"]) / softmax["repro"]
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "BUG PRESENT (LocalTensorMode)" in run.stdout and "BUG PRESENT (real process groups)" in run.stdout


@pytest.mark.slow
@needs_dtensor
def test_parity_names_the_first_step_and_parameter_where_the_tp_run_parts(tp_planted):
    _, data = tp_planted
    found = by_op(data)["parity"]
    assert found["kind"] == "parity_mismatch"
    assert "parts from the same script on one rank at step 0: the gradient of block." in found["summary"]
    # its script runs the two watched runs again (the shadow replay off) and reports them parting
    run = subprocess.run([sys.executable, str(Path(data["folder"]) / found["repro"])], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "BUG PRESENT: the run on 2 ranks parts from the run on one" in run.stdout and "at step 0" in run.stdout


@pytest.mark.slow
@needs_dtensor
def test_an_fsdp2_reduction_claimed_replicated_is_named_and_parity_sees_the_loss_part(fsdp2_planted):
    done, data = fsdp2_planted
    assert done.returncode == 1, done.stderr[-2000:]
    found = by_op(data)
    sums = {f["summary"].split(" of shape ")[1].split(":")[0]: f for f in data["findings"] if f["op"] == "aten.sum.default"}
    assert set(sums) == {"[16, 8]", "[16]", "[4, 16]", "[4]"}  # each parameter's sum of squares: a distinct call each
    summed = sums["[16, 8]"]
    assert "input (Shard(0))" in summed["summary"] and "the rule claims out (Replicate)" in summed["summary"]
    assert "Step 0, outside any module." in summed["summary"] and "train_fsdp2.py" in summed["detail"]
    assert "at step 0: " in found["parity"]["summary"] and "the loss is" in found["parity"]["summary"]
    assert {f["kind"] for f in data["findings"]} == {"sharding_mismatch", "parity_mismatch"}  # no invariant broken


@pytest.mark.slow
@needs_dtensor
def test_unplanted_runs_are_clean_under_torchrun_and_with_parity(tmp_path):
    # (the TP MLP's unplanted calls are shown clean by its planted run, whose findings are its two plants' and parity's
    # alone; its model's parallel styles are the 2-D model's tp half, launched clean here)
    done, data = watch(tmp_path / "fsdp2", "train_fsdp2.py", torchrun=True)
    assert done.returncode == 0 and data["findings"] == [], done.stdout[-3000:] + done.stderr[-3000:]
    done, data = watch(tmp_path / "mesh2d", "train_2d.py", "--parity", nproc=4)  # FSDP2 + TP + SP on a 2x2 mesh
    assert done.returncode == 0 and data["findings"] == [], done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 ranks; 2 optimizer steps" in done.stdout and "DTensor calls judged" in done.stdout and "compared with the" in done.stdout
    assert "redistributing from" not in done.stderr  # torchsleuth's own gathers make no noise of DTensor's


# --- the gatherer's own logic, without ranks ------------------------------------------------------


def _finding(id_: str, kind: str = "sharding_mismatch") -> dict:
    from torchsleuth import codec

    return codec.encode(Finding(id=id_, kind=kind, op="aten.sum.default", opinfo="sum", variant="functional", dtype="float32",
                                device="cpu", reference="sharding", case_id="aten.sum.default|functional|float32|cpu|s0|input=S0",
                                layouts=(("input", "S0"),), summary="wrong.", data=json.dumps({"ranks": [0]})))


def test_findings_of_several_ranks_are_merged_naming_the_ranks_that_made_them():
    posts = [{"findings": [_finding("f-a"), _finding("f-b")]}, {"findings": [_finding("f-a")]}, None]
    merged = {f.id: f for f in ranks.merged(posts, 3)}
    assert merged["f-a"].summary == "wrong. Wrong on ranks 0, 1 of 3." and json.loads(merged["f-a"].data)["ranks"] == [0, 1]
    assert merged["f-b"].summary == "wrong. Wrong on rank 0 of 3."


class _Notes:
    def __init__(self):
        self.notes = []

    def note(self, kind, detail):
        self.notes.append((kind, detail))


def test_the_gathered_counts_are_each_rank_s_dtensor_calls_and_every_rank_s_plain_calls():
    posts = [{"steps": 3, "judged": 10, "dtensor_judged": 50, "findings": [], "status": 0},
             {"steps": 3, "judged": 12, "dtensor_judged": 50, "findings": [], "status": 0}, None]
    frame = _Notes()
    ranks.record(frame, posts, [0, 0, 1], 3)
    watch_note = next(d for k, d in frame.notes if k == "watch")
    assert watch_note.startswith("3 ranks; 3 optimizer steps; 50 DTensor calls judged on each rank")
    assert "22 plain op calls judged" in watch_note and "1 rank(s) posted nothing" in watch_note
    assert ("ranks", "rank 2 posted nothing (it exited with status 1)") in frame.notes
    assert ranks.checked(posts) == 3 + 10 + 50 + 3 + 12 + 50
    assert ranks.checked([None, {"steps": 0, "judged": 0, "dtensor_judged": 0}]) == 0  # nothing checked: exit 4, not 0
    assert ranks.device(posts) == "cpu" and ranks.device([None, {"device": "cuda"}]) == "cuda"  # the run's header


def test_parity_finds_the_first_step_and_parameter_beyond_the_reduction_order():
    def run(*grads, losses):
        return {"losses": list(losses), "grads": [parity._blob(g) for g in grads]}

    w = torch.linspace(-1, 1, 64)
    one = run({"a.weight": w, "b.weight": w}, {"a.weight": w, "b.weight": w}, losses=(1.0, 0.5))
    rounding = w * (1 + 8 * torch.finfo(torch.float32).eps)  # a reduction order's worth: not a parting
    assert parity.compare(one, run({"a.weight": rounding, "b.weight": w}, {"a.weight": w, "b.weight": w}, losses=(1.0, 0.5)), 2, "p") is None
    apart = run({"a.weight": rounding, "b.weight": w}, {"a.weight": w, "b.weight": w + 1e-2}, losses=(1.0, 0.5))
    found = parity.compare(one, apart, 2, "p")
    assert found.kind == "parity_mismatch" and found.mismatch.path == "b.weight" and "at step 1: the gradient of b.weight" in found.summary
    loss_only = parity.compare(one, run({"a.weight": w, "b.weight": w}, {"a.weight": w, "b.weight": w}, losses=(1.1, 0.5)), 2, "p")
    assert loss_only.mismatch.path == "loss" and "at step 0: the loss differs" in loss_only.summary


def test_parity_without_nproc_and_a_rank_without_a_launcher_store_are_usage_errors(tmp_path, monkeypatch, capsys):
    from torchsleuth.cli.main import main

    script = tmp_path / "train.py"
    script.write_text("")
    assert main(["watch", "--parity", str(script)]) == 2
    assert "give --nproc N as well" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    assert main(["watch", str(script)]) == 2
    assert "torchrun --nproc-per-node N -m torchsleuth watch" in capsys.readouterr().err


@pytest.mark.slow
@needs_dtensor
def test_the_invariants_read_a_dtensor_parameter_s_own_shard(tmp_path):
    # a gloo group of one rank in this process: a frozen DTensor parameter is named, a moving one is not
    import torch.distributed as dist

    api = support.dtensor()
    if dist.is_initialized():  # the fake group a simulated mesh keeps (shard.world), from another test of this process
        from torchsleuth.shard import world

        dist.destroy_process_group()
        world.Simulated._meshes.clear()  # its meshes were of that group: the next simulated mesh makes its own
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        mesh = api.DeviceMesh("cpu", [0])
        frozen = torch.nn.Parameter(api.distribute_tensor(torch.randn(16, 8), mesh, [api.Shard(0)]))
        moving = torch.nn.Parameter(api.distribute_tensor(torch.randn(16, 8), mesh, [api.Shard(0)]))

        class Sgd(torch.optim.SGD):
            @torch.no_grad()
            def step(self, closure=None):
                moving.add_(moving.grad, alpha=-0.1)  # the frozen one's write dropped

        optimizer = Sgd([frozen, moving], lr=0.1)
        from torchsleuth import watch as watching

        with watching(invariants_only=True) as w:
            for _ in range(2):
                for p in (frozen, moving):
                    p.grad = api.distribute_tensor(torch.randn(16, 8), mesh, [api.Shard(0)])
                optimizer.step()
        found = [(f.mismatch.attribute, f.summary) for f in w.findings]
    finally:
        dist.destroy_process_group()
    assert [a for a, _ in found] == ["frozen"] and "shape [16, 8]" in found[0][1], found
