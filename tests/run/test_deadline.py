"""The time target (run.deadline): past the sweep's share of it, a unit runs its samples' own cases and leaves its
oracle and searched cases out, counted; staged parts (workers.parts) split a unit into those two halves."""

from __future__ import annotations

import dataclasses
import time

import pytest

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Unit
from torchsleuth.cli.main import main
from torchsleuth.engine import run_unit
from torchsleuth.errors import ExitCode
from torchsleuth.report.notes import run_notes
from torchsleuth.run import deadline
from torchsleuth.sweep import POINTED_SECONDS, depth
from torchsleuth.workers.parts import STAGES, Leaving, Part

UNIT = Unit(op="neg", dtype="float32", device="cpu")


def config(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed"),
                samples=3, workers=0, search=("values",), oracles=("vmap",)) | extra
    return SweepConfig(**spec)


def outcomes(events) -> list:
    return [payload for kind, payload in events if kind == "outcome"]


def own(case) -> bool:
    """A sample's own case: no searched edit, no oracle."""
    return not case.edits and not case.oracle


def neg_wrong_when_transposed(x):
    """aten::neg, one too large wherever its input is not contiguous (a sample's own transposed case finds it)."""
    return x * -1 + (0 if x.is_contiguous() else 1)


def test_past_the_deadline_a_unit_runs_only_its_samples_own_cases_and_counts_the_others_it_left_out():
    everything = outcomes(run_unit(UNIT, config()))
    assert any(own(o.case) for o in everything) and any(o.case.edits for o in everything) and any(o.case.oracle for o in everything)
    events = list(run_unit(UNIT, config(deadline=1.0)))  # a second of 1970: long past
    ran = outcomes(events)
    assert sorted(o.case.id for o in ran) == sorted(o.case.id for o in everything if own(o.case))
    others = sum(not own(o.case) for o in everything)
    assert ("note", f"time {others}/{others}") in events


def test_before_the_deadline_every_case_runs_and_nothing_is_said():
    events = list(run_unit(UNIT, config(deadline=time.time() + 3600)))
    assert sorted(o.case.id for o in outcomes(events)) == sorted(o.case.id for o in outcomes(run_unit(UNIT, config())))
    assert not [payload for kind, payload in events if kind == "note" and payload.startswith("time")]


def test_a_bug_in_a_samples_own_case_is_found_past_the_deadline_and_the_summary_says_what_was_left_out(plant, run_sweep):
    plant("neg", neg_wrong_when_transposed)
    result = run_sweep(config(time_target=1e-6, shrink=False))  # its sweep's share ends as it begins
    assert result.findings
    assert {(f.opinfo, dict(f.layouts).get("input"), f.reference) for f in result.findings} == {("neg", "transposed", "layout")}
    [(kind, text)] = [note for note in run_notes(result.notes, result.run.config, {}) if note[0] == "time"]
    assert text.startswith("the time target (1e-06 s) left out ") and "of 1 op-and-dtype unit(s)" in text


def test_the_same_run_without_the_plant_is_clean(run_sweep):
    result = run_sweep(config(time_target=1e-6, shrink=False))
    assert not result.findings and result.statuses.get("pass")


def test_a_replay_has_no_deadline():
    [replayed] = outcomes(run_unit(UNIT, config(deadline=1.0), only="neg|functional|float32|cpu|s0|contiguous|@vmap:forward"))
    assert replayed.case.oracle == "vmap:forward"


def test_the_stages_of_a_unit_run_its_cases_between_them_once_the_slow_oracles_last():
    staged = config(oracles=("vmap", "compile:sampled"), layouts=("contiguous",), samples=1)
    everything = sorted(o.case.id for o in outcomes(run_unit(UNIT, staged)))
    stage = {name: [o.case for o in outcomes(run_unit(UNIT, staged, Leaving(set(), Part(0, 1, name))))] for name in STAGES}
    assert sorted(c.id for cases in stage.values() for c in cases) == everything
    assert all(not c.edits and not c.oracle.startswith("compile") for c in stage["base"]) and any(c.oracle for c in stage["base"])
    assert all(c.edits and not c.oracle.startswith("compile") for c in stage["searched"])
    assert stage["slow"] and all(c.oracle.startswith("compile") for c in stage["slow"])


def test_a_searched_parts_own_slice_ends_its_searched_cases_before_the_runs_deadline():
    # the run's deadline an hour away, the part's slice long past: its searched cases are left out, counted
    events = list(run_unit(UNIT, config(deadline=time.time() + 3600), Leaving(set(), Part(0, 1, "searched", until=1.0))))
    assert not outcomes(events)
    assert [payload for kind, payload in events if kind == "note" and payload.startswith("time ")]


def test_every_prefix_of_the_spread_order_is_spread_over_the_whole_list():
    items = list(range(16))
    ordered = deadline.spread(items)
    assert sorted(ordered) == items and ordered[:4] == [0, 8, 4, 12]
    assert deadline.spread(list(range(5))) == [0, 4, 2, 1, 3] and deadline.spread([]) == [] and deadline.spread([7]) == [7]


def test_the_clock_lets_a_samples_own_case_run_always_and_the_others_until_the_deadline():
    from torchsleuth.cases.records import Case

    plain = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0)
    searched = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0, edits=("values:input=nan",))
    late = deadline.Clock(deadline=1.0)
    assert late.runs(plain) and not late.runs(searched) and late.note() == "time 1/1"
    early = deadline.Clock(deadline=time.time() + 3600)
    assert early.runs(searched) and early.note() is None
    assert deadline.Clock().runs(searched)
    assert deadline.deadline(0) == 0.0 and deadline.deadline(100, now=1000.0) == 1000.0 + deadline.SHARE * 100
    assert deadline.earliest(0.0, 5.0, 3.0) == 3.0 and deadline.earliest(0.0, 0.0) == 0.0


def test_a_pointed_run_has_the_time_target_a_catalog_run_none_and_it_is_not_part_of_what_is_swept():
    assert depth(SweepConfig(), deep=True).time_target == POINTED_SECONDS
    assert depth(SweepConfig(time_target=30.0), deep=True, given={"time_target"}).time_target == 30.0
    assert depth(SweepConfig(), deep=False).time_target == 0.0
    assert SweepConfig(time_target=30.0, deadline=5.0).key() == SweepConfig().key()  # a rerun with another target resumes


@pytest.mark.parametrize("given", ["abc", "-5", "inf", "2h"])
def test_a_bad_time_target_is_refused_saying_what_is_allowed(given, capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        main(["ops", "--ops", "neg", "--time", given, "--out", str(tmp_path)])
    assert exited.value.code == ExitCode.USAGE
    assert "--time" in capsys.readouterr().err


def test_the_time_target_given_on_the_command_line_reaches_the_run(tmp_path, capsys):
    argv = ["ops", "--ops", "neg", "--dtypes", "float32", "--variants", "functional", "--layouts", "contiguous", "--workers", "0",
            "--no-shrink", "--no-progress", "--out", str(tmp_path), "--db", str(tmp_path / "runs.db"), "--time", "0.000001",
            "--oracles", "vmap"]
    assert main(argv) == ExitCode.CLEAN
    out = capsys.readouterr().out
    assert "note (time): the time target (1e-06 s) left out" in " ".join(out.split())


def test_an_oracles_case_begins_only_where_the_slowest_of_its_form_so_far_would_end_by_the_sweeps_deadline(monkeypatch):
    from torchsleuth.cases.records import Case

    monkeypatch.setattr(deadline, "_slowest", {})
    span = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0, oracle="large:span=8388611")
    compiled = dataclasses.replace(span, oracle="compile:static")
    searched = Case(op="neg", variant="functional", dtype="float32", device="cpu", sample=0, edits=("values:input=nan",))
    # the part's slice and the sweep's deadline both half a minute away
    clock = deadline.Clock(deadline=time.time() + 30, end=time.time() + 30)
    assert clock.runs(span)  # the first of its form: no estimate, time is left
    deadline.took(span, 45.0)
    deadline.took(compiled, 2.0)
    assert deadline.expected(span) == 45.0 and deadline.expected(searched) == 0.0
    chain = dataclasses.replace(span, oracle="compile:chain:abs>@")
    deadline.took(chain, 7.0)
    assert deadline.form(chain) == "compile:chain" and deadline.expected(dataclasses.replace(span, oracle="compile:chain:@>sum")) == 7.0
    assert not clock.runs(span) and clock.note() == "time 1/2"  # 45 s would end past the deadline
    assert clock.runs(compiled) and clock.runs(searched)  # another form's estimate fits; a searched case has none
    assert deadline.Clock(deadline=time.time() + 30, end=time.time() + 60).runs(span)  # a later sweep deadline holds it


def test_a_unit_leaves_out_an_oracles_cases_that_would_not_end_in_time_and_learns_how_long_they_take(monkeypatch):
    monkeypatch.setattr(deadline, "_slowest", {})
    everything = outcomes(run_unit(UNIT, config()))
    vmap = [o.case for o in everything if o.case.oracle.startswith("vmap")]
    assert vmap and deadline.expected(vmap[0]) > 0  # the engine told the clock what its cases took
    for case in vmap:
        deadline.took(case, 3600.0)  # as if one of each form had taken an hour
    events = list(run_unit(UNIT, config(deadline=time.time() + 600)))
    ran = outcomes(events)
    assert not [o for o in ran if o.case.oracle.startswith("vmap")] and [o for o in ran if o.case.edits]
    assert [payload for kind, payload in events if kind == "note" and payload.startswith("time ")]
