"""``torchsleuth diff``: new, fixed, still failing and not rerun groups between two stored runs.

Three real runs, swept once for the module (each a second or two): in-place
``addcmul_`` on contiguous and transposed tensors with a planted kernel that
drops its writes on a non-contiguous ``self`` (``planted.db``), the same
sweep on the real kernel (``clean.db`` run 1), and a sweep of another op
(``clean.db`` run 2), which judges none of addcmul's cases. The runs sit in
two files, so every diff here also crosses databases.

The honesty rules that need no sweep (device reference, cases that raise,
two devices) are checked on hand-made records at the end.
"""

from __future__ import annotations

import json
import time
import warnings

import pytest
import torch

from torchsleuth import Finding, SweepConfig, resolve_ops, sweep
from torchsleuth.cli.main import main
from torchsleuth.report import diff as diffing
from torchsleuth.report.groups import group, of_run
from torchsleuth.store.runs import open_run
from torchsleuth.store.sqlite import RunInfo

ADDCMUL = dict(dtypes=("float32",), variants=("inplace",), layouts=("contiguous", "transposed"), samples=1, workers=0)


def addcmul_dropping_writes(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the planted bug: the write never lands
    return self.copy_(torch.add(self, torch.mul(torch.mul(tensor1, tensor2), value)))


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diff")
    planted, clean = folder / "planted.db", folder / "clean.db"
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            library.impl("addcmul_", addcmul_dropping_writes, "CPU")
        found = sweep(SweepConfig(ops=resolve_ops("addcmul"), **ADDCMUL), db=str(planted))
    finally:
        library._destroy()
    assert found.findings and {f.kind for f in found.findings} == {"dropped_write"}, found.statuses
    assert not sweep(SweepConfig(ops=resolve_ops("addcmul"), **ADDCMUL), db=str(clean)).findings
    other = sweep(SweepConfig(ops=resolve_ops("neg"), **ADDCMUL), db=str(clean))
    assert other.run.id == 2 and other.statuses.get("pass"), other.statuses
    return {"planted": str(planted), "clean": f"{clean}:1", "other op": f"{clean}:2", "folder": folder}


def compare(spec_a: str, spec_b: str) -> diffing.Diff:
    store_a, run_a = open_run(spec_a)
    store_b, run_b = open_run(spec_b)
    try:
        return diffing.between(store_a, run_a, store_b, run_b)
    finally:
        store_a.close()
        store_b.close()


def planted_groups(dbs) -> dict[str, int]:
    """Group id -> findings, in the planted run."""
    store, run = open_run(dbs["planted"])
    try:
        _, groups = of_run(store, run.id)  # as the run's own report groups them (shrunk cases, if shrunk)
    finally:
        store.close()
    return {g.id: len(g.findings) for g in groups}


def ids(changes) -> set[str]:
    return {change.id for change in changes}


def run_cli(capsys, monkeypatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "250")  # rich folds nothing in a wide table
    code = main(["diff", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_bug_that_appears_is_new_a_regression_and_exits_1(dbs, capsys, monkeypatch):
    result = compare(dbs["clean"], dbs["planted"])
    expected = planted_groups(dbs)
    assert ids(result.new) == set(expected)
    assert not result.fixed and not result.still and not result.not_rerun
    # the clean run judged and passed the very cases that fail now
    assert {c.id: c.passed_by_other for c in result.regressions} == expected
    assert all(c.kind == "dropped_write" and c.op == "aten.addcmul_.default" and c.layouts == ("transposed",) for c in result.new)

    code, out, err = run_cli(capsys, monkeypatch, dbs["clean"], dbs["planted"])
    assert code == 1, err
    assert f"{len(expected)} new ({len(expected)} regressions), 0 fixed, 0 still failing, 0 not rerun" in out
    assert "regression: run 1 passed" in out
    # the hint names a finding of the new group and the database that has it
    assert f"torchsleuth repro {result.new[0].id} --db {dbs['planted']}" in out


def test_a_bug_that_goes_away_is_fixed_and_exits_0(dbs, capsys, monkeypatch):
    result = compare(dbs["planted"], dbs["clean"])
    expected = planted_groups(dbs)
    assert ids(result.fixed) == set(expected)
    assert {c.id: c.passed_by_other for c in result.fixed} == expected
    assert not result.new and not result.still and not result.not_rerun

    code, out, err = run_cli(capsys, monkeypatch, dbs["planted"], dbs["clean"])
    assert code == 0, err
    assert f"0 new (0 regressions), {len(expected)} fixed" in out


def test_a_bug_in_both_runs_is_still_failing(dbs, capsys, monkeypatch):
    result = compare(dbs["planted"], dbs["planted"])
    assert ids(result.still) == set(planted_groups(dbs))
    assert not result.new and not result.fixed and not result.not_rerun
    assert all(c.findings_a == c.findings_b for c in result.still)

    code, out, _ = run_cli(capsys, monkeypatch, dbs["planted"], dbs["planted"])
    assert code == 0  # still failing is not news
    assert f"{len(result.still)} still failing" in out


def test_a_group_the_second_run_never_judged_is_not_rerun_never_fixed(dbs, capsys, monkeypatch):
    result = compare(dbs["planted"], dbs["other op"])
    assert ids(result.not_rerun) == set(planted_groups(dbs))
    assert not result.fixed and not result.new and not result.still
    assert all(c.passed_by_other == 0 and "did not run" in c.why for c in result.not_rerun)

    code, out, _ = run_cli(capsys, monkeypatch, dbs["planted"], dbs["other op"])
    assert code == 0
    assert f"0 fixed, 0 still failing, {len(result.not_rerun)} not rerun" in out


def test_a_new_group_the_first_run_never_judged_is_new_but_no_regression(dbs):
    result = compare(dbs["other op"], dbs["planted"])
    assert ids(result.new) == set(planted_groups(dbs))
    assert result.regressions == ()
    assert all("did not run" in c.why for c in result.new)


def test_json_lists_every_group_with_both_runs(dbs, capsys, monkeypatch):
    path = dbs["folder"] / "changes.json"
    code, out, _ = run_cli(capsys, monkeypatch, dbs["clean"], dbs["planted"], "--json", str(path))
    assert code == 1
    assert f"comparison written to {path}" in out
    data = json.loads(path.read_text())
    expected = planted_groups(dbs)
    assert (data["tool"], data["command"]) == ("torchsleuth", "diff")
    assert (data["a"]["run"], data["a"]["database"], data["b"]["database"]) == (1, dbs["clean"].removesuffix(":1"), dbs["planted"])
    assert data["a"]["torch"] == torch.__version__ and data["b"]["finished"] is not None
    assert data["counts"] == {"new": len(expected), "regressions": len(expected), "fixed": 0, "still": 0, "not_rerun": 0}
    assert {entry["group"]: len(entry["findings_b"]) for entry in data["new"]} == expected
    for entry in data["new"]:
        assert entry["findings_a"] == [] and entry["kind"] == "dropped_write" and entry["why"] is None
        assert "drops its writes" in entry["summary"]


def test_runs_named_by_id_in_one_database(dbs, capsys, monkeypatch):
    clean_db = dbs["clean"].removesuffix(":1")
    code, out, _ = run_cli(capsys, monkeypatch, "2", "1", "--db", clean_db)
    assert code == 0
    assert "0 new (0 regressions), 0 fixed, 0 still failing, 0 not rerun" in out
    assert "neither run has findings" in out


@pytest.mark.parametrize("argv, fragments", [
    (["1", "2"], ["no database at 'missing.db'"]),
    (["{clean_db}:7", "{clean_db}"], ["no run 7 in", "it holds runs 1, 2"]),
    (["{clean_db}", "notes.txt"], ["'notes.txt' is not a torchsleuth database"]),
    (["{clean_db}", "seven"], ["cannot read 'seven' as a run", "a run id, 'latest'"]),
    (["{clean_db}", "{clean_db}", "--json", "notes.txt/x.json"], ["cannot write the --json file"]),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(dbs, argv, fragments, tmp_path, monkeypatch, capsys):
    (tmp_path / "notes.txt").write_text("not a database\n")
    monkeypatch.chdir(tmp_path)
    clean_db = dbs["clean"].removesuffix(":1")
    code, out, err = run_cli(capsys, monkeypatch, *[a.format(clean_db=clean_db) for a in argv], "--db", "missing.db")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("torchsleuth diff: error: "), err
    assert all(fragment in err for fragment in fragments), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_help_explains_run_forms_exit_status_and_examples(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["diff", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for fragment in ("PATH:7", "latest", "not rerun", "exit status: 1 when RUN_B has new groups", "examples:", "torchsleuth runs"):
        assert fragment in text, fragment


# --- the honesty rules, on hand-made records ----------------------------------------------


def info(run_id: int, device: str = "cpu") -> RunInfo:
    return RunInfo(id=run_id, key="k", command="ops", device=device, config={}, torch=torch.__version__, version="0",
                   started=time.time(), finished=time.time(), seconds=1.0)


def finding(case_id: str, *, kind: str = "mismatch", reference: str = "layout") -> Finding:
    op, variant, dtype, device, _, placed = case_id.split("|")
    layouts = () if placed == "contiguous" else tuple(tuple(p.split("=")) for p in placed.split(","))
    return Finding(id=f"f-{abs(hash((case_id, kind))):x}"[:12], kind=kind, op=f"aten.{op}.default", opinfo=op, variant=variant,
                   dtype=dtype, device=device, reference=reference, case_id=case_id, layouts=layouts, summary="wrong")


def side(run: RunInfo, findings: list[Finding], statuses: dict[str, str] | None = None) -> diffing.Side:
    return diffing.Side(run=run, findings=tuple(findings), groups=tuple(group(findings)), statuses=statuses or {})


def test_two_devices_are_compared_case_by_case():
    # found on the CPU, passed by the same case on cuda: fixed there
    found = finding("sum|functional|float32|cpu|s0|input=transposed")
    cuda_case = "sum|functional|float32|cuda|s0|input=transposed"
    assert diffing.counterparts([found], info(2, "cuda")) == {cuda_case}
    result = diffing.diff(side(info(1), [found]), side(info(2, "cuda"), [], {cuda_case: "pass"}))
    assert [c.passed_by_other for c in result.fixed] == [1] and not result.not_rerun


def test_a_pass_on_another_sample_or_dtype_is_no_recheck():
    found = finding("sum|functional|float32|cpu|s0|input=transposed")
    elsewhere = {"sum|functional|float32|cpu|s1|input=transposed": "pass", "sum|functional|float64|cpu|s0|input=transposed": "pass",
                 "sum|functional|float32|cpu|s0|contiguous": "pass"}
    result = diffing.diff(side(info(1), [found]), side(info(2), [], elsewhere))
    assert not result.fixed and [c.why for c in result.not_rerun] == ["run 2 did not run its case"]


def test_cases_that_now_raise_or_have_other_findings_are_not_rerun_and_say_so():
    dropped = [finding(f"addcmul_|inplace|float32|cpu|s{i}|input=transposed", kind="dropped_write", reference="contract") for i in range(3)]
    other = finding("addcmul_|inplace|float32|cpu|s2|input=transposed", kind="crash", reference="isolation")
    statuses = {dropped[0].case_id: "raised", dropped[1].case_id: "skip", other.case_id: "finding"}
    result = diffing.diff(side(info(1), dropped), side(info(2), [other], statuses))
    assert not result.fixed and len(result.not_rerun) == 1
    why = result.not_rerun[0].why
    assert why.startswith("run 2 passed none of its 3 cases: "), why
    assert "1 raised" in why and "1 skipped" in why and f"1 had other findings (in group {group([other])[0].id})" in why
    assert [c.kind for c in result.new] == ["crash"]


def test_a_device_reference_finding_is_never_fixed_by_a_cpu_run():
    # a CPU run passes the case without ever comparing against the CPU
    found = finding("sum|functional|float32|cuda|s0|contiguous", reference="device")
    result = diffing.diff(side(info(1, "cuda"), [found]), side(info(2), [], {"sum|functional|float32|cpu|s0|contiguous": "pass"}))
    assert not result.fixed and "device reference" in result.not_rerun[0].why
    # while another run on a device does recheck it
    result = diffing.diff(side(info(1, "cuda"), [found]), side(info(2, "cuda:1"), [], {"sum|functional|float32|cuda:1|s0|contiguous": "pass"}))
    assert len(result.fixed) == 1
