"""The compiled variant (oracles/compile/variant.py): the sweep's own cases compiled by inductor, judged as eager ones.

Three inductor bugs (tests/inductor_plants.py: ``sum``'s lowering drops a
reduced dim's tail, ``sinh``'s reads its input as if contiguous, ``take``'s
mirrors negative indices) are planted in this process (``workers=0``) and
taken out when the module's sweep ends.

Sweeps of the three ops with the plants and without share the module;
the compiled variant is on as a pointed run has it (``compile:sampled``),
its sample drawn by the cover over the config's dtype, layouts and variants.
"""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
import torch
import inductor_plants
from conftest import run_with_and_without

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.judge.plugin import BUILTIN, Swept
from torchsleuth.oracles.compile import variant
from torchsleuth.report import repro

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # inductor warns about its own internals

def config(ops: str, **extra) -> SweepConfig:
    spec = dict(ops=resolve_ops(ops), dtypes=("float32",), layouts=("contiguous", "transposed"),
                variants=("functional", "inplace", "out"), samples=0, workers=0, search=(), oracles=("compile:sampled",),
                shrink=False) | extra
    return SweepConfig(**spec)


# Two sweeps: sinh and take with every sample (take's negative indices are in its second), sum with three (its first
# samples are 0-d and of size 2; the tenth of 21 reduces a dim of 5).
CONFIGS = (config("sinh,take"), config("sum", samples=3))


# The same plants as a file a repro script runs first (the script is plain torch: it knows nothing of them).
PLANT_SOURCE = f"import runpy\nrunpy.run_path({inductor_plants.__file__!r})\n"


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The planted run's findings and the clean run's, each of both configs; the clean runs' database paths."""
    from torchsleuth import sweep

    folder = tmp_path_factory.mktemp("compiled")
    try:
        with inductor_plants.planted():
            planted = [sweep(c, db=str(folder / f"planted-{i}.db")) for i, c in enumerate(CONFIGS)]
        clean = [sweep(c, db=str(folder / f"clean-{i}.db")) for i, c in enumerate(CONFIGS)]
    finally:
        torch._dynamo.reset()
    return planted, clean, [str(folder / f"clean-{i}.db") for i in range(len(CONFIGS))]


def listing(result) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}"]
    lines += [f"  {f.kind} {f.reference} {f.case_id}: {f.summary}" for f in result.findings]
    return "\n".join(lines)


def compiled(results, op: str) -> list:
    """The compiled variant's findings of ``op`` (its chains' are tests/oracles/test_oracle_compile_chains.py's)."""
    return [f for result in results for f in result.findings if f.opinfo == op and "|@compile:" in f.case_id and "@compile:chain" not in f.case_id]


@pytest.mark.slow
def test_each_planted_lowering_is_found_and_named_compiled(sweeps):
    planted, _, _ = sweeps
    shown = "\n".join(map(listing, planted))
    for op in ("sum", "sinh", "take"):
        found = compiled(planted, op)
        assert found, f"{op}: {shown}"
        for f in found:
            assert f.summary.startswith("compiled by torch.compile (inductor, "), f.summary
            assert f.dtype == "float32" and "torch.compile(backend='inductor'" in f.detail
    # the transposed read shows only where sinh's input is transposed (self, in place or not), never contiguous
    assert all(dict(f.layouts).get("input") == "transposed" for f in compiled(planted, "sinh")), shown
    assert any(f.variant == "inplace" and "writes wrong values into a transposed self" in f.summary for f in compiled(planted, "sinh"))
    # eager is untouched: no finding outside the compiled cases
    assert not [f for result in planted for f in result.findings if "|@compile" not in f.case_id], shown


@pytest.mark.slow
def test_unpatched_inductor_runs_clean(sweeps):
    _, clean, databases = sweeps
    for result, db in zip(clean, databases):
        assert not [f for f in result.findings if "|@compile" in f.case_id], listing(result)
        assert "error" not in result.statuses, listing(result)
        ran = dict(sqlite3.connect(db).execute(
            "SELECT status, COUNT(*) FROM outcomes WHERE case_id LIKE '%|@compile:%' GROUP BY status").fetchall())
        assert ran.get("pass", 0) >= 2, ran  # compiled cases of each op judged, and passed


@pytest.mark.slow
def test_the_compiled_repro_is_plain_torch_and_fails_only_with_the_plant(sweeps, tmp_path):
    planted, _, _ = sweeps
    finding = planted[0].reported(compiled(planted[:1], "sinh")[0])
    text = repro.script(finding)
    assert 'torch.compile(call, backend="inductor", fullgraph=True' in text
    assert "import torchsleuth" not in text and "from torchsleuth" not in text  # plain torch
    ran = run_with_and_without(text, PLANT_SOURCE, tmp_path, timeout=600)  # a compile in each: minutes on 2 loaded cores
    assert ran["planted.py"].returncode == 1, ran["planted.py"].stdout + ran["planted.py"].stderr
    assert ran["clean.py"].returncode == 0, ran["clean.py"].stdout + ran["clean.py"].stderr


# --- the pick (no compiling) -------------------------------------------------------------------------------


def test_the_cover_walks_every_layout_each_round_and_every_pair_over_all_rounds():
    dtypes, layouts, variants = ("float64", "float32", "float16"), variant.LAYOUTS, variant.VARIANTS
    tuples = variant.cover(dtypes, layouts, variants)
    assert len(tuples) == variant.ROUNDS * len(variant.LAYOUTS)
    for r in range(variant.ROUNDS):
        assert [t[0] for t in tuples[r * len(layouts):(r + 1) * len(layouts)]] == list(layouts)
    # at its full length (as many rounds as dtypes) the cover holds every pair of the three factors
    full = variant.cover(dtypes, layouts, variants, rounds=len(dtypes))
    assert {(a, b) for a, b, _, _ in full} == {(a, b) for a in layouts for b in dtypes}
    assert {(b, c) for _, b, c, _ in full} == {(b, c) for b in dtypes for c in variants}
    assert {(a, c) for a, _, c, _ in full} == {(a, c) for a in layouts for c in variants}
    # one dtype: the rounds turn the variants instead, so each layout meets each variant within ROUNDS
    alone = variant.cover(("float32",), layouts, variants)
    assert {(a, c) for a, _, c, _ in alone} == {(a, c) for a in layouts for c in variants}
    assert [t[3] for t in tuples] == [r == 1 for r in range(variant.ROUNDS) for _ in layouts]  # round 1 dynamic


def test_the_pick_takes_planned_cases_of_its_dtype_and_only_when_sampled():
    from torchsleuth.cases.records import Unit

    unit = Unit(op="sinh", dtype="float32", device="cpu")
    planned = [Case(op="sinh", variant=v, dtype="float32", device="cpu", sample=0, layouts=laid)
               for v in ("functional", "inplace", "out") for laid in ((), (("input", "transposed"),))]
    swept = Swept(dtypes=("float32",), layouts=("contiguous", "transposed"), variants=("functional", "inplace", "out"), position=0, count=1)
    picked = variant.pick(unit, planned, variant.SAMPLED, swept)
    assert {(c.variant, c.layouts, c.oracle) for c in picked} == {
        ("functional", (), "compile:static"), ("inplace", (("input", "transposed"),), "compile:static"),
        ("inplace", (), "compile:dynamic"), ("out", (("input", "transposed"),), "compile:dynamic"), ("out", (), "compile:static"),
        ("functional", (("input", "transposed"),), "compile:static")}
    assert variant.pick(unit, planned, "", swept) == []  # plain "compile": every sample's contiguous call, no pick
    assert BUILTIN.picked(("compile",), unit, planned, swept) == []
    both = BUILTIN.picked(("compile:sampled",), unit, planned, swept)  # the compiled variant's, then the compiled chains
    assert both[:len(picked)] == picked and all("@compile:chain:" in c.id for c in both[len(picked):])
    two = [dataclasses.replace(swept, position=p, count=2) for p in (0, 1)]  # spread over two samples: each gets some
    assert [len(variant.pick(unit, planned, variant.SAMPLED, s)) for s in two] == [3, 3]


def test_the_first_dtypes_each_compile_one_searched_case():
    from torchsleuth.cases.records import Unit

    dtypes = ("float64", "float32", "float16", "bfloat16", "int64")
    searched = [Case(op="exp", variant=v, dtype=d, device="cpu", sample=0, edits=(f"special:input={i}",))
                for d in dtypes for v in ("functional", "backward") for i in range(3)]
    swept = Swept(dtypes=dtypes, layouts=("contiguous",), variants=("functional", "backward"), position=0, count=1, searched=True)
    for place, dtype in enumerate(dtypes):
        unit = Unit(op="exp", dtype=dtype, device="cpu")
        mine = [c for c in searched if c.dtype == dtype]
        picked = variant.pick(unit, mine, variant.SAMPLED, swept)
        if place >= variant.SEARCHED:
            assert picked == []
            continue
        assert len(picked) == 1 and picked[0].oracle == "compile:static" and picked[0].variant == "functional" and picked[0].edits
    # the engine asks with the sample's planned cases too: unedited ones are never taken as searched
    unit = Unit(op="exp", dtype="float32", device="cpu")
    assert variant.pick(unit, [Case(op="exp", variant="functional", dtype="float32", device="cpu", sample=0)], variant.SAMPLED, swept) == []


@pytest.mark.slow
def test_a_storage_defined_op_compiled_is_judged_against_eager_on_the_same_storage(tmp_path):
    """``as_strided_scatter`` on an offset view: eager reads ``storage_offset`` in the view's own storage, inductor in a
    fresh one (torch 2.13, bench/compiled-variant.md). The finding is a compiled mismatch, not nondeterminism, and its
    script runs eager first, then the compiled call, on copies of one storage."""
    import subprocess
    import sys

    from torchsleuth import sweep

    result = sweep(config("as_strided_scatter", dtypes=("int64",), layouts=("offset",), variants=("functional",)),
                   db=str(tmp_path / "runs.db"))
    found = [f for f in result.findings if f.reference == "determinism" and "@compile:static" in f.case_id]
    if not found:
        pytest.skip(f"torch {torch.__version__} compiles as_strided_scatter on an offset view as eager calls it")
    finding = result.reported(found[0])
    assert finding.kind == "mismatch" and "differs from eager on a copy of the same storage" in finding.summary
    path = tmp_path / "repro.py"
    path.write_text(repro.script(finding))
    ran = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 1 and "eager, then compiled, on copies of one storage" in ran.stdout, ran.stdout + ran.stderr
