"""`torchsleuth report --issue`: a planted bug and a real torch 2.13 one (gelu's out= ignored when out is
transposed, bench/upstream.md) as upstream reports whose snippet runs, fails the same way, and is a few lines."""

from __future__ import annotations

import os
import re
import sys

import pytest

from torchsleuth.cases.select import resolve_ops
from torchsleuth.cli.main import main
from torchsleuth.config import SweepConfig
from torchsleuth.drill.kernels import addcmul_dropping_noncontiguous_writes
from torchsleuth.drill.override import planted
from torchsleuth.report import upstream
from torchsleuth.sweep import sweep

PLANTED, REAL = "g-0ac578f8", "g-490fe9f2"  # addcmul_ dropping its writes (planted); gelu(out=) ignoring out (real)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """One sweep: addcmul_ with the dropped-write plant (in this process only), gelu's out= untouched; and a folder
    whose sitecustomize plants the same kernel in every interpreter started with it on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("upstream")
    config = SweepConfig(ops=resolve_ops("addcmul,nn.functional.gelu"), dtypes=("float32",), variants=("inplace", "out"),
                         layouts=("contiguous", "transposed"), samples=1, workers=0)
    library = planted("addcmul_", addcmul_dropping_noncontiguous_writes)
    try:
        result = sweep(config, db=str(folder / "runs.db"))
    finally:
        library._destroy()
    assert {PLANTED, REAL} <= {g.id for g in result.groups}, [g.summary for g in result.groups]
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torchsleuth.drill.plants.dropped_write  # noqa: F401\n")
    return {"folder": folder, "db": str(folder / "runs.db"), "site": str(site)}


def _snippet(text: str) -> str:
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def _issue(stored, monkeypatch, capsys, group: str, *extra: str) -> str:
    out = stored["folder"] / f"{group}.md"
    assert main(["report", "--issue", group, "--db", stored["db"], "-o", str(out), *extra]) == 0
    said = capsys.readouterr().out
    assert f"upstream report of {group} (a minimal snippet; torch " in said and str(out) in said
    return out.read_text()


@pytest.mark.slow
def test_a_planted_bug_reports_a_snippet_that_fails_with_the_plant_and_passes_without(stored, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([stored["site"], os.environ.get("PYTHONPATH", "")]))
    text = _issue(stored, monkeypatch, capsys, PLANTED, "--torch", sys.executable)
    snippet = _snippet(text)
    assert len(snippet.splitlines()) <= 10 and "torchsleuth" not in snippet and snippet.startswith("import torch\n")
    assert "torch.Tensor.addcmul_(x, y, z)" in snippet and ".as_strided((2, 2), (1, 2), 0)  # transposed" in snippet
    assert text.startswith("# addcmul_ (in-place) drops its writes when self is transposed")
    for heading in ("## Reproduce", "## Expected and actual", "## Trigger", "## Releases", "## Environment"):
        assert heading in text
    assert "AssertionError: Tensor-likes are not close!" in text and "CPU capability: " in text and "PyTorch version: " in text
    assert text.count(" | reproduces |") == 2  # here, and under --torch
    monkeypatch.setenv("PYTHONPATH", os.environ["PYTHONPATH"].split(os.pathsep, 1)[1])  # the plant gone
    assert upstream.run_under(sys.executable, snippet, snippet=True).verdict == "does not reproduce"


@pytest.mark.slow
def test_a_real_finding_of_torch_2_13_reports_a_snippet_of_plain_torch_that_fails(stored, monkeypatch, capsys):
    text = _issue(stored, monkeypatch, capsys, REAL)
    snippet = _snippet(text)
    assert len(snippet.splitlines()) <= 10 and "torchsleuth" not in snippet
    assert "torch.nn.functional.gelu(x, approximate='none', out=out)" in snippet
    ran = upstream.run_under(sys.executable, snippet, snippet=True)
    assert ran.verdict == "reproduces" and "Tensor-likes are not close" in ran.output
    title = text.splitlines()[0]
    assert title.startswith("# gelu (out=) ignores its out= tensor when out is transposed")
    clauses = re.split(r", or |, | or ", title.split(" when out is ", 1)[1])
    assert len(clauses) == len(set(clauses)), title  # each layout said once


@pytest.mark.slow
def test_report_issue_bad_input_is_one_line_exit_2(stored, tmp_path, capsys):
    for argv, words in ((["--issue", "g-00000000"], "names no group or finding"),
                        (["--issue", PLANTED, "--torch", str(tmp_path / "nothing")], "no python executable"),
                        (["--torch", sys.executable], "go with --issue")):
        assert main(["report", "--db", stored["db"], *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
