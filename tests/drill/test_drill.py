"""``torchsleuth drill``: every planted class is caught on a clean torch, and a class can be missed.

The drill's answer is only worth something if both of its answers are real:
``test_drill_catches_every_class_with_a_clean_control`` runs the whole thing,
as a user does, and the ``missed`` tests run classes whose plant does not
produce the expected finding (a plant that installs nothing; the real plant
judged against a trigger it does not hit), so that "caught" cannot be what
the drill says regardless. Every test also checks that no plant reached
this process: the drill's plants live only in its sweeps' workers.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from torchsleuth import Case, UsageError
from torchsleuth.cli.main import main
from torchsleuth.drill import BY_NAME, NAMES, drill
from torchsleuth.drill import report
from torchsleuth.drill.runner import judge_control
from torchsleuth.judge.records import Finding


def assert_no_plant_here() -> None:
    """No plant module was imported by this process, and the kernels they replace work here."""
    assert not [name for name in sys.modules if name.startswith("torchsleuth.drill.plants.")]
    x = torch.arange(6.0).reshape(2, 3).t()  # transposed: every plant's condition
    before = x.clone()
    assert torch.equal(torch.neg(x), -before) and torch.equal(x, before)  # neg: not crashing, hanging, mutating
    self = torch.zeros(3, 3).t()
    self.addcmul_(torch.ones(3, 3), torch.full((3, 3), 2.0))  # addcmul_: not dropping its write
    assert torch.equal(self, torch.full((3, 3), 2.0))


# --- the real thing ---------------------------------------------------------------------


@pytest.mark.slow  # 1 to 3 minutes on 2 shared cores: thirteen sweeps, each starting torch in a worker
def test_drill_catches_every_class_with_a_clean_control(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the table's prose on one line
    path = tmp_path / "drill.json"
    status = main(["drill", "--json", str(path)])
    out, err = capsys.readouterr()
    data = json.loads(path.read_text())
    missed = {c["class"]: c["why_missed"] for c in data["classes"] if not c["caught"]}
    assert (status, missed, data["control"]["false_alarms"], data["control"]["problem"]) == (0, {}, [], None), out
    assert data["trustworthy"] is True and data["command"] == "drill" and data["findings"] == []
    assert [c["class"] for c in data["classes"]] == list(NAMES)
    for c in data["classes"]:
        bug, evidence = BY_NAME[c["class"]], c["evidence"]
        assert (evidence["kind"], evidence["reference"], evidence["opinfo"]) == (bug.kind, bug.reference, bug.op)
        assert [(a["name"], a["layout"]) for a in evidence["args"] if a["layout"] != "contiguous"] == list(bug.trigger)
    assert data["control"]["cases"] > 0 and data["cases"] > data["control"]["cases"]
    # a line per class as it finished (stderr), a row per class and the verdict (stdout)
    assert all(f"caught   {name}" in err for name in NAMES), err
    assert all(name in out for name in NAMES) and "trustworthy" in out and "control clean" in out
    assert_no_plant_here()


def test_each_class_plants_one_kernel_of_its_op_for_as_long_as_its_library_lives():
    """The plant modules, which the drill imports only in its sweeps' workers, imported here one at a time: each puts
    a kernel in place of aten's CPU kernel of its class's op (or of the op's backward) and of nothing else, and once
    its library is destroyed aten's kernels are back (so the crash and hang plants are never called here)."""
    for name in NAMES:
        bug = BY_NAME[name]
        module = importlib.import_module(bug.plant)
        try:
            planted = sorted(module.library._op_impls)  # "aten/OVERLOAD/CPU"
        finally:
            module.library._destroy()
            del sys.modules[bug.plant]
        assert len(planted) == 1, (name, planted)
        namespace, overload, key = planted[0].split("/")
        assert (namespace, key) == ("aten", "CPU") and overload.split(".")[0].startswith(bug.op), (name, planted)
    assert_no_plant_here()


# --- missed: the drill can say so ---------------------------------------------------------


@pytest.fixture(scope="module")
def missing(tmp_path_factory):
    """A drill of two classes that must be missed, and the control over them."""
    nothing = tmp_path_factory.mktemp("plants") / "plants_nothing.py"
    nothing.write_text('"""A plant that installs nothing."""\n\nimport torch\n')
    dropped = BY_NAME["dropped_write"]
    classes = [
        dataclasses.replace(dropped, name="unplanted", plant=str(nothing)),
        # the real plant, expected on an argument it leaves alone: found, but not there
        dataclasses.replace(dropped, name="elsewhere", trigger=(("args[0]", "transposed"),)),
    ]
    return drill(classes, workers=2)


def test_a_class_whose_plant_does_nothing_is_missed(missing):
    unplanted = missing.classes[0]
    assert (unplanted.bug.name, unplanted.caught, unplanted.evidence, unplanted.findings) == ("unplanted", False, None, ())
    assert unplanted.cases > 1 and unplanted.why_missed == f"no finding in {unplanted.cases} cases"
    assert missing.control.clean and not missing.trustworthy
    assert_no_plant_here()


def test_a_finding_on_another_layout_than_planted_is_missed(missing):
    elsewhere = missing.classes[1]
    assert (elsewhere.caught, elsewhere.evidence) == (False, None)
    # the plant did fire, on self: the drill says what it found instead
    assert {f.kind for f in elsewhere.findings} == {"dropped_write"} and elsewhere.findings
    assert elsewhere.why_missed.startswith(f"{len(elsewhere.findings)} findings, none the expected one: ")
    assert "dropped_write (layout) on input=transposed" in elsewhere.why_missed


def test_the_draws_class_is_missed_without_the_draws_search():
    # OpInfo's own probabilities lie in (0, 1): a p misread through its strides still draws 0s and 1s they allow
    result = drill([dataclasses.replace(BY_NAME["random_draws"], search=())], workers=1)
    assert (result.classes[0].caught, result.classes[0].findings) == (False, ())
    assert_no_plant_here()


def test_missed_classes_are_reported_as_not_trustworthy(missing):
    console = Console(record=True, width=200)
    report.summary(missing, console=console)
    text = console.export_text()
    assert "missed: no finding in" in text and "missed: 2 findings, none the expected one" in text
    assert "not trustworthy: missed unplanted, elsewhere" in text
    data = report.document(missing)
    assert data["trustworthy"] is False and data["control"]["clean"] is True
    assert [(c["class"], c["caught"], c["evidence"]) for c in data["classes"]] == [("unplanted", False, None), ("elsewhere", False, None)]
    json.dumps(data, allow_nan=False)  # writable as it is


# --- the control --------------------------------------------------------------------------


def finding(case_id: str) -> Finding:
    case = Case.parse(case_id)
    return Finding(
        id=f"f-{case_id}", kind="mismatch", op=case.op, opinfo=case.op, variant=case.variant, dtype=case.dtype,
        device=case.device, reference="layout", case_id=case_id, layouts=case.layouts, summary="",
    )


def test_a_control_finding_on_a_drilled_case_is_a_false_alarm_and_others_are_not():
    classes = [BY_NAME["dropped_write"], BY_NAME["accumulation"]]
    on_drilled = [finding("addcmul|inplace|float32|cpu|s0|input=transposed"), finding("sum|functional|bfloat16|cpu|s20|contiguous")]
    outside = [
        finding("addcmul|out|float32|cpu|s0|contiguous"),  # a variant no class sweeps on addcmul
        finding("addcmul|inplace|bfloat16|cpu|s0|contiguous"),  # a dtype no class sweeps on addcmul
        finding("addcmul|inplace|float32|cpu|s11|contiguous"),  # a sample only the union took
        finding("sum|functional|bfloat16|cpu|s0|input=transposed"),  # a layout no class sweeps on sum
    ]
    swept = SimpleNamespace(findings=tuple(on_drilled + outside), failed_units=(), statuses={"pass": 10}, cases=16)
    control = judge_control(classes, swept, 1.0)
    assert (control.false_alarms, control.outside, control.clean) == (tuple(on_drilled), tuple(outside), False)
    clean = judge_control(classes, SimpleNamespace(findings=tuple(outside), failed_units=(), statuses={"pass": 10}, cases=14), 1.0)
    assert clean.clean and clean.outside == tuple(outside)


def test_a_control_that_could_not_run_cannot_vouch():
    control = judge_control([BY_NAME["crash"]], RuntimeError("no worker"), 1.0)
    assert not control.clean and control.problem == "the control sweep failed: RuntimeError: no worker"


# --- the command line ---------------------------------------------------------------------


def test_unknown_class_is_a_one_line_usage_error_naming_the_allowed(capsys):
    assert main(["drill", "--classes", "dropped_write,dropped_writes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown class 'dropped_writes' (did you mean dropped_write?)" in err
    assert f"allowed: {', '.join(NAMES)}" in err


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_workers_below_one_are_refused_since_plants_must_stay_out_of_this_process(capsys, workers):
    with pytest.raises(SystemExit) as exited:
        main(["drill", "--workers", workers])
    assert exited.value.code == 2 and "--workers" in capsys.readouterr().err
    with pytest.raises(UsageError, match="worker processes"):
        drill([BY_NAME["crash"]], workers=0)


def test_help_explains_what_the_drill_does_and_what_missed_means(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["drill", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert "never in this process" in out and "false alarm" in out
    assert "missed     it was not: on this machine and torch, a sweep that is clean\n             says nothing about bugs of that class" in out
    assert all(name in out for name in NAMES)
