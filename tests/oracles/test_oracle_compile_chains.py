"""Compiled chains (oracles/compile/chains.py): short programs around an op, compiled, judged against eager and float64.

Two inductor bugs are planted in this process (``workers=0``) that show only
where two ops fuse, each by wrapping one entry of inductor's lowering table
(``torch._inductor.lowering.lowerings``; tests/inductor_plants.py's
``CHAIN_PLANTS``), taken out when the module's sweeps end:

* ``sum``'s lowering drops the tail of each reduced dim whose size is not a
  power of two, but only where its input is a pointwise computation fused
  into it (an unrealized ``Pointwise``): ``sum`` of an input tensor, the
  compiled variant's single op, is right;
* ``sin``'s lowering reads its input as if contiguous where that input is a
  view made inside the graph (a transpose, a slice of an intermediate or of
  an input): ``sin`` of a transposed input tensor is right.

Sweeps of the two ops with the plants and without share the module; the
compiled variant is on as a pointed run has it (``compile:sampled``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import inductor_plants
import pytest
import torch
from conftest import run_with_and_without

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.judge.plugin import BUILTIN
from torchsleuth.oracles.compile import chain_steps, chains
from torchsleuth.report import repro

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # inductor warns about its own internals


def config(ops: str, **extra) -> SweepConfig:
    spec = dict(ops=resolve_ops(ops), dtypes=("float32", "bfloat16"), layouts=("contiguous", "transposed"), variants=("functional",),
                samples=3, workers=0, search=(), oracles=("compile:sampled",), shrink=False) | extra
    return SweepConfig(**spec)


CONFIGS = (config("sum"), config("sin"))


# --- the plants: wrapped lowerings, each firing only on a fused producer or an in-graph view ------------------------

# The plants as a file a repro script runs first (the script is plain torch: it knows nothing of them).
PLANT_SOURCE = f"import runpy\nrunpy.run_path({str(Path(inductor_plants.__file__).with_name('inductor_chain_plants.py'))!r})\n"


def planted_lowerings():
    return inductor_plants.planted(inductor_plants.CHAIN_PLANTS)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The planted runs' results and the clean runs', one of each config."""
    from torchsleuth import sweep

    folder = tmp_path_factory.mktemp("chains")
    try:
        with planted_lowerings():
            planted = [sweep(c, db=str(folder / f"planted-{i}.db")) for i, c in enumerate(CONFIGS)]
        clean = [sweep(c, db=str(folder / f"clean-{i}.db")) for i, c in enumerate(CONFIGS)]
    finally:
        torch._dynamo.reset()
    return planted, clean


def listing(result) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}"]
    lines += [f"  {f.kind} {f.reference} {f.case_id}: {f.summary}" for f in result.findings]
    return "\n".join(lines)


def chained(result) -> list:
    return [f for f in result.findings if "|@compile:chain:" in f.case_id]


@pytest.mark.slow
def test_each_fusion_plant_is_found_in_a_chain_and_named(sweeps):
    planted, _ = sweeps
    for result, op in zip(planted, ("sum", "sin")):
        shown = listing(result)
        found = chained(result)
        assert found, f"{op}: {shown}"
        for f in found:
            chain = chain_steps.of_oracle(Case.parse(f.case_id).oracle)
            assert f.opinfo == op and f.summary.startswith("chain ") and "compiled by torch.compile (inductor" in f.summary, f.summary
            assert f"[{f.dtype}]" in f.summary and (dict(f.layouts).get("input", "contiguous tensors") in f.summary), f.summary
            assert chain.length >= 2, f.case_id
        # the op alone, compiled (the compiled variant's cases), is right: the plants need the fusion
        assert not [f for f in result.findings if "|@compile:chain:" not in f.case_id], shown


@pytest.mark.slow
def test_unpatched_chains_run_clean(sweeps):
    _, clean = sweeps
    for result in clean:
        assert not result.findings, listing(result)
        assert "error" not in result.statuses, listing(result)


@pytest.mark.slow
def test_the_shrink_drops_the_step_that_does_not_matter_and_the_repro_fails_only_with_the_plant(tmp_path):
    from torchsleuth.engine import run_case
    from torchsleuth.shrink import stage

    case = Case(op="sum", variant="functional", dtype="float32", device="cpu", sample=10, oracle="compile:chain:exp>@>neg")
    try:
        with planted_lowerings():
            found = run_case(case)
            assert found.status == "finding", found.reason
            events = list(stage.work(stage.Job(key="sum|float32|cpu", findings=found.findings[:1]), config("sum"), frozenset(), None))
        shrunk = [payload for kind, payload in events if kind == "outcome"][0]
    finally:
        torch._dynamo.reset()
    assert shrunk.status == "shrunk", shrunk.reason
    assert Case.parse(shrunk.case_id).oracle == "compile:chain:exp>@", shrunk.case_id  # the pointwise the sum fuses, kept
    text = repro.script(shrunk.replay)
    assert 'torch.compile(call, backend="inductor", fullgraph=True' in text and "torch.exp(x)" in text
    assert "import torchsleuth" not in text and "from torchsleuth" not in text  # plain torch
    ran = run_with_and_without(text, PLANT_SOURCE, tmp_path, timeout=600)
    assert ran["planted.py"].returncode == 1, ran["planted.py"].stdout + ran["planted.py"].stderr
    assert ran["clean.py"].returncode == 0, ran["clean.py"].stdout + ran["clean.py"].stderr


# --- the pick and the moves (no compiling) ------------------------------------------------------------------------


def test_chains_are_typed_deterministic_and_bounded_per_op():
    from torchsleuth.judge.plugin import Swept
    from torchsleuth.cases.records import Unit

    picked = {}
    for dtype in ("float32", "bfloat16"):
        unit = Unit(op="sum", dtype=dtype, device="cpu")
        for position, sample in enumerate((0, 10, 20)):
            planned = [Case(op="sum", variant="functional", dtype=dtype, device="cpu", sample=sample),
                       Case(op="sum", variant="functional", dtype=dtype, device="cpu", sample=sample, layouts=(("input", "transposed"),))]
            swept = Swept(dtypes=("float64", "float32", "bfloat16"), layouts=("transposed",), variants=("functional",), position=position, count=3)
            cases = chains.pick(unit, planned, "sampled", swept)
            assert cases == chains.pick(unit, planned, "sampled", swept)  # the same on a replay
            assert chains.pick(unit, planned, "", swept) == []  # only with the compiled variant on
            picked.update({c.id: c for c in cases})
    assert 5 <= len(picked) <= chains.CHAINS, sorted(picked)
    for case in picked.values():
        chain = chain_steps.of_oracle(case.oracle)
        assert 2 <= chain.length <= 4 and chain_steps.parse(chain.spec) == chain
    assert any(c.layouts for c in picked.values())  # laid out as the sweep lays out


def test_a_chain_move_drops_one_step_and_weighs_less():
    case = Case(op="sum", variant="functional", dtype="float32", device="cpu", sample=10, oracle="compile:chain:exp>@>t>sum")
    moves = BUILTIN.moves(case)
    assert [c.oracle for c in moves] == ["compile:chain:@>t>sum", "compile:chain:exp>@>sum", "compile:chain:exp>@>t"]
    assert all(BUILTIN.weight(c) == 3 < BUILTIN.weight(case) for c in moves)
    plain = dataclasses.replace(case, oracle="compile:static")
    assert BUILTIN.moves(plain) == [] and BUILTIN.weight(plain) == 0
    assert chain_steps.of_oracle("compile:sampled") is None
    with pytest.raises(ValueError, match="unknown chain steps"):
        chain_steps.parse("nope>@")


def test_every_step_makes_its_own_tensors_on_the_input_s_device():
    """A step's index tensors follow ``x`` (on CUDA an index left on the CPU makes the chain's reference raise); the
    meta device shows it without a GPU: a CPU tensor meeting a meta one raises as a CUDA one does."""
    x = torch.ones(4, 5, device="meta")
    for step in chain_steps.STEPS:
        result = chain_steps.function(step)(x)
        assert result.device.type == "meta", step.name
