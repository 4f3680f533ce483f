"""torchsleuth shard's surface chains: in place, in-place views, Python scalars, numbers, factories, randomness.

Each class gets a planted bug found through the command (``--ops surface.NAME``),
and its unplanted cases judged clean; where torch 2.13's DTensor itself is
wrong, the case is asserted found, with the verdict in bench/shard.md
("DTensor surface").
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys

import pytest
import torch

from torchsleuth.cases.records import Case
from torchsleuth.shard import randomness, support, surface
from shard_plants import planted_rule, scalars_read_replicated

pytestmark = pytest.mark.skipif(bool(support.missing()), reason=support.missing() or "")


def run(case_id: str):
    from torchsleuth.shard.sweep import run_case

    return run_case(Case.parse(case_id))


def partial_claimed_as_shard(p):
    from torch.distributed.tensor import Partial, Shard

    return Shard(0) if isinstance(p, Partial) else p


def replicate_claimed_as_partial(p):
    from torch.distributed.tensor import Partial, Replicate

    return Partial("sum") if isinstance(p, Replicate) else p


def shard_dim_swapped(p):
    from torch.distributed.tensor import Shard

    return Shard(1 - p.dim) if type(p) is Shard else p


def shard(tmp_path, op: str, *extra: str) -> tuple[int, list[dict]]:
    """``torchsleuth shard --ops op`` on a 2-rank mesh, in this process; its exit status and findings."""
    from torchsleuth.cli.main import main

    out = tmp_path / "out"
    code = main(["shard", "--ops", op, "--mesh", "2", "--depth", "catalog", "--workers", "0", "--gloo", "0", "--no-shrink",
                 "--no-progress", "--out", str(out), "--json", str(out / "f.json"), *extra])
    return code, json.loads((out / "f.json").read_text())["findings"]


# --- the catalog ---------------------------------------------------------------------------


def test_every_chain_has_a_kind_samples_and_the_variants_it_can_judge():
    from torchsleuth.shard import cases

    assert set(surface.names()) <= set(cases.all_ops())
    for op in surface.names():
        samples = surface.samples(op, "float32")
        assert [tuple(s.input.shape) for s in samples] == [(12, 12), (5, 7)]
        assert cases.variants_of(op) == (("functional", "backward") if surface.kind(op) == surface.NUMBER else ("functional",))
        assert surface.source(op).startswith("lambda")
    masked = surface.samples("surface.masked_fill_", "float16")[0]
    assert masked.args[0].dtype == torch.bool and masked.input.dtype == torch.float16
    assert surface.samples("surface.uniform_", "float32")[0].input.isnan().all()  # an unwritten element stays NaN
    assert {n for n in surface.CHAINS if surface.kind(surface.PREFIX + n) == surface.RANDOM} == set(randomness.CHAINS)
    assert all(law in randomness.LAWS for chain in randomness.CHAINS for law, _ in randomness.draws(chain))


def test_the_functions_called_are_the_chains_source_on_plain_tensors():
    for op in surface.names():
        sample = surface.samples(op, "float64")[0]
        args = (sample.input, *sample.args)
        chain = eval(surface.source(op), {"torch": torch})
        got = surface.function(op)(*args)
        want = chain(*(a.clone() for a in args))
        if surface.kind(op) == surface.SCALAR:  # the number as read (run.py judges it as a 0-d tensor)
            assert type(got) is type(want) and got == want, op
            continue
        if surface.kind(op) not in (surface.RANDOM,) and op != "surface.empty_like":
            torch.testing.assert_close(got, want, equal_nan=True, msg=op)
    assert not surface.samples("surface.mul_", "float64")[0].input.isnan().any()  # the sample was not mutated


# --- each class: a planted bug found, the unplanted cases clean ---------------------------------


def test_in_place_a_rule_claiming_shard_for_a_partial_result_is_found(tmp_path):
    assert run("surface.mul_|functional|float32|cpu|s0|input=Psum|@shard:2").status == "pass"
    with planted_rule(torch.ops.aten.mul_.Tensor, partial_claimed_as_shard):
        code, findings = shard(tmp_path, "surface.mul_", "--placements", "partial", "--combinations", "2")
    assert code == 1 and findings
    finding = findings[0]
    assert finding["op"] == "aten.mul_.Tensor" and finding["args"][0]["layout"] in ("Psum", "Pavg")
    assert "surface.mul_" in finding["summary"] and "Partial" in finding["summary"]


def test_in_place_view_a_squeeze_that_misnames_the_sharded_dim_is_found(tmp_path):
    # Shard(2) -> Shard(1): the placements change, so DTensor updates the spec (Shard(0) keeps it stale: a real
    # torch 2.13 bug, test_shard_numbers_specs.py)
    case = "surface.squeeze_dim_|functional|float32|cpu|s0|input=S1|@shard:2"
    assert run(case).status == "pass"
    with planted_rule(torch.ops.aten.squeeze_.dim, shard_dim_swapped):
        assert run(case).status == "finding"
        code, findings = shard(tmp_path, "surface.squeeze_dim_", "--placements", "shard", "--combinations", "2")
    assert code == 1 and findings
    # an in-place op is not rerun on its own (its input is gone): the chain is named, the trace shows the claim
    # (or, where its spec went stale, the in-place op itself: run.spec_words)
    for finding in findings:
        assert finding["op"] in ("surface.squeeze_dim_", "aten.squeeze_.dim") and finding["args"][0]["layout"] in ("S0", "S1")
        assert re.search(r"aten\.squeeze_\.dim\(S(\d)\) -> S(?!\1)", finding["detail"]), finding["detail"]


def test_numbers_a_rule_claiming_partial_for_x_plus_a_number_is_found(tmp_path):
    for case in ("surface.add_number|functional|float32|cpu|s0|input=Psum|@shard:2",
                 "surface.add_number|backward|float32|cpu|s1|input=S1|@shard:2"):
        assert run(case).status == "pass", case
    with planted_rule(torch.ops.aten.add.Tensor, replicate_claimed_as_partial):
        code, findings = shard(tmp_path, "surface.add_number", "--placements", "partial", "--combinations", "1",
                               "--variants", "functional")
    assert code == 1
    (finding,) = findings
    assert finding["op"] == "aten.add.Tensor" and finding["args"][0]["layout"].startswith("P")
    assert "claims (Partial(sum))" in finding["summary"]


def test_like_a_factory_claiming_partial_sum_for_ones_is_found(tmp_path):
    assert run("surface.ones_like|functional|float32|cpu|s0|input=Pmax|@shard:2").status == "pass"
    with planted_rule(torch.ops.aten.ones_like.default, replicate_claimed_as_partial):
        code, findings = shard(tmp_path, "surface.ones_like", "--placements", "partial", "--combinations", "2")
    assert code == 1 and {f["op"] for f in findings} == {"aten.ones_like.default"}


def test_scalars_read_from_a_partial_dtensor_are_each_ranks_share_and_a_replicated_read_is_clean(tmp_path):
    # torch 2.13 special-cases _local_scalar_dense out of sharding propagation: item()/float()/bool() of a
    # Partial DTensor read each rank's own share (bench/shard.md). LocalTensorMode would raise; the chain
    # judges every rank's number instead.
    cases = ("surface.item_sum|functional|float32|cpu|s0|input=S1|@shard:2",
             "surface.float_sum|functional|float32|cpu|s0|input=Psum|@shard:2",
             "surface.bool_any|functional|float32|cpu|s0|input=S1.S0|@shard:2x2",
             "surface.item_index|functional|float32|cpu|s0|input=Pmax|@shard:2")
    for case in cases:
        outcome = run(case)
        assert outcome.status == "finding", (case, outcome.reason)
    assert "surface.item_sum" in run(cases[0]).findings[0].summary and "each rank returns its own share" in run(cases[0]).findings[0].summary
    with scalars_read_replicated():  # the fix: the value reduced before it is read
        for case in cases:
            assert run(case).status == "pass", case
        code, findings = shard(tmp_path, "surface.item_sum,surface.int_argmax", "--combinations", "4")
    assert code == 0 and not findings


@contextlib.contextmanager
def uniform_written_on_rank_0_only():
    """DTensor's ``uniform_`` writing rank 0's shard only: the other ranks' writes dropped."""
    from torch.distributed._local_tensor import enabled_local_tensor_mode
    from torch.distributed.tensor import DTensor

    def handler(op_call, args, kwargs):
        local = args[0]._local_tensor
        with enabled_local_tensor_mode().disable():
            local._local_tensors[0].uniform_(*args[1:], **kwargs)
        return args[0]

    handlers = DTensor._op_dispatcher._custom_op_handlers
    handlers[torch.ops.aten.uniform_.default] = handler
    try:
        yield
    finally:
        handlers.pop(torch.ops.aten.uniform_.default)


def test_random_a_draw_that_leaves_shards_unwritten_is_found_and_the_promise_holds_otherwise(tmp_path):
    for case in ("surface.uniform_|functional|float32|cpu|s0|input=S0|@shard:2",
                 "surface.dropout|functional|float32|cpu|s1|input=S1.S0|@shard:2x2",
                 "surface.bernoulli_|functional|bfloat16|cpu|s0|input=SS0x2|@shard:2",
                 "surface.randn_like|functional|float32|cpu|s0|input=Pmax|@shard:2",
                 # a draw on a replicated tensor is the plain op's, bitwise
                 "surface.rand_like_then_uniform_|functional|float32|cpu|s0|input=S0|@shard:2"):
        outcome = run(case)
        assert outcome.status == "pass", (case, outcome.reason, [f.summary for f in outcome.findings])
    with uniform_written_on_rank_0_only():
        code, findings = shard(tmp_path, "surface.uniform_", "--placements", "shard", "--combinations", "2")
    assert code == 1 and findings
    finding = findings[0]
    assert finding["op"] == "aten.uniform_.default" and finding["args"][0]["layout"] in ("S0", "S1")
    assert "distribution: expected every value in [0, 1)" in finding["summary"] and "nan" in finding["summary"]


def test_random_on_a_cpu_mesh_an_uneven_draw_leaves_the_ranks_generators_apart():
    # no RNG tracker on a CPU mesh: each rank's generator moves on by its own shard's numel, so the next
    # draw on a replicated tensor differs by rank under a Replicate claim (bench/shard.md); even shards keep step
    outcome = run("surface.uniform_then_rand_like|functional|float32|cpu|s1|input=S0|@shard:2")
    (finding,) = outcome.findings
    assert finding.mismatch.attribute == "replicas" and finding.mismatch.path == "out[1]"
    assert "claims (Replicate)" in finding.summary
    assert run("surface.uniform_then_rand_like|functional|float32|cpu|s0|input=S0|@shard:2").status == "pass"


# --- torch 2.13 as it is: clean where DTensor is right, found where it is not -----------------------


CLEAN = (
    "surface.add_|functional|float32|cpu|s0|args[0]=S1|@shard:2",
    "surface.copy_|functional|float32|cpu|s1|args[0]=S0,input=S1|@shard:2",
    "surface.masked_fill_|functional|float32|cpu|s0|args[0]=S0.S1|@shard:2x2",
    "surface.zero_|functional|float32|cpu|s0|input=Psum|@shard:2",
    "surface.neg_|functional|float32|cpu|s1|input=S1|@shard:3",
    "surface.view_mul_both|functional|float32|cpu|s0|input=S1|@shard:2",
    "surface.squeeze_|functional|float32|cpu|s1|input=S0|@shard:2",
    "surface.int_argmax|functional|float32|cpu|s0|input=S0.S1|@shard:2x2",
    "surface.div_0d_dtensor|backward|float32|cpu|s1|input=S0|@shard:2",
    "surface.sub_mean|functional|float32|cpu|s0|input=SS0x2.S0|@shard:2x2",
    "surface.sum_add_number|functional|float32|cpu|s0|input=S0|@shard:3",
    "surface.mul_0d|backward|float32|cpu|s0|input=Pavg|@shard:2",
    "surface.where_number|backward|bfloat16|cpu|s1|input=S1|@shard:2",
    "surface.in_range|functional|float32|cpu|s0|input=Pmin|@shard:2",
    "surface.empty_like|functional|float32|cpu|s0|input=S1|@shard:2",
    "surface.full_like|functional|float32|cpu|s0|input=Psum|@shard:2",
    "surface.new_full|functional|float32|cpu|s0|input=S0|@shard:2",
)
# real DTensor bugs in torch 2.13 (bench/shard.md, "DTensor surface"): the class each stands for
KNOWN = (
    "surface.fill_|functional|float32|cpu|s0|input=Psum|@shard:2",  # fill_ keeps Partial(sum): n times the value
    "surface.view_mul_|functional|float32|cpu|s0|input=S0|@shard:2",  # x[1:] of a Shard(0) is a copy: x not written
    "surface.column_fill_both|functional|float32|cpu|s0|input=S1|@shard:2",  # x[:, 1] of a Shard(1) likewise
    "surface.new_ones_shape|functional|float32|cpu|s0|input=Psum.S0|@shard:2x2",  # new_ones claims Partial(sum)
    "surface.mul_amax|backward|float32|cpu|s1|input=S0|@shard:2",  # sum(dim=[]) kept sharded: NaN amax gradient
)


@pytest.mark.parametrize("case", CLEAN)
def test_unplanted_cases_are_clean(case):
    outcome = run(case)
    assert outcome.status == "pass", (outcome.reason, [f.summary for f in outcome.findings])


@pytest.mark.parametrize("case", KNOWN)
def test_torch_213s_own_dtensor_bugs_are_found(case):
    outcome = run(case)
    assert outcome.status == "finding", outcome.reason
    assert outcome.findings[0].kind == "sharding_mismatch"


@pytest.mark.slow
def test_a_surface_findings_repro_script_carries_the_chain_and_fails_while_the_bug_is_there(tmp_path):
    from torchsleuth.shard import repro

    (finding,) = run(KNOWN[0]).findings
    text = repro.script(finding)
    assert surface.source("surface.fill_") in text
    script = tmp_path / "r.py"
    script.write_text(text)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "BUG PRESENT (LocalTensorMode)" in done.stdout, done.stdout + done.stderr
