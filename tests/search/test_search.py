"""The search (search) and the depth of a run: searched cases planned, run within the budget, and finding
what OpInfo's samples never reach; a pointed run goes deep without a flag.

The ``long`` search is tested here (a scan wrong past 256 entries along its
dim); the values, arguments and overloads searches have files of their own.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, sweep
from torchsleuth.cases.records import Case
from torchsleuth.judge.plugin import BUILTIN
from torchsleuth.cli.arguments import budget
from torchsleuth.run.samples import samples_of
from torchsleuth.search import long_dims, plan, within
from torchsleuth.store.sqlite import Store
from torchsleuth.sweep import CATALOG_BUDGET, depth

BLOCK = 256


def cumsum_wrong_past_a_block(x, dim, *, dtype=None):
    """``cumsum`` whose float32 entries past 256 along the dim are off by one (a carry lost between blocks of the
    vectorised float32 kernel; the float64 reference's kernel is right)."""
    out = torch.empty_like(x, dtype=dtype or (torch.int64 if not (x.is_floating_point() or x.is_complex()) else x.dtype))
    torch.ops.aten.cumsum.out(x, dim, dtype=dtype, out=out)  # cumsum.out's own kernel: the right answer
    if x.dtype == torch.float32 and x.dim() and x.shape[dim] > BLOCK:
        out.narrow(dim, BLOCK, x.shape[dim] - BLOCK).add_(1)
    return out


def cumsum_config(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops("cumsum"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                workers=0, search=("long",)) | extra
    return SweepConfig(**spec)


def test_a_scan_wrong_past_its_block_is_found_by_a_pointed_run_and_named_with_its_length(plant, run_sweep):
    plant("cumsum", cumsum_wrong_past_a_block)
    config = depth(cumsum_config(), deep=True, given={"oracles"})
    assert config.samples == 0 and config.budget == 0  # deep: every sample, no budget
    result = run_sweep(config)
    found = [f for f in result.findings if f.opinfo == "cumsum"]
    assert found, result.statuses
    for finding in found:
        case = Case.parse(finding.case_id)
        assert finding.kind == "mismatch" and finding.op == "aten.cumsum.default"
        grown = [e for e in case.edits if e.startswith("dim:input@")]
        assert grown and int(grown[0].rpartition(">")[2]) > BLOCK, finding.case_id  # the trigger: a dim past the block
    # the same run without searching never grows the dim, and finds nothing
    assert not run_sweep(cumsum_config(search=(), samples=0)).findings


def test_the_same_pointed_run_without_the_plant_is_clean(tmp_path):
    db = tmp_path / "runs.db"
    result = sweep(depth(cumsum_config(), deep=True, given={"oracles"}), db=db)
    assert not result.findings
    store = Store(db)
    try:
        searched = [case_id for case_id, *_ in store.outcome_rows(result.run.id) if "dim:input@" in case_id]
    finally:
        store.close()
    assert searched, "the search made no case"


def test_the_long_search_grows_the_dim_the_op_works_along():
    sample = next(s for s in samples_of("cumsum", "float32") if s.input.dim() == 3 and s.args == (1,))
    assert long_dims.plan("cumsum", "functional", "float32", sample) == [("dim:input@1>257",), ("dim:input@1>1025",), ("dim:input@1>4097",)]
    softmax = next(s for s in samples_of("softmax", "float32") if s.input.dim() == 2 and s.args == (0,))
    assert long_dims.plan("softmax", "functional", "float32", softmax)[0] == ("dim:input@0>257",)
    add = samples_of("add", "float32")[1]
    assert long_dims.plan("add", "functional", "float32", add) == []  # no dim to work along: nothing to grow
    zero_d = next(s for s in samples_of("cumsum", "float32") if s.input.dim() == 0)
    assert long_dims.plan("cumsum", "functional", "float32", zero_d) == []


def test_search_plans_are_deterministic_and_the_budget_spreads_over_them():
    sample = samples_of("cumsum", "float32")[0]
    assert plan(("long",), "cumsum", "functional", "float32", sample) == plan(("long",), "cumsum", "functional", "float32", sample)
    planned = list(range(100))
    assert within(planned, 0) == planned and within(planned, 200) == planned
    chosen = within(planned, 8)
    assert len(chosen) == 8 and chosen[0] == 0 and chosen[-1] > 80  # spread, not the first eight


def test_a_catalog_run_searches_within_the_budget_and_says_how_many_ran(run_sweep):
    config = depth(cumsum_config(samples=2), deep=False, given={"oracles"})  # no sampled oracle: the long search alone
    assert config.budget == CATALOG_BUDGET
    result = run_sweep(dataclasses.replace(config, budget=2))
    searched = [n for kind, n in result.notes if kind == "search"]
    assert searched and searched[0].endswith("2/6"), result.notes  # 2 samples x 3 lengths planned, 2 ran


def test_depth_keeps_what_the_user_chose():
    base = cumsum_config(oracles=("compile",))
    deep = depth(base, deep=True)
    assert deep.samples == 0 and "sizes" in deep.oracles and "compile" in deep.oracles
    assert depth(base, deep=True, given={"oracles", "samples"}).oracles == ("compile",)
    assert depth(cumsum_config(search=()), deep=False, given={"oracles"}).budget == 0  # nothing to budget


def test_a_catalog_run_samples_the_sampled_oracles_unless_the_user_named_oracles():
    sampled = BUILTIN.sampled()
    assert sampled and all(BUILTIN.get(name).cost == "cheap" for name in sampled)
    assert depth(cumsum_config(), deep=False).sampled == sampled
    assert depth(cumsum_config(), deep=False, given={"oracles"}).sampled == ()
    assert depth(cumsum_config(), deep=True).sampled == ()  # deep: they run in full, among the cheap oracles
    assert set(sampled) <= set(depth(cumsum_config(), deep=True).oracles)
    assert depth(cumsum_config(search=()), deep=False).budget == CATALOG_BUDGET  # their cases are budgeted too


def test_the_sampled_oracles_cases_join_the_searched_cases_within_the_budget():
    from torchsleuth.engine import run_unit

    config = depth(cumsum_config(samples=1), deep=False)
    unit = Case(op="cumsum", variant="functional", dtype="float32", device="cpu", sample=0).unit

    def ran(budget: int) -> tuple[list[str], list[str]]:
        events = list(run_unit(unit, dataclasses.replace(config, budget=budget)))
        return [c for kind, c in events if kind == "begin"], [n for kind, n in events if kind == "note"]

    everything, _ = ran(0)
    sampled = [c for c in everything if Case.parse(c).oracle.split(":")[0] in config.sampled]
    assert sampled, everything  # a catalog run judges some of its cases by the sampled oracles
    budgeted, notes = ran(3)
    searched = [c for c in budgeted if Case.parse(c).edits or Case.parse(c).oracle]
    assert len(searched) == 3 and len(budgeted) < len(everything)
    assert notes and notes[0].startswith("search 3/"), notes


def test_a_replay_alone_runs_the_searched_case_it_names_whatever_the_budget_chose_from_the_whole_unit():
    # The pool replays a case that killed its worker with ``only``: the budget is spread over the whole unit's plan,
    # so the replay must not spread it again over the one sample it plans (it chose other cases, ran none, and a
    # crash there was called collateral with its outcome lost).
    from torchsleuth.engine import run_unit

    config = dataclasses.replace(depth(cumsum_config(samples=3), deep=False), budget=4)
    unit = Case(op="cumsum", variant="functional", dtype="float32", device="cpu", sample=0).unit
    begun = [c for kind, c in run_unit(unit, config) if kind == "begin"]
    searched = [c for c in begun if Case.parse(c).edits or Case.parse(c).oracle]
    assert len(searched) == 4 and len({Case.parse(c).sample for c in searched}) > 1
    for case_id in searched:
        events = list(run_unit(unit, config, only=case_id))
        assert [c for kind, c in events if kind == "begin"] == [case_id]
        assert [o.case.id for kind, o in events if kind == "outcome"] == [case_id]


def test_a_case_replayed_alone_sends_the_call_describe_gives_before_it_runs():
    # A replay alone tells the pool its call first (engine._judged), so that a replay that dies or hangs is reported
    # with it and no other worker is started to describe it (workers.dispatch); it must be the call ``describe`` makes.
    from torchsleuth.engine import describe, run_unit

    config = dataclasses.replace(depth(cumsum_config(samples=2, variants=("functional", "out", "backward"), layouts=("contiguous", "transposed")),
                                       deep=False), budget=2)
    unit = Case(op="cumsum", variant="functional", dtype="float32", device="cpu", sample=0).unit
    begun = [Case.parse(c) for kind, c in run_unit(unit, config) if kind == "begin"]
    chosen = [c.id for c in begun if c.edits][:1] + list({(c.variant, c.layouts != ()): c.id for c in begun if not c.edits and not c.oracle}.values())
    assert len(chosen) >= 4 and {Case.parse(c).variant for c in chosen} == {"functional", "out", "backward"}, chosen
    for case_id in chosen:
        events = list(run_unit(unit, config, only=case_id))
        kinds = [kind for kind, _ in events]
        assert kinds[:3] == ["begin", "call", "outcome"] and set(kinds[3:]) <= {"note"}, kinds
        assert events[1][1] == describe(unit, config, case_id) and events[1][1].function, case_id
    assert "call" not in {kind for kind, _ in run_unit(unit, config)}  # a unit run whole sends none


def test_the_parts_of_a_split_unit_run_every_case_of_the_unit_once_between_them():
    # The pool splits a straggler's rest among idle workers (workers.dispatch): each worker runs the unit leaving out the
    # other parts' cases. Every case the whole unit runs, searched and sampled ones included, runs in exactly one part.
    from torchsleuth.engine import run_unit
    from torchsleuth.workers.parts import Leaving

    config = dataclasses.replace(depth(cumsum_config(samples=3), deep=False), budget=4)
    unit = Case(op="cumsum", variant="functional", dtype="float32", device="cpu", sample=0).unit
    whole = [c for kind, c in run_unit(unit, config) if kind == "begin"]
    parts = [[c for kind, c in run_unit(unit, config, Leaving(set(), (i, 3))) if kind == "begin"] for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(whole) and all(parts)


@pytest.mark.parametrize("text, expected", [("8", (8, 0.0)), ("8cases", (8, 0.0)), ("30s", (0, 30.0)), ("0", (0, 0.0))])
def test_budget_reads_cases_or_seconds(text, expected):
    assert budget(text) == expected


@pytest.mark.parametrize("text", ["-1", "3x", "2.5", "s"])
def test_a_bad_budget_is_one_line_and_exit_2(text, tmp_path, capsys):
    from torchsleuth.cli.main import main

    with pytest.raises(SystemExit) as exited:  # argparse's own errors exit from the parser
        main(["ops", "--ops", "neg", "--budget", text, "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget" in err[0], err
    assert not (tmp_path / "out").exists()


PLANT_MODULE = '''
import warnings

import torch

BLOCK = 256


def cumsum_wrong_past_a_block(x, dim, *, dtype=None):
    out = torch.empty_like(x, dtype=dtype or (torch.int64 if not (x.is_floating_point() or x.is_complex()) else x.dtype))
    torch.ops.aten.cumsum.out(x, dim, dtype=dtype, out=out)
    if x.dtype == torch.float32 and x.dim() and x.shape[dim] > BLOCK:
        out.narrow(dim, BLOCK, x.shape[dim] - BLOCK).add_(1)
    return out


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("cumsum", cumsum_wrong_past_a_block, "CPU")
'''


@pytest.mark.slow
def test_pointed_at_the_op_with_defaults_the_command_finds_the_scan_bug(tmp_path):
    """`torchsleuth ops --ops cumsum` with the plant's --import and float32 only (the plant's dtype, to keep the test
    short): no search, depth or budget flag; the depth a pointed run gets reaches the bug."""
    import json
    import subprocess
    import sys

    plant = tmp_path / "plant.py"
    plant.write_text(PLANT_MODULE)
    out = tmp_path / "out"
    ran = subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", "ops", "--ops", "cumsum", "--dtypes", "float32", "--import", str(plant),
                          "--out", str(out), "--json", str(out / "f.json"), "--no-progress", "--no-compile"], capture_output=True, text=True,
                         timeout=900)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    findings = json.loads((out / "f.json").read_text())["findings"]
    grown = [f for f in findings if f["op"] == "aten.cumsum.default" and "dim:input@" in f["found_as"]]
    assert grown, [(f["op"], f["found_as"]) for f in findings]


def test_a_sample_a_search_cannot_read_plans_nothing_for_that_search_and_the_unit_still_runs():
    # sparse samples have no bytes to key on (the internal search keys samples by their bytes): the other searches plan
    sample = samples_of("sparse.mm.reduce", "float32")[0]
    planned = plan(("internal", "arguments"), "sparse.mm.reduce", "functional", "float32", sample)
    assert planned == plan(("arguments",), "sparse.mm.reduce", "functional", "float32", sample)
