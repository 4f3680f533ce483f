"""The refusal differential (shrink.refusals): a device that returns where the CPU refuses the same values is a finding.

On a CPU-only machine the device is simulated (tests/refusal_plants.py and the ``asserting`` fixture say how).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from refusal_plants import SIMULATED, UNCHECKED

from torchsleuth.config import SweepConfig
from torchsleuth.run import references
from torchsleuth.shrink import refusals
from torchsleuth.store.sqlite import Store
from torchsleuth.sweep import depth, sweep

pytestmark = pytest.mark.slow


def _config() -> SweepConfig:
    config = SweepConfig(ops=("index_select",), dtypes=("float32",), variants=("functional",), layouts=("contiguous", "empty"),
                         workers=0, shrink=False)
    return depth(config, deep=True, given={"oracles"})


def _replayed(db_dir):
    db = db_dir / "runs.db"
    sweep(_config(), db=db)
    store = Store(db)
    run_id = store.runs()[-1].id
    return store.findings(run_id), dict(store.notes(run_id)), {r[0]: r[2] for r in store.outcome_rows(run_id)}


def test_a_device_that_returns_where_the_cpu_refuses_is_found_and_its_script_shows_both(tmp_path):
    plant = tmp_path / "unchecked_plant.py"
    plant.write_text(SIMULATED)
    out = tmp_path / "out"
    ran = subprocess.run([sys.executable, "-m", "torchsleuth.cli.main", "ops", "--ops", "index_select", "--dtypes", "float32", "--variants",
                          "functional", "--layouts", "contiguous,empty", "--oracles", "none", "--import", str(plant), "--workers", "1",
                          "--out", str(out), "--json", str(tmp_path / "f.json"), "--no-progress"], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    document = json.loads((tmp_path / "f.json").read_text())
    found = [f for f in document["findings"] if f["kind"] == "unchecked_input"]
    assert found, ran.stdout
    # the triggers: the layout that emptied the index, and the bounds search's indices (planned on the simulated device)
    layouts = {a.get("layout") for f in found for a in f["args"]}
    edits = {e for f in found for e in f["case_id"].split("|") if e.startswith("bound:")}
    assert "empty" in layouts and {"bound:args[1]=past", "bound:args[1]=negative"} <= edits, (layouts, edits)
    finding = next(f for f in found if any(a.get("layout") == "empty" for a in f["args"]))
    assert "index_select" in finding["op"] and finding["reference"] == "contract"
    assert "the CPU refuses this call with IndexError" in finding["summary"] and "returned without error" in finding["summary"]
    assert "sent to cpu alone" in ran.stdout  # the note: what was sent and what came of it
    # the script imports what the run imported: with the plant, the CPU refuses (it checks in reference()) and the
    # "device" returns: exit 1; with the module emptied (untouched torch), the device refuses too: exit 0
    script = out / "repros" / f"{finding['id']}.py"
    results = {}
    for name, source in (("planted", UNCHECKED), ("clean", "")):
        plant.write_text(source)
        results[name] = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert results["planted"].returncode == 1, results["planted"].stdout + results["planted"].stderr
    assert "the CPU refuses it" in results["planted"].stdout and "BUG PRESENT" in results["planted"].stdout
    assert results["clean"].returncode == 0, results["clean"].stdout + results["clean"].stderr
    assert "refuses it too" in results["clean"].stdout


def test_a_device_that_refuses_too_stays_loud(asserting, tmp_path):
    findings, notes, reasons = _replayed(tmp_path)
    assert not [f for f in findings if f.kind == "unchecked_input"]
    replayed = [r for r in reasons.values() if r.startswith(refusals.REPLAYED)]
    assert replayed and all("refuses it too" in r for r in replayed)
    assert "0 returned without error" in notes["refusals"]


def test_the_choice_spreads_over_each_units_refused_cases_and_reads_the_cpus_words():
    words = "IndexError: index out of range in self"
    rows = [(f"index_select|functional|float32|cuda|s{i}|input=empty", "raised",
             f"the contiguous reference raised: Refused: {references.REFUSED} ({words}) and takes the sample's own; not sent", 0.0)
            for i in range(10)]
    rows.append(("index_select|functional|float32|cuda|s0|contiguous", "raised", "IndexError: something else", 0.0))
    found = refusals.refused(rows)
    assert len(found) == 10 and set(found.values()) == {words}
    jobs = refusals.chosen(found, 4)
    assert len(jobs) == 1 and len(jobs[0].cases) == 4 and len(set(jobs[0].cases)) == 4
    # a replayed case's reason no longer reads as refused: a resumed sweep does not send it again
    assert not refusals.refused([(rows[0][0], "raised", refusals.REPLAYED + "cuda refuses it too: ...", 0.0)])


def test_a_replay_job_past_its_time_begins_no_case_and_the_note_says_how_many_were_left(asserting, tmp_path, monkeypatch):
    # Every job's time is up before its first case (the limit below zero): none is sent, every one is left, and the
    # refused outcomes stay as they were; a replay alone (``only``) is not held to it.
    monkeypatch.setattr(refusals, "MIN_SECONDS", -1.0)
    monkeypatch.setattr(refusals, "SHARE", 0.0)
    findings, notes, reasons = _replayed(tmp_path)
    assert notes["refusals"].startswith("0 of ") and "more left for the time limit" in notes["refusals"]
    assert not [r for r in reasons.values() if r.startswith(refusals.REPLAYED)]
    job = refusals.Replay(key="k", cases=("index_select|functional|float32|cpu|s0|input=empty",), words=("IndexError",), until=1.0)
    assert not list(refusals.work(job, _config(), frozenset(), None, lost_raises=False))
    alone = list(refusals.work(job, _config(), frozenset(), job.cases[0], lost_raises=False))
    assert [kind for kind, _ in alone] == ["begin", "outcome"]
