"""The time target after the sweep (run.deadline.finish): shrinking and diagnosis begin nothing that would end past
the run's end; a finding left is kept as found, a neighbour left untried, and the summary counts both."""

from __future__ import annotations

import re
import time

import pytest

from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.report.notes import run_notes
from torchsleuth.run import deadline
from torchsleuth.shrink import stage
from torchsleuth.shrink.diagnose import diagnose
from torchsleuth.store.sqlite import Store


def config(**extra) -> SweepConfig:
    spec = dict(ops=resolve_ops("neg"), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "transposed", "strided"),
                samples=2, workers=0, search=(), oracles=()) | extra
    return SweepConfig(**spec)


def neg_wrong_when_transposed(x):
    """aten::neg, one too large wherever its input is not contiguous."""
    return x * -1 + (0 if x.is_contiguous() else 1)


@pytest.fixture
def replays(monkeypatch):
    """The cases the shrink stage runs (shrinking and diagnosis), by id."""
    ran = []
    real = stage.run_case

    def counted(case, *args, **kwargs):
        ran.append(case.id)
        return real(case, *args, **kwargs)

    monkeypatch.setattr(stage, "run_case", counted)
    return ran


def test_a_finding_whose_replay_would_end_past_the_runs_end_is_kept_as_found_unreplayed_and_counted(plant, run_sweep, replays):
    plant("neg", neg_wrong_when_transposed)
    result = run_sweep(config(time_target=1e-6))  # the run's end comes as it begins
    assert result.findings and {(f.opinfo, f.reference) for f in result.findings} == {("neg", "layout")}
    assert {f.id: (result.shrunk[f.id].status, result.shrunk[f.id].reason) for f in result.findings} == \
        {f.id: ("kept", stage.OUT_OF_TIME) for f in result.findings}
    assert replays == []  # nothing replayed, nothing diagnosed
    n = len(result.findings)
    assert ("time-after", f"shrinking {n}/{n}") in result.notes
    assert said_after(result) == [f"the time target (1e-06 s) ran out while shrinking and diagnosing: {n} of {n} finding(s) unshrunk (each kept "
                    "as found: its repro script is the case that failed); --time 0 shrinks and diagnoses them all"]


def said_after(result) -> list[str]:
    return [text for kind, text in run_notes(result.notes, result.run.config, {}) if kind == "time" and "shrinking" in text]


def test_with_time_left_the_same_findings_are_shrunk_and_diagnosed_and_nothing_is_said(plant, run_sweep, replays):
    plant("neg", neg_wrong_when_transposed)
    result = run_sweep(config(time_target=3600))
    assert result.findings and all(result.shrunk[f.id].status == "shrunk" for f in result.findings)
    assert replays and not said_after(result)
    assert all(text.split(" ")[1].startswith("0/") for kind, text in result.notes if kind == "time-after")


def test_shrinking_again_with_time_shrinks_what_the_target_kept_and_the_summary_says_nothing_was_left(plant, tmp_path, replays):
    """What a resumed run does (a run killed after its shrink stage began goes on from the store)."""
    from torchsleuth import sweep

    plant("neg", neg_wrong_when_transposed)
    db = str(tmp_path / "runs.db")
    first = sweep(config(time_target=1e-6), db=db)
    assert {s.reason for s in first.shrunk.values()} == {stage.OUT_OF_TIME} and said_after(first) and not replays
    store = Store(db)
    try:
        stage.shrink_findings(config(), store, first.run.id)  # no target: time enough
        shrunk, notes = store.shrunk(first.run.id), store.notes(first.run.id)
    finally:
        store.close()
    assert all(shrunk[f.id].status == "shrunk" for f in first.findings) and replays
    assert not [text for kind, text in run_notes(notes, first.run.config, {}) if kind == "time" and "shrinking" in text]


def test_the_clean_run_is_clean(run_sweep):
    result = run_sweep(config(time_target=1e-6))
    assert not result.findings and result.statuses.get("pass")


def shrunk_finding(plant, run_sweep, tmp_path):
    """A shrunk finding of the planted neg, and its replay (what diagnose starts from)."""
    plant("neg", neg_wrong_when_transposed)
    result = run_sweep(config(shrink=True))
    finding = result.findings[0]
    return finding, result.shrunk[finding.id].replay


def slow_runner(seconds: float, real=None):
    """``real`` (the engine's run_case by default), ``seconds`` slower a call."""
    from torchsleuth.engine import run_case

    real = real or run_case

    def run(case, *args, **kwargs):
        time.sleep(seconds)
        return real(case, *args, **kwargs)

    return run


def test_a_diagnosis_tries_no_neighbour_that_would_end_past_its_until_and_says_how_many_it_left(plant, run_sweep, tmp_path):
    finding, replay = shrunk_finding(plant, run_sweep, tmp_path)
    whole = diagnose("g", finding, replay, slow_runner(0.0), dtypes=("float32", "float64"))
    assert whole.untried == 0 and whole.tries >= 3 and "untried" not in whole.sentence
    cut = diagnose("g", finding, replay, slow_runner(0.3), dtypes=("float32", "float64"), until=time.time() + 0.5)
    assert cut.tries == 1 and cut.untried == whole.tries - 1  # the first runs (time is left); a second would end at 0.6 s
    assert cut.sentence.startswith("neg gives wrong values when input is transposed")
    assert cut.sentence.endswith(f"; {cut.untried} of its {whole.tries} neighbours untried (out of time).")


def test_a_run_with_no_target_has_no_end_and_everything_fits():
    assert deadline.finish(config()) == 0.0 and deadline.fits(0.0, 1e9)
    timed = config(time_target=100.0, deadline=1000.0)
    assert deadline.finish(timed) == 1000.0 + (1 - deadline.SHARE) * 100.0
    assert deadline.fits(50.0, 10.0, now=40.0) and not deadline.fits(50.0, 10.1, now=40.0)


def test_the_store_gives_the_seconds_of_each_findings_case(plant, run_sweep, tmp_path):
    plant("neg", neg_wrong_when_transposed)
    result = run_sweep(config(shrink=False))
    store = Store(str(tmp_path / "runs-0.db"))
    try:
        seconds = store.case_seconds(result.run.id)
    finally:
        store.close()
    assert set(seconds) == {f.case_id for f in result.findings} and all(s > 0 for s in seconds.values())


def test_without_a_target_a_groups_diagnosis_ends_with_its_own_seconds_and_says_what_it_left(plant, run_sweep, monkeypatch):
    """A compiled group's neighbours compile, seconds each: a catalog run (no target) diagnoses a slower oracle's group
    within DIAGNOSE_SECONDS times its slower, not for as long as every neighbour takes; the others' in full."""
    from torchsleuth.judge.plugin import Registry

    plant("neg", neg_wrong_when_transposed)
    whole = run_sweep(config())
    assert whole.groups and all(g.diagnosis and "untried" not in g.diagnosis for g in whole.groups)
    monkeypatch.setattr(stage, "run_case", slow_runner(0.3, stage.run_case))
    monkeypatch.setattr(stage, "DIAGNOSE_SECONDS", 0.25)
    monkeypatch.setattr(stage.shrinker, "MAX_SECONDS", 0.25)  # each finding: its replay and the last one
    plain = run_sweep(config())  # the plain group's neighbours are calls: all tried
    assert all(g.diagnosis and "untried" not in g.diagnosis for g in plain.groups)
    monkeypatch.setattr(Registry, "slower", lambda self, case_id: 2.0)  # its cases as slow as a slower oracle's
    cut = run_sweep(config())
    assert [g.id for g in cut.groups] == [g.id for g in whole.groups]
    for g in cut.groups:  # the first neighbour runs; a second would end at 0.6 s
        said = re.search(r"; (\d+) of its (\d+) neighbours untried \(out of time\)\.$", g.diagnosis)
        assert said and int(said[2]) - int(said[1]) == 1 and int(said[1]) >= 2, g.diagnosis


def test_a_shrink_starts_no_candidate_whose_replay_and_the_last_would_end_past_its_seconds(plant, run_sweep):
    from torchsleuth.shrink.shrinker import shrink

    plant("neg", neg_wrong_when_transposed)
    finding = run_sweep(config(shrink=False)).findings[0]
    whole = shrink(finding, slow_runner(0.0), max_seconds=60)
    assert whole.status == "shrunk" and whole.tries > 4
    cut = shrink(finding, slow_runner(0.3), max_seconds=0.8)  # after the first replay, 0.3 + 2 x 0.3 would pass 0.8
    assert cut.tries == 2 and cut.status == "shrunk" and cut.case_id == finding.case_id  # the replay and the last one
