"""torchsleuth.check: custom ops, aten overloads and plain callables, judged in this process; assert_clean's message."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchsleuth
from torchsleuth.errors import UsageError

import check_ops

FAST = dict(dtypes="float32", oracles="none", search="none")


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_custom_op_that_ignores_strides_is_found_with_its_argument_layout_and_a_repro_that_exits_1(tmp_path):
    result = torchsleuth.check(check_ops.scale_bad, [(torch.randn(4, 6), 2.5), (torch.randn(3, 5, 2), -1.25)], **FAST)
    assert not result.clean
    layout = [g for g in result.groups if "layout reference" in g.summary]
    assert layout and "tsl_check.scale_bad" in layout[0].summary
    assert "input is transposed" in layout[0].diagnosis  # the argument and the layout
    with pytest.raises(AssertionError) as raised:
        result.assert_clean()
    message = str(raised.value)
    assert layout[0].id in message and layout[0].diagnosis in message
    name = result.script_name(layout[0].findings[0])
    assert f"repro: not kept; check(..., out=DIR) or result.write_repros(DIR) writes it as DIR/repros/{name}" in message
    written = result.write_repros(tmp_path)
    assert written[layout[0].findings[0]] == str(tmp_path / "repros" / name)
    ran = _run(written[layout[0].findings[0]])
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "BUG PRESENT" in ran.stdout


def test_the_correct_twin_is_clean():
    result = torchsleuth.check(check_ops.scale_good, [(torch.randn(4, 6), 2.5), (torch.randn(3, 5, 2), -1.25)], **FAST)
    assert result.clean, result.message()
    assert result.sweep.statuses.get("pass", 0) > 10
    result.assert_clean()


def test_a_check_has_no_time_target_so_ci_judges_the_same_cases_on_any_machine():
    result = torchsleuth.check(check_ops.scale_good, [(torch.randn(4, 6), 2.5)], **FAST)
    assert result.sweep.run.config["time_target"] == 0.0 and result.sweep.run.config["deadline"] == 0.0
    assert not [kind for kind, _ in result.sweep.notes if kind == "time"]


def test_samples_come_from_the_schema_when_none_are_given():
    bad = torchsleuth.check(check_ops.scale_bad, **FAST)
    assert any("layout reference" in g.summary for g in bad.groups), bad.message()
    good = torchsleuth.check(check_ops.scale_good, **FAST)
    assert good.clean, good.message()
    assert good.sweep.statuses.get("pass", 0) > 10


@pytest.mark.slow
def test_a_triton_like_callable_reading_its_input_as_contiguous_is_found_against_its_reference(tmp_path):
    samples = [torch.randn(4, 6), torch.randn(3, 5, 2)]
    result = torchsleuth.check(check_ops.gelu_kernel, samples, reference=check_ops.gelu_eager, out=tmp_path, **FAST)
    layout = [g for g in result.groups if "layout reference" in g.summary and "backward" not in g.summary]
    assert layout, result.message()
    assert re.search(r"when input is (transposed|permuted)", layout[0].diagnosis)
    assert f"repro: python {result.repros[layout[0].findings[0]]}" in result.message()  # out= given: the script's path
    ran = _run(result.repros[layout[0].findings[0]])
    assert ran.returncode == 1, ran.stdout + ran.stderr


def test_reference_judges_what_the_op_should_compute():
    samples = [torch.randn(4, 6)]
    alone = torchsleuth.check(check_ops.gelu_fused_wrong, samples, **FAST)
    assert alone.clean  # consistent with itself in every layout and in float64
    against = torchsleuth.check(check_ops.gelu_fused_wrong, samples, reference=check_ops.gelu_eager, **FAST)
    assert any("precision reference" in g.summary for g in against.groups), against.message()
    right = torchsleuth.check(check_ops.gelu_eager, samples, reference=check_ops.gelu_eager, **FAST)
    assert right.clean, right.message()


def test_a_sample_factory_is_called_per_dtype():
    asked = []

    def samples(dtype, device):
        asked.append(dtype)
        return [torch.randn(4, 6).to(dtype)]

    result = torchsleuth.check(check_ops.gelu_eager, samples, dtypes="float32,float64", oracles="none", search="none")
    assert result.clean, result.message()
    assert {torch.float32, torch.float64} <= set(asked)


def test_outputs_are_written_where_asked(tmp_path):
    result = torchsleuth.check(check_ops.scale_bad, [(torch.randn(4, 6), 2.5)], out=tmp_path / "out",
                               json=tmp_path / "findings.json", junit=tmp_path / "junit.xml", **FAST)
    assert (tmp_path / "findings.json").is_file() and (tmp_path / "junit.xml").is_file()
    assert all(path.startswith(str(tmp_path / "out")) for path in result.repros.values())


def test_a_sessions_checks_are_merged_into_one_report_each_group_once(tmp_path):
    """check.session, what the plugin's --torchsleuth-report writes (tests/check/test_pytest_plugin.py runs that in a
    subprocess), here: the counts summed, the findings file, the HTML page and each check's own repro script."""
    from torchsleuth.check import session

    samples = [(torch.randn(4, 6), 2.5)]
    bad, good = (torchsleuth.check(op, samples, **FAST) for op in (check_ops.scale_bad, check_ops.scale_good))
    assert bad.groups and good.clean
    merged = session.merge([bad, good, bad])  # the same op checked twice
    assert sum(merged.statuses.values()) == 2 * sum(bad.sweep.statuses.values()) + sum(good.sweep.statuses.values())
    assert [g.id for g in merged.groups] == [g.id for g in bad.groups] and len(merged.findings) == 2 * len(bad.findings)
    written = session.write([bad, good], tmp_path / "report")
    data = json.loads((tmp_path / "report" / "findings.json").read_text())
    assert {f["op"] for f in data["findings"]} == {"tsl_check.scale_bad.default"}
    assert written["html report"] == str(tmp_path / "report" / "report.html") and "tsl_check" in Path(written["html report"]).read_text()
    scripts = {p.name: p.read_text() for p in (tmp_path / "report" / "repros").glob("*.py")}
    assert scripts and set(scripts.values()) <= set(bad.scripts.values())
    assert session.merge([]) is None and session.write([], tmp_path / "none") == {}


@pytest.mark.parametrize("call, words", [
    (lambda: torchsleuth.check(42), "give a torch.library custom op"),
    (lambda: torchsleuth.check(check_ops.gelu_eager), "has no schema to make samples from"),
    (lambda: torchsleuth.check(check_ops.gelu_eager, []), "samples= is empty"),
    (lambda: torchsleuth.check(check_ops.gelu_eager, [torch.randn(3)], layouts="diagonal"), "unknown layout 'diagonal'"),
    (lambda: torchsleuth.check(check_ops.gelu_eager, [torch.randn(3)], isolate=True), "isolate=True"),
    (lambda: torchsleuth.check(torch.ops.aten.add, dtypes="float32"), r"aten.add has overloads Tensor, Scalar: pass one"),
])
def test_bad_input_is_one_usage_error(call, words):
    with pytest.raises(UsageError, match=words):
        call()


def test_the_api_is_exported():
    for name in torchsleuth.__all__:
        assert getattr(torchsleuth, name) is not None, name
    for name in ("sweep", "optim", "shard", "watch", "check", "drill", "write_outputs"):
        assert callable(getattr(torchsleuth, name)), name


@pytest.mark.slow
def test_isolated_the_op_runs_in_a_worker_that_imports_its_file():
    result = torchsleuth.check(check_ops.scale_bad, isolate=True, **FAST)
    assert result.sweep.run.config["workers"] == 1 and result.sweep.run.config["imports"] == [str(Path(check_ops.__file__).resolve())]
    assert any("layout reference" in g.summary for g in result.groups), result.message()


def test_args_kwargs_pairs_catch_a_stride_bug_as_one_group_and_no_check_leaves_a_temp_folder(tmp_path, monkeypatch):
    """The (args, kwargs) form torch.library.opcheck takes; one kernel reading its input as contiguous is one group
    (transposed, strided and expanded inputs alike: report.groups' merge), its diagnosis says each layout once; a
    check without out= writes nothing and leaves no temporary folder, a failing one no more than a clean one, and
    its message says how to have the repro script written."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    pairs = [((torch.randn(4, 6),), {"alpha": 2.5}), ((torch.randn(3, 5, 2), -1.25), {})]
    bad = torchsleuth.check(check_ops.scale_bad, pairs, **FAST)
    assert bad.judged > 0 and len(bad.groups) == 1, bad.message()
    diagnosis = bad.groups[0].diagnosis
    assert "when input is" in diagnosis and "expanded (stride 0)" in diagnosis
    clauses = re.split(r", or |, | or |; ", diagnosis.split(" when input is ", 1)[1].split(";", 1)[0])
    assert len(clauses) == len(set(clauses)), diagnosis  # each layout said once
    assert not list(temp.iterdir()) and not bad.repros
    assert f"writes it as DIR/repros/{bad.script_name(bad.groups[0].findings[0])}" in bad.message()
    assert set(bad.scripts) == {f.id for f in bad.sweep.findings} and all("BUG PRESENT" in s for s in bad.scripts.values())
    good = torchsleuth.check(check_ops.scale_good, pairs, **FAST)
    assert good.clean and good.judged > 10, good.message()
    assert not list(temp.iterdir())


VMAP = dict(dtypes="float32", oracles="vmap", search="none")
PAIRS = [((torch.randn(4, 6),), {"alpha": 2.5}), ((torch.randn(3, 5, 2), -1.25), {})]


@pytest.mark.slow
def test_a_stride_bug_seen_through_vmap_is_one_group():
    """vmap batched at a moved dim hands each sample a strided slice: the stride bug's vmap findings fold into its
    layout group (report.groups._folded), one root cause one group; the correct twin is clean."""
    bad = torchsleuth.check(check_ops.scale_bad, PAIRS, **VMAP)
    assert len(bad.groups) == 1, bad.message()
    references = {f.reference for f in bad.sweep.findings if f.id in bad.groups[0].findings}
    assert references == {"layout", "vmap"}, references  # the vmap findings are in the stride group
    assert "when input is transposed" in bad.groups[0].diagnosis
    good = torchsleuth.check(check_ops.scale_good, PAIRS, **VMAP)
    assert good.clean, good.message()


@pytest.mark.skipif(not hasattr(torch.library, "register_vmap"), reason="torch.library.register_vmap is newer than this torch")
def test_a_wrong_batching_rule_keeps_its_own_vmap_group():
    """A kernel right in every layout whose batching rule mixes samples: no stride group to fold into."""
    rule = torchsleuth.check(check_ops.scale_batch_bad, PAIRS, **VMAP)
    assert len(rule.groups) == 1 and {f.reference for f in rule.sweep.findings} == {"vmap"}, rule.message()
    assert "tsl_check.scale_batch_bad.default gives wrong values on contiguous arguments [vmap:forward]" in rule.groups[0].summary


def test_a_check_whose_samples_make_no_call_fails_saying_why():
    result = torchsleuth.check(check_ops.scale_good, [((torch.randn(4, 6), 2.5), {"bogus": 1})], **FAST)
    assert not result.clean and result.judged == 0
    with pytest.raises(AssertionError, match=r"checked nothing for tsl_check\.scale_good\.default(.|\n)*expected at most 2 argument"):
        result.assert_clean()
