"""The compiled variant within a catalog run's budget (``compile:catalog``: what ``--compile`` adds to a catalog run).

Per op: ``variant.CATALOG_COVER`` cases of the cover (a share of it turned by
the op's name, so the catalog as a whole walks every tuple), one searched case
and one chain. The share is checked over many op names; a catalog sweep of
``sum`` and ``sinh`` with two planted lowerings (tests/inductor_plants.py, in
this process, taken out when the sweep ends) finds both and names them
compiled, and the same sweep unpatched is clean.
"""

from __future__ import annotations

import sqlite3

import pytest
import torch
import inductor_plants

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.cases.records import Case, Unit
from torchsleuth.judge.plugin import BUILTIN, Swept
from torchsleuth.oracles.compile import chains, variant

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # inductor warns about its own internals

DTYPES = ("float32", "float64", "bfloat16", "float16", "int64")
LAYOUTS = tuple(name for name in variant.LAYOUTS if name != "contiguous")
VARIANTS = ("functional", "inplace", "out")


def planned(op: str, dtype: str, sample: int) -> list[Case]:
    """Every variant of one sample under every layout the cover walks (one tensor, ``input``)."""
    return [Case(op=op, variant=v, dtype=dtype, device="cpu", sample=sample, layouts=(("input", laid),) if laid != "contiguous" else ())
            for v in VARIANTS for laid in variant.LAYOUTS]


def picks(op: str, option: str, count: int = 3) -> list[Case]:
    """What the compile oracle picks of an op over its dtypes' units and ``count`` samples, as the engine asks."""
    found = []
    for dtype in DTYPES:
        for position in range(count):
            swept = Swept(dtypes=DTYPES, layouts=LAYOUTS, variants=VARIANTS, position=position, count=count)
            found += BUILTIN.picked((f"compile:{option}",), Unit(op=op, dtype=dtype, device="cpu"), planned(op, dtype, position), swept)
    return found


def test_a_catalog_run_compiles_a_share_of_the_cover_per_op_and_the_catalog_walks_all_of_it():
    tuples = variant.cover(DTYPES, LAYOUTS, VARIANTS)
    walked = set()
    for k in range(60):
        op = f"op{k}"  # the cover's pick reads no sample: any name will do
        cover = [c for c in picks(op, variant.CATALOG) if "@compile:chain:" not in c.id]
        assert len(cover) == variant.CATALOG_COVER, [c.id for c in cover]
        assert len({c.dtype for c in cover}) > 1 and len({c.variant for c in cover}) > 1  # spread, not the first tuples
        walked |= {(dict(c.layouts).get("input", "contiguous"), c.dtype, c.variant, c.oracle == "compile:dynamic") for c in cover}
        assert [c for c in picks(op, variant.CATALOG) if "@compile:chain:" not in c.id] == cover  # the turn is the name's
    assert walked == set(tuples)  # over the catalog every tuple of the cover is compiled somewhere
    sampled = [c for c in picks("op0", variant.SAMPLED) if "@compile:chain:" not in c.id]
    assert len(sampled) == len(tuples)  # a pointed run compiles the whole cover


def test_a_catalog_run_compiles_one_chain_per_op():
    templates = set()
    for op in ("exp", "sinh", "sum", "add", "mul", "amax", "cumsum", "abs", "sigmoid", "tanh"):
        chained = [c for c in picks(op, variant.CATALOG, count=1) if "@compile:chain:" in c.id]  # every op has a sample 0
        assert len(chained) == 1, [c.id for c in chained]
        templates.add(chained[0].oracle)
        assert 1 < len([c for c in picks(op, variant.SAMPLED, count=1) if "@compile:chain:" in c.id]) <= chains.CHAINS
    assert len(templates) > 3  # turned by the op: not every op's chain is the same


def test_a_catalog_run_compiles_one_searched_case_an_op_beside_the_budget():
    searched = [Case(op="exp", variant="functional", dtype=d, device="cpu", sample=0, edits=(f"special:input={i}",))
                for d in DTYPES for i in range(3)]
    swept = Swept(dtypes=DTYPES, layouts=("contiguous",), variants=VARIANTS, position=0, count=1, searched=True)
    found = [c for d in DTYPES for c in BUILTIN.picked(("compile:catalog",), Unit(op="exp", dtype=d, device="cpu"),
                                                       [c for c in searched if c.dtype == d], swept)]
    assert [(c.dtype, c.oracle) for c in found] == [(DTYPES[0], "compile:static")]  # no searched chain in a catalog run


def test_the_option_is_checked():
    from torchsleuth.errors import UsageError

    assert BUILTIN.with_option("compile", "catalog") == "compile:catalog"
    with pytest.raises(UsageError, match="'sampled'.*'catalog'"):
        BUILTIN.with_option("compile", "everything")


@pytest.fixture(scope="module")
def catalog_runs(tmp_path_factory):
    """A catalog sweep of sum and sinh with the compiled variant in its budget: planted, then clean."""
    folder = tmp_path_factory.mktemp("catalog")
    config = SweepConfig(ops=resolve_ops("sum,sinh"), dtypes=DTYPES, samples=3, workers=0, search=(), shrink=False,
                         oracles=("compile:catalog",))
    try:
        with inductor_plants.planted(inductor_plants.PLANTS):
            planted = sweep(config, db=str(folder / "planted.db"))
        clean = sweep(config, db=str(folder / "clean.db"))
    finally:
        torch._dynamo.reset()
    return planted, clean, str(folder / "clean.db")


@pytest.mark.slow
def test_the_catalog_budget_finds_planted_lowerings_and_a_clean_run_stays_clean(catalog_runs):
    planted, clean, clean_db = catalog_runs
    shown = "\n".join(f"{f.case_id}: {f.summary}" for f in planted.findings)
    for op in ("sum", "sinh"):
        found = [f for f in planted.findings if f.opinfo == op and "|@compile:" in f.case_id]
        assert found, f"{op}: {shown}"
        assert all("compiled" in f.summary for f in found), shown
    assert not [f for f in planted.findings if "|@compile" not in f.case_id], shown  # eager untouched
    assert not [f for f in clean.findings if "|@compile" in f.case_id], [f.case_id for f in clean.findings]
    ran = dict(sqlite3.connect(clean_db).execute(
        "SELECT status, COUNT(*) FROM outcomes WHERE case_id LIKE '%|@compile:%' GROUP BY status").fetchall())
    assert ran.get("pass", 0) >= 6 and sum(ran.values()) <= 2 * (variant.CATALOG_COVER + 2), ran  # judged, within budget
