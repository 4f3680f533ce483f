"""torchsleuth shard on what a DTensor is beyond its values: Python numbers ranks read, the spec after an in-place op,
the pointed run's time budget, and repro scripts that check where the simulator refuses.

torch 2.13's DTensor has both bugs for real (bench/shard.md, "Numbers, specs and the pointed run's budget"):
``item()`` of a Partial DTensor gives each rank its own share, and ``squeeze_`` of a replicated DTensor (or of a dim
its shards do not split) leaves the spec with the old shape. Each is asserted found through the command, and the
fix (planted here) or the neighbouring clean cases asserted clean.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from torchsleuth.cases.records import Case
from torchsleuth.shard import support
from shard_plants import scalars_read_replicated

pytestmark = pytest.mark.skipif(bool(support.missing()), reason=support.missing() or "")


def run(case_id: str):
    from torchsleuth.shard.sweep import run_case

    return run_case(Case.parse(case_id))


def shard(tmp_path, *args: str) -> tuple[int, list[dict], str]:
    """``torchsleuth shard ARGS`` in this process, no cross-check, no shrinking: exit status, findings, database."""
    from torchsleuth.cli.main import main

    out = tmp_path / "out"
    code = main(["shard", "--workers", "0", "--gloo", "0", "--no-shrink", "--no-progress", "--out", str(out),
                 "--json", str(out / "f.json"), *args])
    return code, json.loads((out / "f.json").read_text())["findings"], str(out / "runs.db")


def outcomes(db: str) -> list[tuple]:
    from torchsleuth.store.sqlite import Store

    store = Store(db)
    try:
        return store.outcome_rows(1)
    finally:
        store.close()


# --- numbers ranks read differently ----------------------------------------------------------------


def test_item_of_a_partial_dtensor_is_each_ranks_share_a_sharding_mismatch_not_raised(tmp_path):
    # OpInfo's `item`, pointed at as a user would: LocalTensorMode's "Non Tensor or int rank results must be equal
    # for all ranks" used to be filed under "the op raised"
    code, findings, db = shard(tmp_path, "--ops", "item", "--mesh", "2", "--placements", "partial")
    assert code == 1 and findings
    for finding in findings:
        assert finding["kind"] == "sharding_mismatch" and finding["opinfo"] == "item"
        assert finding["op"] == "aten._local_scalar_dense.default"
        assert "each rank returns its own share" in finding["summary"] and "rank 1 " in finding["summary"]
    assert not [r for r in outcomes(db) if "rank results must be equal" in (r[2] or "")]
    with scalars_read_replicated():  # the fix: the number reduced before it is read
        code, findings, _ = shard(tmp_path / "fixed", "--ops", "item", "--mesh", "2", "--placements", "partial")
    assert code == 0 and not findings


def test_a_number_read_then_used_is_left_to_gloo_ranks_by_the_simulator():
    # x / x.sum().item(): each rank goes on with its own number; LocalTensorMode cannot follow each rank
    outcome = run("surface.div_item|functional|float32|cpu|s0|input=Psum|@shard:2")
    assert outcome.status == "skip" and "ranks read different Python numbers" in outcome.reason and not outcome.findings
    from torchsleuth.shard.sweep import run_case

    rechecked = run_case(Case.parse("surface.div_item|functional|float32|cpu|s0|input=Psum|@shard:2"), recheck=True)
    assert "rerun on real gloo ranks" in rechecked.reason
    assert run("surface.div_item|functional|float32|cpu|s0|contiguous|@shard:2").status == "pass"


@pytest.mark.slow
def test_a_number_read_then_used_is_judged_on_gloo_ranks_in_a_sweep(tmp_path):
    code, findings, _ = shard(tmp_path, "--ops", "surface.div_item", "--mesh", "2", "--placements", "partial",
                              "--variants", "functional")
    assert code == 1 and findings
    assert all("@shard-gloo:2" in f["case_id"] and f["kind"] == "sharding_mismatch" for f in findings), findings
    assert {f["args"][0]["layout"] for f in findings} <= {"Psum", "Pavg"}  # max and min are reduced before the read


# --- the spec after an in-place op ------------------------------------------------------------------


def test_squeeze_in_place_of_a_replicated_dtensor_leaves_a_stale_spec_and_is_found(tmp_path):
    code, findings, _ = shard(tmp_path, "--ops", "surface.squeeze_dim_", "--mesh", "2", "--variants", "functional")
    assert code == 1
    stale = [f for f in findings if "no longer describes it" in f["summary"]]
    assert stale and all(f["op"] == "aten.squeeze_.dim" for f in stale)
    replicated = [f for f in stale if all(a["layout"] == "R" for a in f["args"])]
    assert replicated, [f["summary"] for f in stale]
    assert re.search(r"the spec's shape is \[(\d+), 1, (\d+)\], the single-device result's \[\1, \2\]", replicated[0]["summary"])


def test_in_place_ops_whose_spec_is_kept_right_stay_clean():
    for case in ("surface.mul_|functional|float32|cpu|s0|contiguous|@shard:2",  # shape unchanged, fast path right
                 "surface.add_|functional|float32|cpu|s0|contiguous|@shard:2x2",
                 "surface.squeeze_dim_|functional|float32|cpu|s0|input=S1|@shard:2",  # Shard(2) -> Shard(1): spec updated
                 "surface.squeeze_|functional|float32|cpu|s1|input=S0|@shard:2",
                 "sum|functional|float32|cpu|s0|contiguous|@shard:2"):
        outcome = run(case)
        assert outcome.status == "pass", (case, outcome.reason, [f.summary for f in outcome.findings])


# --- the pointed run's time budget -------------------------------------------------------------------


def test_a_pointed_run_over_its_time_budget_runs_an_even_sample_and_says_so(tmp_path):
    from torchsleuth.shard import sweep
    from torchsleuth.store.sqlite import Store

    code, _, db = shard(tmp_path, "--ops", "surface.mul_", "--mesh", "2,3", "--seconds", "0.01")
    rows = outcomes(db)
    left = [r for r in rows if r[2] == sweep.SAMPLED]
    assert rows and left and len(left) < len(rows)  # a case of each part runs before its deadline is looked at
    store = Store(db)
    notes = [detail for kind, detail in store.notes(1) if kind == "sampled"]
    store.close()
    assert notes == [f"surface.mul_: {len(rows) - len(left):,} of {len(rows):,} planned cases run, an even sample within "
                     f"the pointed run's time budget; the other {len(left):,} not run (--seconds 0 runs every case)"]
    code, _, db = shard(tmp_path / "all", "--ops", "surface.mul_", "--mesh", "2,3", "--seconds", "0")
    assert not [r for r in outcomes(db) if r[2] == sweep.SAMPLED]


# --- the repro script checks where the simulator refuses ---------------------------------------------------


@pytest.mark.slow
def test_the_docs_example_repro_script_checks_in_its_default_mode_on_gloo_ranks_of_its_own(tmp_path):
    from torchsleuth.cli.main import main

    out = tmp_path / "out"
    # docs/shard.md's example, as a user runs it
    assert main(["shard", "--ops", "surface.item_sum", "--mesh", "2", "--placements", "partial", "--gloo", "0",
                 "--no-progress", "--workers", "0", "--out", str(out)]) == 1
    script = sorted((out / "repros").glob("f-*.py"))[0]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "LocalTensorMode cannot check it (AssertionError" in done.stdout and "running on 2 gloo processes" in done.stdout
    assert "BUG PRESENT (real process groups)" in done.stdout


@pytest.mark.slow
def test_a_pointed_runs_gloo_cross_check_stops_at_its_budget_and_says_how_many_it_checked(tmp_path, monkeypatch):
    from torchsleuth.cli.main import main
    from torchsleuth.shard import sweep
    from torchsleuth.store.sqlite import Store

    monkeypatch.setattr(sweep, "GLOO_SECONDS", 0.001)  # spent by the first case (its group's start)
    out = tmp_path / "out"
    main(["shard", "--ops", "surface.mul_", "--mesh", "2,3", "--workers", "0", "--gloo", "4", "--no-shrink",
          "--no-progress", "--out", str(out)])
    store = Store(str(out / "runs.db"))
    checked = [r for r in store.outcome_rows(1) if "@shard-gloo:" in r[0]]
    notes = [detail for kind, detail in store.notes(1) if kind == "gloo"]
    store.close()
    assert len(checked) == 1 and checked[0][1] == "pass"
    assert notes == ["gloo cross-check: 1 of 4 cases within the pointed run's budget (0.001 s; smallest meshes first)"]
