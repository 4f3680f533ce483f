"""The findings file against DESIGN.md's contract, and the first-cut grouping.

Findings come from a real sweep of one op with a planted bug: ``addcmul_``
drops its write when ``self`` is not contiguous (scoped with ``torch.library``,
destroyed before the test ends).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import pytest
import torch

from torchsleuth._version import __version__
from torchsleuth.cases.records import Unit
from torchsleuth.config import SweepConfig
from torchsleuth.engine import run_unit
from torchsleuth.judge.records import KINDS, REFERENCES, Finding
from torchsleuth.report import findings_file, repro
from torchsleuth.report.groups import Group, group

# The contract, from DESIGN.md "Findings file": field -> JSON types allowed.
TOP = {
    "tool": (str,), "version": (str,), "torch": (str,), "command": (str,), "device": (str,),
    "cases": (int,), "seconds": (int, float), "findings": (list,), "groups": (list,),
    "flaky": (list,),  # findings that did not recur on replay (not bugs)
    "internal_failures": (list,),  # crashes no standalone script reproduces (torchsleuth's own)
}
FINDING = {
    "id": (str,), "op": (str,), "kind": (str,), "variant": (str,), "dtype": (str,), "device": (str,),
    "reference": (str,), "args": (list,), "max_abs_err": (int, float, type(None)),
    "tolerance": (dict, type(None)), "summary": (str,), "group": (str, type(None)), "repro": (str, type(None)),
}
EXTRA = {"opinfo", "case_id", "detail", "mismatch", "found_as"}
ARG = {"name": (str,), "shape": (list, type(None)), "stride": (list, type(None)), "storage_offset": (int, type(None)), "layout": (str,)}
GROUP = {"id": (str,), "summary": (str,), "diagnosis": (str, type(None)), "findings": (list,)}


def _addcmul_dropping_writes(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the planted bug
    return self.copy_(self + tensor1 * tensor2 * value)


@pytest.fixture(scope="module")
def findings() -> list[Finding]:
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            library.impl("addcmul_", _addcmul_dropping_writes, "CPU")
        config = SweepConfig(ops=("addcmul",), variants=("inplace",), samples=1, layouts=("contiguous", "transposed", "strided"))
        events = list(run_unit(Unit(op="addcmul", dtype="float32", device="cpu"), config))
    finally:
        library._destroy()
    found = [f for kind, outcome in events if kind == "outcome" for f in outcome.findings]
    assert {f.kind for f in found} == {"dropped_write"}
    return found


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_fields(record: dict, fields: dict, extra: set = frozenset()) -> None:
    assert set(fields) <= set(record), f"missing {set(fields) - set(record)}"
    assert set(record) <= set(fields) | extra, f"unexpected {set(record) - set(fields) - extra}"
    for name, types in fields.items():
        value = record[name]
        assert isinstance(value, types) and not (isinstance(value, bool) and bool not in types), f"{name}: {value!r}"


def written(findings, tmp_path, **overrides):
    groups = group(findings)
    paths = repro.write_scripts(findings, tmp_path)
    arguments = dict(
        command="ops", device="cpu", torch_version=torch.__version__, cases=151, seconds=1.25,
        findings=findings, groups=groups, repro_paths=paths,
    )
    arguments.update(overrides)
    path = findings_file.write(tmp_path / "findings.json", **arguments)
    return strict_json(path.read_text()), groups


def test_file_follows_the_contract(findings, tmp_path):
    data, groups = written(findings, tmp_path)
    check_fields(data, TOP)
    assert (data["tool"], data["version"], data["torch"]) == ("torchsleuth", __version__, torch.__version__)
    assert (data["command"], data["device"], data["cases"], data["seconds"]) == ("ops", "cpu", 151, 1.25)
    assert [f["id"] for f in data["findings"]] == [f.id for f in findings]
    group_ids = {g["id"] for g in data["groups"]}
    for record, finding in zip(data["findings"], findings):
        check_fields(record, FINDING, EXTRA)
        assert record["kind"] in KINDS and record["reference"] in REFERENCES
        assert (record["op"], record["kind"], record["variant"], record["dtype"]) == (
            "aten.addcmul_.default", "dropped_write", "inplace", "float32")
        assert record["summary"] == finding.summary and record["case_id"] == finding.case_id
        for arg, spec in zip(record["args"], finding.call.tensors, strict=True):
            check_fields(arg, ARG)
            assert arg == {"name": spec.path, "shape": list(spec.shape), "stride": list(spec.stride),
                           "storage_offset": spec.storage_offset, "layout": spec.layout}
        assert set(record["tolerance"]) == {"atol", "rtol"}
        assert record["tolerance"] == {"atol": finding.mismatch.atol, "rtol": finding.mismatch.rtol}
        assert record["max_abs_err"] == pytest.approx(finding.mismatch.max_abs_err)
        assert record["mismatch"]["path"] == "input" and record["mismatch"]["attribute"] == "values"
        assert record["group"] in group_ids and record["id"] in next(g["findings"] for g in data["groups"] if g["id"] == record["group"])
        # the repro path is relative to the findings file, and the script is there
        assert record["repro"] == f"repros/{record['id']}.py"
        assert (tmp_path / record["repro"]).read_text() == repro.script(finding)
    for record, g in zip(data["groups"], groups, strict=True):
        check_fields(record, GROUP)
        assert record == {"id": g.id, "summary": g.summary, "diagnosis": g.diagnosis or None, "findings": list(g.findings)}
    assert sorted(i for g in data["groups"] for i in g["findings"]) == sorted(f.id for f in findings)


def test_absent_and_non_finite_values_are_null(findings, tmp_path):
    finding = findings[0]
    infinite = dataclasses.replace(finding, id="f-infinite",
                                   mismatch=dataclasses.replace(finding.mismatch, max_abs_err=math.inf, allowed=math.nan))
    crash = dataclasses.replace(finding, id="f-crash", kind="crash", reference="isolation", mismatch=None, call=None,
                                detail="killed by SIGSEGV")
    data, _ = written([infinite, crash], tmp_path, repro_paths={})
    by_id = {f["id"]: f for f in data["findings"]}
    assert by_id["f-infinite"]["max_abs_err"] is None and by_id["f-infinite"]["mismatch"]["allowed"] is None
    assert "inf" in by_id["f-infinite"]["mismatch"]["description"]
    record = by_id["f-crash"]
    check_fields(record, FINDING, EXTRA)
    assert (record["max_abs_err"], record["tolerance"], record["mismatch"], record["repro"]) == (None, None, None, None)
    assert record["detail"] == "killed by SIGSEGV"
    # without a recorded call the case still names the re-laid-out arguments
    assert record["args"] == [{"name": p, "shape": None, "stride": None, "storage_offset": None, "layout": layout}
                              for p, layout in finding.layouts]
    # a crash no standalone script reproduces: torchsleuth's own failure, listed apart, not a finding
    own = findings_file.document(command="ops", device="cpu", torch_version="2.13.0", cases=1, seconds=1.0, findings=[], groups=[],
                                 repro_paths={}, internal=[crash])
    assert own["findings"] == [] and own["internal_failures"] == [
        {"id": "f-crash", "op": crash.op, "kind": "crash", "case_id": crash.case_id, "summary": crash.summary, "detail": "killed by SIGSEGV"}]


def test_repro_paths_outside_the_folder_are_kept_as_given(findings, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "f.py"
    data = findings_file.document(
        command="ops", device="cpu", torch_version="2.x", cases=1, seconds=0.0, findings=findings[:1],
        groups=[], repro_paths={findings[0].id: elsewhere}, base=tmp_path / "report",
    )
    assert data["findings"][0]["repro"] == elsewhere.as_posix()
    assert data["findings"][0]["group"] is None


def test_groups_split_by_trigger_and_keep_every_finding(findings):
    groups = group(findings)
    assert all(isinstance(g, Group) for g in groups)
    by_id = {f.id: f for f in findings}
    layouts_of = [{frozenset(layout for _, layout in by_id[i].layouts) for i in g.findings} for g in groups]
    # transposed self and strided self are one property (self's strides), so one group;
    # unshrunk, a case that lays out tensor1 and tensor2 as well is keyed by them too
    alone = [g for g in groups if all({p for p, _ in by_id[i].layouts} == {"input"} for i in g.findings)]
    alone_layouts = {layout for i in alone[0].findings for _, layout in by_id[i].layouts}
    assert len(alone) == 1 and alone_layouts == {"strided", "transposed"}, layouts_of
    assert "non-contiguous input" in alone[0].summary
    # at a storage offset it would be another group
    at_offset = findings[0].case_id.replace("input=transposed", "input=offset").replace("input=strided", "input=offset")
    offset = dataclasses.replace(findings[0], id="f-offset", case_id=at_offset)
    assert len(group([*findings, offset])) == len(groups) + 1
    assert sum(len(g.findings) for g in groups) == len(findings)
    for g in groups:
        assert g.id.startswith("g-") and len(g.id) > 2
        assert g.summary.endswith(".") and g.summary.count(". ") == 0
        assert "addcmul_" in g.summary and f"{len(g.findings)} findings" in g.summary
    # stable: the same findings give the same groups, whatever their order
    assert {g.id: set(g.findings) for g in group(reversed(findings))} == {g.id: set(g.findings) for g in groups}
    assert group(findings + findings) == groups


def test_group_key_separates_kind_and_variant(findings):
    finding = findings[0]
    other_kind = dataclasses.replace(finding, id="f-other-kind", kind="mismatch")
    other_variant = dataclasses.replace(finding, id="f-other-variant", variant="out")
    same_but_float64 = dataclasses.replace(finding, id="f-float64", dtype="float64")
    groups = group([finding, other_kind, other_variant, same_but_float64])
    assert [g.findings for g in groups] == [(finding.id, "f-float64"), ("f-other-kind",), ("f-other-variant",)]
    assert "float32, float64" in groups[0].summary


def test_merge_joins_two_trigger_classes_only_where_each_diagnosis_saw_the_other_fail(findings):
    """torchsleuth.check's grouping: an expanded input and a transposed one are one bug when each group's neighbour
    tests failed in the other's class; without that evidence (or without merge) they stay two groups."""
    from torchsleuth.shrink.records import Diagnosis, Trigger

    transposed = next(f for f in findings if dict(f.layouts).get("input") == "transposed")
    expanded = dataclasses.replace(transposed, id="f-expanded", case_id=transposed.case_id.replace("input=transposed", "input=expanded"))
    apart = group([transposed, expanded])
    assert len(apart) == 2

    def seen(g, failing):
        trigger = Trigger(path="input", failing=failing, passing=())
        return Diagnosis(group=g.id, finding=g.findings[0], case_id="", sentence=f"{g.id} fails", triggers=(trigger,))

    both = {apart[0].id: seen(apart[0], ("transposed", "expanded")), apart[1].id: seen(apart[1], ("expanded", "strided"))}
    merged = group([transposed, expanded], diagnoses=both, merge=True)
    assert [(g.id, g.findings, g.diagnosis) for g in merged] == [(apart[0].id, (transposed.id, "f-expanded"), f"{apart[0].id} fails")]
    one_sided = {**both, apart[1].id: seen(apart[1], ("expanded",))}
    assert len(group([transposed, expanded], diagnoses=one_sided, merge=True)) == 2
    assert len(group([transposed, expanded], diagnoses=both)) == 2


def test_a_sharding_group_gets_a_diagnosis_line_of_what_its_findings_share(findings):
    base = findings[0]
    sharded = [dataclasses.replace(base, id=f"f-shard{i}", kind="sharding_mismatch", reference="sharding", variant="functional", dtype=dtype,
                                   case_id=f"sum|functional|{dtype}|cpu|s0|input=S0|@shard:2x2", op="aten.sum.default", opinfo="sum")
               for i, dtype in enumerate(("float32", "bfloat16"))]
    (g,) = group(sharded)
    assert g.diagnosis == ("sum gives wrong results under sharding when input is placed S0 on a 2x2 mesh; in bfloat16 and float32 "
                           "(2 findings; what they share, not narrowed by neighbour tests).")
    assert all(not g.diagnosis for g in group(findings))  # an op's group without a stored diagnosis gets none made up


# --- the Python API writes what the command line writes -----------------------------------------


def test_sweep_from_python_writes_the_findings_file_junit_and_repros(tmp_path):
    import xml.etree.ElementTree as ET

    import torchsleuth

    out, db = tmp_path / "out", str(tmp_path / "runs.db")
    config = SweepConfig(ops=("addcmul",), dtypes=("float32",), variants=("inplace",), samples=1, layouts=("contiguous", "transposed"),
                         workers=0)
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            library.impl("addcmul_", _addcmul_dropping_writes, "CPU")
        result = torchsleuth.sweep(config, db=db, out=out, json=out / "findings.json", junit=tmp_path / "junit.xml")
    finally:
        library._destroy()
    assert result.findings and {f.kind for f in result.findings} == {"dropped_write"}
    assert result.written == {"repro scripts": str(out / "repros"), "findings file": str(out / "findings.json"),
                              "junit": str(tmp_path / "junit.xml"), "database": f"{db} (run 1)"}
    # the findings file is the contract's, of the findings as reported (shrunk), each with its script
    data = strict_json((out / "findings.json").read_text())
    reported = [result.reported(f) for f in result.findings]
    paths = {f.id: out / "repros" / f"{f.id}.py" for f in reported}
    assert data == findings_file.document(
        command="ops", device="cpu", torch_version=torch.__version__, cases=result.cases, seconds=result.seconds, findings=reported,
        groups=result.groups, repro_paths=paths, base=out, found_as={f.id: f.case_id for f in result.findings}, flaky=result.flaky,
        coverage=result.coverage)
    assert data["coverage"]["found"] >= data["coverage"]["reached"] > 0  # kernel coverage, in the file too
    for finding in reported:
        assert paths[finding.id].read_text() == repro.script(finding)
    # JUnit: the op's test case fails with the findings
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite.get("name") == "addcmul"
    failure = suite.find("testcase").find("failure")
    assert failure is not None and failure.get("type") == "dropped_write"
    assert all(f.id in failure.text for f in reported)


def test_sweep_from_python_writes_only_what_it_is_asked_and_refuses_a_bad_path_before_any_work(tmp_path):
    import torchsleuth
    from torchsleuth import UsageError

    config = SweepConfig(ops=("neg",), dtypes=("float32",), variants=("functional",), samples=1, layouts=("contiguous",), workers=0)
    result = torchsleuth.sweep(config, db=str(tmp_path / "runs.db"))
    assert not result.findings and result.written == {"database": f"{tmp_path / 'runs.db'} (run 1)"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UsageError, match="--json"):
        torchsleuth.sweep(config, db=str(tmp_path / "other.db"), json=tmp_path / "a-file" / "findings.json")
    assert not (tmp_path / "other.db").exists()
