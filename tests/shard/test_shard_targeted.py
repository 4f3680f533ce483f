"""The deep shard plan: placements chosen by what the op does, against the seed story's classes of rule bug.

Each plant is a module given to ``--import`` (so that every worker process
has it), rewriting what DTensor's sharding propagation returns for one aten
op, in one situation: the three classes of reduction-rule bug the second seed
story describes. Each is found by ``torchsleuth shard --ops sum,softmax`` with
the defaults (the forward only, and the three in one run, to keep the suite
short: each is found where only it can be), the first wrong rule named; the
same run without the plant is clean.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from torchsleuth.cases.records import Case, Unit
from torchsleuth.shard import cases as shard_cases, support, targeted

from shard_plants import rule_plant

pytestmark = pytest.mark.skipif(bool(support.missing() or support.simulator()), reason=support.missing() or support.simulator())

def _shard(tmp_path, ops: str, modes: tuple[str, ...]) -> dict:
    from torchsleuth.cli.main import main

    argv = ["shard", "--ops", ops, "--variants", "functional", "--gloo", "0", "--no-progress", "--no-shrink",
            "--out", str(tmp_path / "out"), "--json", str(tmp_path / "f.json")]
    if modes:
        (tmp_path / "plant.py").write_text(rule_plant(*modes))
        argv += ["--import", str(tmp_path / "plant.py")]
    code = main(argv)
    data = json.loads((tmp_path / "f.json").read_text())
    assert code == (1 if data["findings"] else 0)
    return data


def test_a_pointed_reduction_plans_every_sharded_and_reduced_dim_pair_and_the_training_placements():
    config = shard_cases.ShardConfig(ops=("sum",), deep=True, variants=("functional",))
    found = [c for part in shard_cases.units(config) for c in shard_cases.plan(part, config)]
    assert len(found) == len(set(found)) == len(shard_cases._plan(Unit(op="sum", dtype="float32", device="cpu"), config))
    pairs = {(dict(c.layouts)["input"], next(e for e in c.edits if e.startswith("arg:dim"))) for c in found
             if c.oracle == "shard:2" and any(e.startswith("arg:dim") for e in c.edits)}
    for sharded in ("S0", "S1", "SS0x2", "SS1x3"):
        for reduced in ("arg:dim=0", "arg:dim=1"):
            assert (sharded, reduced) in pairs
    keepdims = Counter(e for c in found for e in c.edits if e.startswith("arg:keepdim"))
    assert keepdims["arg:keepdim=True"] == keepdims["arg:keepdim=False"] > 0
    on_2d = {dict(c.layouts).get("input") for c in found if c.oracle == "shard:2x2"}
    assert {"SS0x2.S0", "S0.S1", "R.S0", "S0.Psum", "R.Pmax"} <= on_2d
    assert {pl for c in found for _, pl in c.layouts if pl.startswith("P")} >= {"Psum", "Pavg", "Pmax", "Pmin"}
    # uneven shards too: the sample as OpInfo gives it, beside the grown one
    assert any(not c.edits for c in found) and any(c.edits for c in found)


def test_the_catalog_plan_prefers_samples_with_dims_to_shard():
    config = shard_cases.ShardConfig(ops=("sum",), variants=("functional",))
    found = shard_cases.plan(Unit(op="sum", dtype="float32", device="cpu"), config)
    sample = shard_cases.samples_of("sum", "float32")[found[0].sample]
    assert sample.input.dim() >= 2 and any(pl.startswith(("S", "SS")) for c in found for _, pl in c.layouts)


def test_growing_a_sample_keeps_its_coupled_sizes_and_makes_shards_differ():
    from torchsleuth.search import edits

    sample = next(s for s in shard_cases.samples_of("nn.functional.layer_norm", "float32") if s.input.dim() == 3 and s.args[0] == (2, 3))
    grown = edits.apply(sample, targeted.grow(sample))
    assert tuple(grown.input.shape) == (12, 12, 12) and grown.args[0] == (12, 12)
    assert not grown.input[:6].equal(grown.input[6:])  # the two shards of a Shard(0) on 2 ranks differ


def _placement(finding: dict) -> str:
    """The input's placements, as the case spells them (SS0x2.S0: a _StridedShard, then a Shard)."""
    return dict(Case.parse(finding["case_id"]).layouts).get("input", "")


@pytest.mark.slow
def test_each_reduction_rule_bug_of_the_seed_story_is_found_by_a_pointed_run_with_defaults(tmp_path):
    """The three plants in one run over both ops (a pointed run: deep, within its one budget), each found where only it
    can be: the strided ones on a _StridedShard input, the keepdim one on inputs with none."""
    data = _shard(tmp_path, "sum,softmax", ("strided_kept_as_shard", "strided_reduced_dim_not_replicated", "keepdim_partial_claimed_as_shard"))
    assert data["findings"] and {f["kind"] for f in data["findings"]} == {"sharding_mismatch"}
    by_op = {op: [f for f in data["findings"] if f["op"] == op] for op in ("aten.sum.dim_IntList", "aten._softmax.default")}
    assert sum(map(len, by_op.values())) == len(data["findings"]), {f["op"] for f in data["findings"]}
    softmax, sums = by_op["aten._softmax.default"], by_op["aten.sum.dim_IntList"]
    # strided_reduced_dim_not_replicated: softmax over a dim held as _StridedShard
    assert softmax and all("SS" in _placement(f) for f in softmax), {_placement(f) for f in softmax}
    # strided_kept_as_shard: a sum with keepdim=False (the keepdim plant's never are) over a _StridedShard input
    assert [f for f in sums if "SS" in _placement(f) and "arg:keepdim=False" in Case.parse(f["case_id"]).edits]
    # keepdim_partial_claimed_as_shard: a sum over an input with no _StridedShard (the strided plant's all have one)
    kept = [f for f in sums if "SS" not in _placement(f)]
    assert kept and all("arg:keepdim=True" in Case.parse(f["case_id"]).edits for f in kept), [f["case_id"] for f in kept]
    # one rule's bug on every dim and split factor is one group per kind of placement, not one per placement
    for op, found in by_op.items():
        groups = {f["group"] for f in found}
        assert len(groups) <= 8 < len(found), (op, len(groups), len(found))


@pytest.mark.slow
def test_the_same_pointed_run_without_a_plant_is_clean(tmp_path):
    data = _shard(tmp_path, "sum,softmax", ())
    assert data["cases"] > 1000
    assert not [f for f in data["findings"] if f["kind"] == "sharding_mismatch"], data["findings"]
