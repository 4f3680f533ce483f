"""The pytest plugin: the fixture, the marker, --torchsleuth-report; run by pytester in a subprocess, as a user's session
loads it, and (the fixture and the marker) in this session, which loads it too.

Not with pytester in this process: its inner session forgets the modules it imported first when it ends (its
sys.modules snapshot), and those imported again afterwards (oracles, OpInfo's modules) slow or break later tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import check_ops

pytest_plugins = ["pytester"]

OPS = Path(__file__).parents[1] / "check_ops.py"

TESTS = '''
import pytest
import torch

import check_ops

FAST = dict(dtypes="float32", oracles="none", search="none")
SAMPLES = [(torch.randn(4, 6), 2.5)]


def test_bad_by_fixture(torchsleuth_check):
    torchsleuth_check(check_ops.scale_bad, SAMPLES, **FAST)


def test_good_by_fixture(torchsleuth_check):
    result = torchsleuth_check(check_ops.scale_good, SAMPLES, **FAST)
    assert result.clean


@pytest.mark.torchsleuth(check_ops.scale_bad, SAMPLES, **FAST)
def test_bad_by_marker():
    pass


@pytest.mark.torchsleuth(check_ops.scale_good, SAMPLES, **FAST)
def test_good_by_marker():
    pass
'''


def _project(pytester):
    shutil.copy(OPS, pytester.path / "check_ops.py")
    pytester.makepyfile(test_kernels=TESTS)


@pytest.mark.slow
def test_the_fixture_and_the_marker_fail_a_test_with_the_findings_and_pass_a_clean_op(pytester, tmp_path, monkeypatch):
    """... and leave no temporary folder: the failure says how to have the repro script written."""
    _project(pytester)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    result = pytester.runpytest_subprocess("-q")
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    assert "FAILED test_kernels.py::test_bad_by_fixture" in text and "FAILED test_kernels.py::test_bad_by_marker" in text
    assert "tsl_check.scale_bad.default gives wrong values when input is strided" in text  # the op, the argument and its layout
    assert "- g-" in text and "repro: not kept; run pytest with --torchsleuth-report DIR to write it as DIR/repros/f-" in text
    assert not [p.name for p in temp.iterdir() if p.name.startswith("torchsleuth")]
    failures = text.split("= FAILURES =", 1)[1].split("short test summary", 1)[0]
    assert "CheckResult(" not in failures and "pytest_plugin" not in failures and "torchsleuth/check" not in failures


@pytest.mark.slow
def test_the_session_report_holds_every_check(pytester, tmp_path):
    _project(pytester)
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess("-q", f"--torchsleuth-report={report}")
    result.assert_outcomes(passed=2, failed=2)
    findings = json.loads((report / "findings.json").read_text())
    assert {f["op"] for f in findings["findings"]} == {"tsl_check.scale_bad.default"}
    assert (report / "report.html").is_file() and list((report / "repros").glob("*.py"))
    assert "torchsleuth: 4 check(s)" in result.stdout.str()
    shown = [line.split("repro: python ", 1)[1] for line in result.stdout.lines if "repro: python " in line]
    assert shown and all(Path(p).is_file() and Path(p).parent == report / "repros" for p in shown)  # written at the failure


@pytest.mark.slow
def test_the_marker_needs_an_op(pytester):
    pytester.makepyfile(test_empty='''
import pytest

@pytest.mark.torchsleuth()
def test_nothing():
    pass
''')
    result = pytester.runpytest_subprocess("-q")
    assert "needs the op to check" in result.stdout.str() + result.stderr.str()


# --- in this session (the fast tier's tests of the plugin) ---------------------------------------

SAMPLES = [(torch.randn(4, 6), 2.5)]
FAST = dict(dtypes="float32", oracles="none", search="none")


def test_in_this_session_the_fixture_fails_with_the_findings_and_returns_a_clean_result(torchsleuth_check):
    with pytest.raises(pytest.fail.Exception, match=r"tsl_check\.scale_bad\.default gives wrong values when input is strided"):
        torchsleuth_check(check_ops.scale_bad, SAMPLES, **FAST)
    assert torchsleuth_check(check_ops.scale_good, SAMPLES, **FAST).clean


@pytest.mark.torchsleuth(check_ops.scale_good, SAMPLES, **FAST)
def test_in_this_session_the_marker_checks_the_op_before_the_body(request):
    from torchsleuth.pytest_plugin import _RESULTS

    checked = [r for r in request.config.stash[_RESULTS] if r.sweep.run.config["ops"] == ["tsl_check.scale_good.default"]]
    assert checked and checked[-1].clean and checked[-1].sweep.statuses.get("pass", 0) > 0  # the marker's, kept for the report
