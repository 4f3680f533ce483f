"""The ``alias`` oracle: aliased arguments raise or give the unaliased answer.

Each planted test replaces one aten CPU kernel with a Python kernel that is
right on unaliased arguments and wrong when they alias, runs a small sweep
with ``--oracles alias``, and checks that the findings name the op and the
aliasing form, and that the forms the kernel gets right stay clean. The same
sweeps over the real kernels must find nothing (torch 2.13 refuses partial
overlap in these ops, and aminmax's shared out= holds one result whole). The
plants are source text, so that a repro script can be run with the plant
prepended (bug present: exit 1) and without (exit 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conftest import script_main
from torchsleuth import SweepConfig, resolve_ops
from torchsleuth.cases.records import Case
from torchsleuth.judge.plugin import decode_detail
from torchsleuth.oracles.alias import oracle as alias
from torchsleuth.oracles.alias.detail import Detail
from torchsleuth.report import repro

HEAD = '''
import warnings

import torch

_lib = torch.library.Library("aten", "IMPL")


def _plant(name, kernel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        _lib.impl(name, kernel, "CPU")
'''

# aminmax's out= kernel in two passes, even elements then odd ones, writing the two results
# in another order in each pass: right into two tensors, a mixture in one shared tensor.
AMINMAX_MIXING = '''
def _aminmax_out(self, *, dim=None, keepdim=False, min, max):
    dims = list(range(self.dim())) if dim is None else [dim]
    low, high = torch.amin(self, dims, keepdim), torch.amax(self, dims, keepdim)
    min.resize_(low.shape)
    max.resize_(high.shape)
    lo, hi, mn, mx = low.reshape(-1), high.reshape(-1), min.view(-1), max.view(-1)
    mn[0::2] = lo[0::2]
    mx[0::2] = hi[0::2]
    mx[1::2] = hi[1::2]  # the bug: the second pass writes max first
    mn[1::2] = lo[1::2]
    return min, max
_plant("aminmax.out", _aminmax_out)
'''

# add_ row by row, reading other as it goes: right unaliased and when other is self
# (each row is read before it is written), wrong when other views self elsewhere.
ADD_READING_AFTER_WRITING = '''
def _add_(self, other, *, alpha=1):
    other = other.expand_as(self)  # a view, not a copy: the bug
    if self.dim() == 0:
        return self.copy_(self + alpha * other)
    for i in range(self.shape[0]):
        self[i] = self[i] + alpha * other[i]
    return self
_plant("add_.Tensor", _add_)
'''

# neg's out= kernel streaming forward, element by element: out=input is a legitimate
# in-place computation and comes out right; out one element into input does not.
NEG_STREAMING = '''
def _neg_out(self, *, out):
    out.resize_(self.shape)
    source, target = self.reshape(-1), out.view(-1)
    for i in range(source.numel()):
        target[i] = -source[i]
    return out
_plant("neg.out", _neg_out)
'''

# name: (op, variant, plant)
# Plants whose real kernel breaks the policy too: torch 2.13's aminmax(out=(t, t)) returns instead of raising,
# t holding max alone (test_a_shared_out_that_silently_holds_one_of_two_different_results_is_found), so its
# clean run and clean script find that, and the plant adds a tensor that holds neither result.
REAL_BREACH = {"aminmax"}

PLANTS = {
    "aminmax": ("aminmax", "out", AMINMAX_MIXING),
    "add_": ("add", "inplace", ADD_READING_AFTER_WRITING),
    "neg": ("neg", "out", NEG_STREAMING),
}


@contextlib.contextmanager
def planted(source: str):
    namespace: dict = {}
    exec(HEAD + source, namespace)
    try:
        yield
    finally:
        namespace["_lib"]._destroy()


def sweep_config(op: str, variant: str, **extra) -> SweepConfig:
    """float32, contiguous, in this process; every sample (aminmax's first three reduce to one element)."""
    spec = dict(ops=resolve_ops(op), dtypes=("float32",), variants=(variant,), layouts=("contiguous",), samples=3,
                workers=0, oracles=("alias",), shrink=False) | extra
    return SweepConfig(**spec)


def forms_of(findings) -> set[str]:
    return {alias.Form.parse(Case.parse(f.case_id).oracle).name for f in findings}


def listing(result) -> str:
    lines = [f"statuses {result.statuses}; reasons {result.reasons}"]
    lines += [f"  {f.kind} {f.op} {f.case_id}: {f.summary}" for f in result.findings]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Each plant's sweep, planted and clean: name -> (planted result, clean result)."""
    from torchsleuth import sweep

    folder = tmp_path_factory.mktemp("alias")
    results = {}
    for name, (op, variant, source) in PLANTS.items():
        with planted(source):
            bad = sweep(sweep_config(op, variant, samples=0), db=str(folder / f"{name}-planted.db"))
        clean = sweep(sweep_config(op, variant, samples=0), db=str(folder / f"{name}-clean.db"))
        results[name] = (bad, clean)
    return results


def case_ids(db: Path) -> dict[str, str]:
    """Case id -> status, for every case of the (one) run in ``db``."""
    from torchsleuth.store.sqlite import Store

    store = Store(db)
    try:
        return {case_id: status for case_id, status, _, _ in store.outcome_rows(store.runs()[-1].id)}
    finally:
        store.close()


# --- which forms are planned -----------------------------------------------------------


F32, I64 = torch.float32, torch.int64


@pytest.mark.parametrize("variant, inputs, outputs, expected", [
    # in-place: other of self's shape and dtype is aliased all three ways where square
    ("inplace", {"input": ((3, 3), F32), "args[0]": ((3, 3), F32)}, {},
     {("inplace-other-is-self", "input", "args[0]"), ("inplace-other-views-self", "input", "args[0]"),
      ("inplace-other-transposes-self", "input", "args[0]")}),
    # not square: no transpose; a smaller other can only view self's storage
    ("inplace", {"input": ((2, 3), F32), "args[0]": ((2, 3), F32), "args[1]": ((3,), F32)}, {},
     {("inplace-other-is-self", "input", "args[0]"), ("inplace-other-views-self", "input", "args[0]"),
      ("inplace-other-views-self", "input", "args[1]")}),
    # another dtype cannot share self's memory; a one-element other cannot overlap self partly
    ("inplace", {"input": ((2, 3), F32), "args[0]": ((2, 3), I64), "args[1]": ((), F32)}, {}, set()),
    ("inplace", {"input": ((0, 3), F32), "args[0]": ((0, 3), F32)}, {}, set()),
    # out=: two outputs alike share one tensor; an input of the output's shape and dtype is out
    ("out", {"input": ((4,), F32)}, {"out[0]": ((), F32), "out[1]": ((), F32)},
     {("shared-out", "out[0]", "out[1]"), ("out-overlaps-input", "out[0]", "input")}),
    ("out", {"input": ((2, 2), F32), "args[0]": ((2, 2), F32)}, {"out": ((2, 2), F32)},
     {("out-is-input", "out", "input"), ("out-is-input", "out", "args[0]"),
      ("out-overlaps-input", "out", "input"), ("out-overlaps-input", "out", "args[0]")}),
    # values and indices of a float sort differ in dtype: nothing shared, nothing overlapping the indices
    ("out", {"input": ((5,), F32)}, {"out[0]": ((5,), F32), "out[1]": ((5,), I64)},
     {("out-is-input", "out[0]", "input"), ("out-overlaps-input", "out[0]", "input")}),
    ("out", {"input": ((1,), F32)}, {"out": ((1,), I64)}, set()),
    ("functional", {"input": ((2, 2), F32), "args[0]": ((2, 2), F32)}, {}, set()),
])
def test_forms_are_planned_only_where_possible(variant, inputs, outputs, expected):
    assert {(f.name, f.written, f.read) for f in alias.applicable(variant, inputs, outputs)} == expected


def test_oracle_names_round_trip_through_the_case_id():
    form = alias.Form(name="out-overlaps-input", written="out[0]", read="args[1]")
    case = Case(op="aminmax", variant="out", dtype="float32", device="cpu", sample=2, oracle=form.oracle)
    assert Case.parse(case.id) == case
    assert alias.Form.parse(Case.parse(case.id).oracle) == form
    with pytest.raises(ValueError):
        alias.Form.parse("alias:no-such-form:out=input")


def test_plan_reads_the_catalog_samples():
    from torchsleuth.cases.records import Unit

    planned = alias.plan(Unit(op="aminmax", dtype="float32", device="cpu"), "out", 0)
    assert "alias:shared-out:out[0]=out[1]" in planned
    assert alias.plan(Unit(op="aminmax", dtype="float32", device="cpu"), "functional", 0) == []


# --- planted bugs are found, named, and the rest stays clean -------------------------


def test_two_outputs_mixed_in_one_shared_out_is_found(swept):
    bad, clean = swept["aminmax"]
    assert bad.findings, listing(bad)
    for f in bad.findings:
        expected = ("alias_mismatch", "alias", "aten.aminmax.out", "aminmax", "out")
        assert (f.kind, f.reference, f.op, f.opinfo, f.variant) == expected, listing(bad)
        assert Case.parse(f.case_id).oracle == "alias:shared-out:out[0]=out[1]"
        assert "one tensor passed for both out[0] and out[1]" in f.summary
        # the plant mixes the two results; where the tensor ends up holding one of them whole, the call still
        # returned for two outputs sharing memory whose results differ
        if "neither result" in f.summary:
            assert f.mismatch.path == "out[0]" and "or" in f.mismatch.expected
        else:
            assert "results of out[0] and out[1] differ" in f.summary and f.mismatch.attribute == "aliasing"
    assert any("neither result" in f.summary for f in bad.findings), listing(bad)
    # the real kernel: its out-overlaps-input cases are refused by the reductions it calls; its shared-out cases
    # return one whole result for two outputs, the policy breach alone (never "neither result")
    assert all(f.mismatch.attribute == "aliasing" and "shared-out" in f.case_id for f in clean.findings), listing(clean)
    assert clean.statuses.get("pass", 0) > 0


def test_a_shared_out_that_silently_holds_one_of_two_different_results_is_found(tmp_path):
    """PyTorch's policy is to raise when two outputs share memory; aminmax(out=(t, t)) returns, t holding max alone."""
    from torchsleuth.engine import run_case

    # torch 2.13's aminmax writes min, then max, each whole: the shared tensor holds max (it
    # warns on the way that it resized the tensor, which the first write had unsqueezed)
    x = torch.randn(5, 5, 5)
    t = torch.empty(5, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.aminmax(x, dim=1, out=(t, t))
    assert torch.equal(t, x.amax(1))
    case = Case(op="aminmax", variant="out", dtype="float32", device="cpu", sample=1, oracle="alias:shared-out:out[0]=out[1]")
    outcome = run_case(case)
    assert outcome.status == "finding", outcome
    (finding,) = outcome.findings
    assert finding.mismatch.attribute == "aliasing" and "results of out[0] and out[1] differ" in finding.summary
    # its script shows the same, standalone: it exits 1 while the call returns instead of raising
    script = run_scripts(tmp_path, shared=repro.script(finding))["shared"]
    assert script.returncode == 1 and "whose results differ" in script.stdout, output(script)


def test_inplace_reading_other_after_writing_self_is_found_where_other_views_self(swept):
    bad, clean = swept["add_"]
    assert bad.findings, listing(bad)
    for f in bad.findings:
        assert (f.kind, f.reference, f.op, f.variant) == ("alias_mismatch", "alias", "aten.add_.Tensor", "inplace"), listing(bad)
        assert f.mismatch.path == "input" and f.mismatch.attribute == "values"
        assert "self" in f.summary and f.summary.startswith("add_ (in-place) [float32] with args[0]")
    # other == self is read row by row before the row is written: right, so not flagged
    assert forms_of(bad.findings) == {"inplace-other-views-self", "inplace-other-transposes-self"}, listing(bad)
    assert bad.reasons.get("skip") is None and bad.statuses.get("pass", 0) > 0
    # real add_ refuses the partial overlaps: raising is right
    assert not clean.findings, listing(clean)
    assert any("single memory location" in reason for reason in clean.reasons.get("raised", {})), listing(clean)


def test_out_overlapping_its_input_is_found_and_out_is_input_is_legitimate(swept):
    bad, clean = swept["neg"]
    assert bad.findings, listing(bad)
    assert forms_of(bad.findings) == {"out-overlaps-input"}, listing(bad)
    for f in bad.findings:
        assert (f.op, f.variant) == ("aten.neg.out", "out") and f.mismatch.path == "out"
        assert "starting at the second element of input" in f.summary
    assert not clean.findings, listing(clean)


def test_out_is_input_of_a_streaming_pointwise_kernel_passes(tmp_path):
    from torchsleuth import sweep

    with planted(NEG_STREAMING):
        sweep(sweep_config("neg", "out"), db=str(tmp_path / "runs.db"))
    statuses = {case_id: status for case_id, status in case_ids(tmp_path / "runs.db").items() if "@alias:out-is-input" in case_id}
    assert statuses and set(statuses.values()) == {"pass"}, statuses


def test_a_kernel_wrong_without_aliasing_is_not_blamed_on_aliasing(run_sweep):
    # add_ that drops its writes altogether: the in-place contract's bug, not aliasing's
    source = "def _add_(self, other, *, alpha=1):\n    return self\n_plant('add_.Tensor', _add_)\n"
    with planted(source):
        result = run_sweep(sweep_config("add", "inplace"))
    assert {f.kind for f in result.findings} == {"dropped_write"}, listing(result)
    assert any("unaliased copies is wrong too" in reason for reason in result.reasons.get("skip", {})), listing(result)


# --- repro scripts ------------------------------------------------------------------


def run_scripts(tmp_path: Path, **texts: str) -> dict[str, subprocess.CompletedProcess]:
    running = {}
    for name, text in texts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        running[name] = subprocess.Popen([sys.executable, str(path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
    done = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def output(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PLANTS))
def test_script_fails_with_the_bug_and_passes_without(name, swept, tmp_path):
    bad, _ = swept[name]
    finding = next(f for f in bad.findings if f.mismatch.attribute != "aliasing")  # the plant's own bug
    text = repro.script(finding)
    assert "ALIASING = " in text and "# the very same tensor" in text or "as_strided" in text
    source = PLANTS[name][2]
    runs = run_scripts(tmp_path, clean=text, buggy=HEAD + source + text)
    assert runs["buggy"].returncode == 1, output(runs["buggy"])
    assert "BUG PRESENT: " + " ".join(finding.summary.split()) in runs["buggy"].stdout
    assert "aliased" in runs["buggy"].stdout and "unaliased" in runs["buggy"].stdout  # the wrong and the right values
    if name in REAL_BREACH:  # the real kernel returns for two outputs sharing memory: exit 1 too, for that alone
        assert runs["clean"].returncode == 1 and "whose results differ" in runs["clean"].stdout, output(runs["clean"])
        assert "it holds neither result" not in runs["clean"].stdout, output(runs["clean"])
        return
    assert runs["clean"].returncode == 0, output(runs["clean"])
    assert "OK:" in runs["clean"].stdout


def test_a_script_run_in_this_process_fails_with_the_plant_and_passes_without(swept, capsys):
    """The neg plant's script (its helpers, alias.helpers) run here, where the tests above run it in fresh interpreters."""
    finding = next(f for f in swept["neg"][0].findings if f.mismatch.attribute != "aliasing")
    main = script_main(repro.script(finding))
    assert main() == 0, capsys.readouterr().out
    with planted(PLANTS["neg"][2]):
        assert main() == 1
    out = capsys.readouterr().out
    assert "BUG PRESENT: " + " ".join(finding.summary.split()) in out and "unaliased" in out, out


@pytest.mark.slow
def test_script_reads_the_detail_record_never_the_prose(swept, tmp_path):
    """Each plant's script made from its finding with ``detail`` blanked: the same script, still exit 1 and 0."""
    texts = {}
    for name, (_, _, source) in PLANTS.items():
        finding = next(f for f in swept[name][0].findings if f.mismatch.attribute != "aliasing")
        detail = decode_detail(Detail, finding)
        assert detail.form == alias.Form.parse(Case.parse(finding.case_id).oracle), finding.data
        assert detail.threads >= 1 and detail.imports == () and finding.detail == detail.words()
        text = repro.script(dataclasses.replace(finding, detail=""))
        assert text == repro.script(finding)
        texts |= {f"{name}_clean": text, f"{name}_buggy": HEAD + source + text}
    runs = run_scripts(tmp_path, **{name.replace("add_", "add"): text for name, text in texts.items()})
    for name, run in runs.items():
        breach = name.removesuffix("_clean") in REAL_BREACH
        assert run.returncode == (1 if name.endswith("buggy") or breach else 0), output(run)


def test_script_rebuilds_the_aliasing(swept):
    bad, _ = swept["add_"]
    finding = next(f for f in bad.findings if "views-self" in f.case_id)
    namespace = {"__name__": "repro"}
    exec(compile(repro.script(finding), "repro.py", "exec"), namespace)
    T = namespace["tensors"]()
    self_, other = T["input"], T["args[0]"]
    assert self_.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()
    assert (self_.storage_offset(), other.storage_offset()) == (1, 0)
    for spec in finding.call.tensors:
        t = T[spec.path]
        assert (tuple(t.shape), t.stride(), t.storage_offset()) == (spec.shape, spec.stride, spec.storage_offset)


# --- the command ---------------------------------------------------------------------


@pytest.mark.slow
def test_command_finds_reports_shrinks_and_writes_repros(tmp_path):
    plant = tmp_path / "plant.py"
    plant.write_text(HEAD + ADD_READING_AFTER_WRITING)
    out, findings_file = tmp_path / "out", tmp_path / "findings.json"
    base = [sys.executable, "-m", "torchsleuth.cli.main"]
    result = subprocess.run(
        base + ["ops", "--ops", "add", "--dtypes", "float32", "--variants", "inplace", "--layouts", "contiguous",
                "--oracles", "alias", "--import", str(plant), "--workers", "1", "--no-progress",
                "--out", str(out), "--json", str(findings_file)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(findings_file.read_text())
    found = [f for f in data["findings"] if f["kind"] == "alias_mismatch"]
    assert found and {f["op"] for f in found} == {"aten.add_.Tensor"}, data
    assert not data.get("flaky"), data["flaky"]
    assert "alias" in result.stdout and "add_" in result.stdout
    for f in found:
        assert f["reference"] == "alias" and "|@alias:inplace-other-" in f["found_as"], f
        # the shrunk case still carries the aliasing, and replays to the same failure
        assert "|@alias:inplace-other-" in f["case_id"], f
        assert "with --import" in f["detail"], f
    # each script imports the --import module itself, so it sees the planted kernel
    scripts = {f["id"]: (out / "repros" / f"{f['id']}.py").read_text() for f in found}
    for name, run in run_scripts(tmp_path, **{f"s_{i.replace('-', '_')}": text for i, text in scripts.items()}).items():
        assert run.returncode == 1, output(run)
    report = subprocess.run(base + ["report", str(out / "runs.db"), "-o", str(tmp_path / "report.html")],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "alias" in (tmp_path / "report.html").read_text()


def test_unknown_oracle_is_a_usage_error(capsys):
    from torchsleuth.cli.main import main

    assert main(["ops", "--ops", "add", "--oracles", "aliass"]) == 2
    err = capsys.readouterr().err
    assert "aliass" in err and "alias" in err and len(err.strip().splitlines()) == 1
