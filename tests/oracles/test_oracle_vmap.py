"""The ``vmap`` oracle: torch.func.vmap of a call gives each sample of the batch its own result.

Planted: a batching rule for cumsum (its ``FuncTorchBatched`` kernel) that
brings the batch dim to the front with reshape instead of movedim, so a
batch anywhere but at dim 0 mixes the samples; and the same mistake in
tanh_backward's rule, which only a gradient under vmap reaches. Each must be
found by a sweep pointed at the op and named (op, mode, in_dims), the same
sweep without the plant is clean, and the finding's script exits 1 with the
plant and 0 without, also with ``finding.detail`` blanked. Real kernels
stay clean.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import run_with_and_without
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case, Unit
from torchsleuth.engine import run_case
from torchsleuth.judge.plugin import BUILTIN, decode_detail
from torchsleuth.oracles.vmap import batch
from torchsleuth.oracles.vmap.detail import FORWARD, GRAD, RANDOM, Detail
from torchsleuth.oracles.vmap.judging import configurations
from torchsleuth.oracles.vmap.oracle import plan
from torchsleuth.report import repro

# Shared by both plants: how a batched tensor is brought to batch-first (wrongly) and how the op is called
# on plain tensors from inside a batching rule.
_COMMON = '''
import warnings
import torch
import torch._C._functorch as _functorch

_lib = torch.library.Library("aten", "IMPL")
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)


def _batch_first(t, level):
    """The plain tensor under ``t`` with its batch dim first; a tensor not batched at ``level`` gets a dim of 1."""
    if not (_functorch.is_batchedtensor(t) and _functorch.maybe_get_level(t) == level):
        return t.unsqueeze(0)
    x, bdim = _functorch._unwrap_batched(t, level)
    # the bug: reshape instead of movedim, so a batch dim anywhere but first mixes the samples
    return x.reshape(x.shape[bdim], *(s for i, s in enumerate(x.shape) if i != bdim))
'''

CUMSUM_PLANT = _COMMON + '''

def _cumsum_batched(self, dim, dtype=None):
    if self.dim() == 0:
        return self.clone() if dtype is None else self.to(dtype)
    level = _functorch.maybe_get_level(self)
    x = _batch_first(self, level)
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        out = torch.ops.aten.cumsum.default(x, dim % self.dim() + 1, dtype=dtype)
    return _functorch._add_batch_dim(out, 0, level)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("cumsum", _cumsum_batched, "FuncTorchBatched")
'''

TANH_BACKWARD_PLANT = _COMMON + '''

def _tanh_backward_batched(grad_output, output):
    level = max(_functorch.maybe_get_level(t) for t in (grad_output, output) if _functorch.is_batchedtensor(t))
    g, o = _batch_first(grad_output, level), _batch_first(output, level)
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        out = torch.ops.aten.tanh_backward.default(g, o)
    return _functorch._add_batch_dim(out, 0, level)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _lib.impl("tanh_backward", _tanh_backward_batched, "FuncTorchBatched")
'''


@pytest.fixture
def batching_plant():
    """``batching_plant(source)`` runs a plant's source in this process; its batching rule lasts until the test ends."""
    planted = []
    try:
        yield lambda source: planted.append(_run(source))
    finally:
        for namespace in planted:
            namespace["_lib"]._destroy()


def _run(source: str) -> dict:
    namespace: dict = {"__name__": "plant"}
    exec(compile(source, "plant.py", "exec"), namespace)
    return namespace


def sweep_config(ops: str, **extra) -> SweepConfig:
    spec = dict(dtypes=("float32",), variants=("functional",), layouts=("contiguous",), samples=3, workers=0, oracles=("vmap",)) | extra
    return SweepConfig(ops=resolve_ops(ops), **spec)


def vmap_findings(result):
    return [f for f in result.findings if f.reference == "vmap"]


# --- planning and the batch ---------------------------------------------------------------------


def test_the_functional_variant_gets_a_forward_case_and_a_gradient_case_where_the_op_has_one():
    assert "vmap" in BUILTIN and BUILTIN.get("vmap").cost == "cheap"
    assert BUILTIN.get("vmap").on_values and BUILTIN.get("vmap").sampled
    assert plan(Unit(op="tanh", dtype="float32", device="cpu"), "functional", 0) == ["vmap:forward", "vmap:grad"]
    assert plan(Unit(op="tanh", dtype="float32", device="cpu"), "inplace", 0) == []
    assert plan(Unit(op="cumsum", dtype="int64", device="cpu"), "functional", 0) == ["vmap:forward"]  # no gradient of integers


def test_the_batch_is_the_calls_own_tensors_then_seeded_redrawn_ones_in_their_range():
    import torch

    x, index = torch.tensor([[0.5, 2.0], [1.0, 1.5]]), torch.tensor([0, 1, 1])
    T = {"input": x, "args[1]": index}
    samples = batch.members(T, ("input", "args[1]"), RANDOM, 7, 3)
    assert samples[0]["input"] is x and len(samples) == 3
    again = batch.members(T, ("input", "args[1]"), RANDOM, 7, 3)  # the seed makes the same batch: the script's
    assert all(torch.equal(a[p], b[p]) for a, b in zip(samples, again) for p in T)
    for s in samples[1:]:
        assert not torch.equal(s["input"], x) and s["input"].min() >= 0.5 and s["input"].max() <= 2.0
        assert set(s["args[1]"].tolist()) <= {0, 1}  # indices stay valid indices
    one = batch.members({"input": torch.tensor(0.5)}, ("input",), RANDOM, 7, 3)  # one value: between its half and itself
    assert all(0.25 <= float(s["input"]) <= 0.5 for s in one) and float(one[1]["input"]) != 0.5
    stacked = batch.stacked(samples, ("input", "args[1]"), (2, None))
    assert stacked[0].shape == (2, 2, 3) and torch.equal(stacked[0][..., 1], samples[1]["input"]) and stacked[1] is index
    names = [c.in_dims for c in configurations(T, ("input", "args[1]"))]
    assert names == [(0, 0), (2, 0), (0, 1), (None, 0), (0, None)]


def test_a_random_op_and_an_op_that_vmap_refuses_are_skipped_with_the_reason():
    dropout = run_case(Case(op="bernoulli", variant="functional", dtype="float32", device="cpu", sample=0, oracle="vmap:forward"))
    assert dropout.status == "skip" and "random op" in dropout.reason, dropout.reason
    nonzero = run_case(Case(op="nonzero", variant="functional", dtype="float32", device="cpu", sample=0, oracle="vmap:forward"))
    assert nonzero.status == "skip" and "raises under vmap" in nonzero.reason, nonzero.reason


# --- planted ------------------------------------------------------------------------------------


def test_a_batching_rule_that_mixes_samples_when_the_batch_is_not_first_is_found_and_named(batching_plant, run_sweep):
    batching_plant(CUMSUM_PLANT)
    found = vmap_findings(run_sweep(sweep_config("cumsum")))
    assert found, "the planted cumsum batching rule was not found"
    for f in found:
        assert (f.kind, f.reference, f.op, f.variant) == ("mismatch", "vmap", "aten.cumsum.default", "functional")
        detail = decode_detail(Detail, f)
        assert detail.mode == FORWARD and any(d not in (0, None) for d in detail.in_dims), detail
        assert f.summary.startswith("vmap of cumsum [float32] over a batch at dim "), f.summary
        assert f"in_dims={tuple(detail.in_dims)!r}" in f.summary and "of each sample alone" in f.summary
        assert f.case_id.endswith("@vmap:forward")


def test_a_batching_rule_reached_only_through_the_gradient_is_found_and_named(batching_plant, run_sweep):
    batching_plant(TANH_BACKWARD_PLANT)
    found = vmap_findings(run_sweep(sweep_config("tanh")))
    assert found, "the planted tanh_backward batching rule was not found"
    for f in found:
        assert (f.kind, f.reference, f.op) == ("gradient_mismatch", "vmap", "aten.tanh.default")
        detail = decode_detail(Detail, f)
        assert detail.mode == GRAD and detail.differentiated == ("input",) and detail.in_dims != (0,)
        assert f.summary.startswith("vmap of the gradient (vjp) of tanh [float32]"), f.summary
        assert f"in_dims={tuple(detail.in_dims)!r}" in f.summary and f.mismatch.path.startswith("grad[input] of sample")


def test_the_same_sweeps_without_a_plant_are_clean(run_sweep):
    for op in ("cumsum", "tanh"):
        result = run_sweep(sweep_config(op))
        assert not vmap_findings(result), [f.summary for f in vmap_findings(result)]


@pytest.mark.slow
@pytest.mark.parametrize("op, source", [("cumsum", CUMSUM_PLANT), ("tanh", TANH_BACKWARD_PLANT)])
def test_the_findings_script_exits_1_with_the_plant_and_0_without_reading_its_record_not_its_prose(batching_plant, op, source, tmp_path):
    batching_plant(source)
    mode = "forward" if op == "cumsum" else "grad"
    outcomes = [run_case(Case(op=op, variant="functional", dtype="float32", device="cpu", sample=s, oracle=f"vmap:{mode}")) for s in range(3)]
    finding = next(f for o in outcomes for f in o.findings)
    blank = dataclasses.replace(finding, detail="")
    text = repro.script(blank)
    assert text == repro.script(finding) and "No repro could be generated" not in text
    runs = run_with_and_without(text, source, tmp_path)
    assert runs["planted.py"].returncode == 1, runs["planted.py"].stdout + runs["planted.py"].stderr
    assert "BUG PRESENT" in runs["planted.py"].stdout and "disagree with alone" in runs["planted.py"].stdout
    assert runs["clean.py"].returncode == 0, runs["clean.py"].stdout + runs["clean.py"].stderr
    assert "No repro could be generated" in repro.script(dataclasses.replace(finding, data=""))


# --- clean --------------------------------------------------------------------------------------

CLEAN = ("sum", "cumsum", "softmax", "matmul", "index_select", "gather", "sort", "nn.functional.layer_norm")


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_real_kernels_are_clean(dtype):
    outcomes = [run_case(Case(op=op, variant="functional", dtype=dtype, device="cpu", sample=s, oracle=f"vmap:{mode}"))
                for op in CLEAN for s in (0, 1) for mode in ("forward", "grad") if mode == "forward" or dtype == "float32"]
    assert not [f.summary for o in outcomes for f in o.findings]
    assert not [o.reason for o in outcomes if o.status == "error"]
    assert sum(o.status == "pass" for o in outcomes) >= 8, [(o.case.id, o.status, o.reason) for o in outcomes]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_copy_to_the_host_that_does_not_block_is_read_once_it_has_landed():
    # `to('cpu', non_blocking=True)` of a CUDA tensor returns before its values arrive: read at once, the batch and
    # the samples alone differed now and then (3 false findings in a whole-catalog run on the H200, bench/cuda-sweep.md)
    outcomes = [run_case(Case(op="to", variant="functional", dtype=dtype, device="cuda", sample=0, oracle="vmap:forward"))
                for dtype in ("float64", "float16", "bfloat16") for _ in range(20)]
    assert not [f.summary for o in outcomes for f in o.findings]
    assert {o.status for o in outcomes} == {"pass"}, [(o.case.id, o.status, o.reason) for o in outcomes[:3]]
