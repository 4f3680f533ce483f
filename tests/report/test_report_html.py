"""The HTML report, the view records it shares with the terminal, and ``torchsleuth report``.

Two kinds of data: records made up here (a run with skips, reasons, notes, a
diagnosis, and strings that are hostile HTML), for what a small sweep does
not produce; and a real stored run of ``addcmul_`` with a planted dropped
write, for the command end to end and for the browser.

The browser test renders the page in headless Chromium (Debian's
``chromium``). It fails when Chromium is missing, saying how to install it,
unless ``TORCHSLEUTH_NO_BROWSER=1`` is set: CI must not pass by skipping it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import io
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from torchsleuth import SweepConfig, sweep
from torchsleuth.cli.main import main
from torchsleuth.judge.records import Finding, Mismatch
from torchsleuth.report import groups as grouping, html as html_report, terminal, view
from torchsleuth.report.groups import Group
from torchsleuth.store.sqlite import RunInfo, Store
from torchsleuth.frame import SweepResult

HOSTILE = "<script>alert('x')</script>"


# --- made-up records ----------------------------------------------------------------------


def finding(case_id: str, kind: str = "mismatch", *, op: str = "aten.neg.default", summary: str = "neg is wrong", **extra) -> Finding:
    opinfo, variant, dtype, device, _, placed = case_id.split("|")
    layouts = () if placed == "contiguous" else tuple(tuple(p.split("=", 1)) for p in placed.split(","))
    fields = dict(
        id="f-" + hashlib.sha256(f"{case_id}/{kind}".encode()).hexdigest()[:10], kind=kind, op=op, opinfo=opinfo, variant=variant, dtype=dtype,
        device=device, reference="layout", case_id=case_id, layouts=layouts, summary=summary,
        mismatch=Mismatch(path="out", attribute="values", expected="1.0", actual="2.0", mismatched=3, numel=12,
                          worst_index=(1, 2), max_abs_err=1.0, atol=1e-5, rtol=1.3e-6, allowed=2e-5),
    )
    return Finding(**(fields | extra))


def result(findings=(), *, statuses=None, reasons=None, notes=(), failed_units=(), op_names=("neg",)) -> SweepResult:
    run = RunInfo(
        id=7, key="k", command="ops", device="cpu", torch="2.13.0+cpu", version="0.1.0", started=1.7e9, finished=1.7e9 + 5,
        seconds=4.5, config={"ops": list(op_names), "dtypes": ["float32", "float64"], "layouts": ["contiguous", "transposed"],
                             "variants": ["functional"], "samples": 3},
    )
    return SweepResult(
        run=run, resumed=False, statuses=statuses or {"pass": 10, "finding": len(findings)}, reasons=reasons or {},
        failed_units=tuple(failed_units), notes=tuple(notes), findings=tuple(findings), seconds=4.5,
    )


class Tags(HTMLParser):
    """The element names a page uses, and its text."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes += attrs

    def handle_data(self, data):
        self.text.append(data)


def parsed(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    tags.close()
    return tags


# --- the view -----------------------------------------------------------------------------


def test_heatmaps_count_failing_cases_by_op_and_layout_and_dtype():
    found = [
        finding("neg|functional|float32|cpu|s0|input=transposed"),
        # a second finding of the same case: still one failing case
        finding("neg|functional|float32|cpu|s0|input=transposed", "out_of_view_write"),
        finding("neg|functional|float64|cpu|s1|contiguous"),
        finding("add|functional|float32|cpu|s0|input=strided,other=transposed", op="aten.add.Tensor"),
    ]
    by_layout, by_dtype = view.heatmaps(found)
    # columns: the layouts that appear, in the catalog's order; rows: most failing cases first
    assert by_layout.columns == ("contiguous", "transposed", "strided")
    assert by_layout.rows == ("neg", "add")
    assert dict(zip(by_layout.columns, by_layout.counts[0])) == {"contiguous": 1, "transposed": 1, "strided": 0}
    # a case with two laid-out arguments counts under each layout
    assert dict(zip(by_layout.columns, by_layout.counts[1])) == {"contiguous": 0, "transposed": 1, "strided": 1}
    assert by_dtype.columns == ("float64", "float32")
    assert dict(zip(by_dtype.columns, by_dtype.counts[0])) == {"float64": 1, "float32": 1}
    assert dict(zip(by_dtype.columns, by_dtype.counts[1])) == {"float64": 0, "float32": 1}
    assert by_layout.peak == 1


def test_view_shows_what_the_groups_name_and_nothing_else():
    kept = finding("neg|functional|float32|cpu|s0|input=transposed")
    flaky = finding("neg|functional|float64|cpu|s0|input=transposed")
    groups = [Group(id="g-1", summary="neg is wrong on transposed input.", findings=(kept.id,), diagnosis="only when input is transposed")]
    report = view.build(result([kept, flaky]), groups)
    assert report.findings == 1
    assert [f.id for g in report.groups for f in g.findings] == [kept.id]
    assert report.groups[0].diagnosis == "only when input is transposed"
    assert report.groups[0].layouts == ("transposed",)
    assert report.heatmaps[1].columns == ("float32",)  # the flaky float64 case is not counted either
    # by default every finding is grouped by report.groups
    assert view.build(result([kept, flaky])).findings == 2


def test_findings_are_shown_as_reported_and_placed_as_found():
    from torchsleuth.shrink.records import Shrunk

    found = finding("neg|functional|float64|cpu|s2|input=transposed,other=strided")
    smaller = finding("neg|functional|float64|cpu|s0|input=transposed", summary="neg is wrong on a 2x2 transposed input")
    flaky = finding("neg|functional|float32|cpu|s1|contiguous", summary="once wrong, never again")
    shrunk = {found.id: Shrunk(finding=found.id, status="shrunk", case_id=smaller.case_id, replay=smaller)}
    sweep_result = dataclasses.replace(result([found]), shrunk=shrunk, flaky=(flaky,))
    report = view.build(sweep_result)
    shown = report.groups[0].findings[0]
    # the shrunk case's finding under the id it was found with, as in the findings file and the repro
    assert (shown.id, shown.case_id, shown.found_as, shown.summary) == (found.id, smaller.case_id, found.case_id, smaller.summary)
    assert shown.layouts == (("input", "transposed"),)
    # where it sits: as found
    assert report.groups[0].layouts == ("strided", "transposed")
    assert report.heatmaps[0].columns == ("transposed", "strided")
    # the flaky one is listed apart, never as a finding
    assert report.findings == 1 and [f.id for f in report.flaky] == [flaky.id]
    text = "".join(parsed(html_report.render(report)).text)
    assert f"shrunk from {found.case_id}" in text and "once wrong, never again" in text and "flaky" in text


def test_view_orders_statuses_and_reasons():
    report = view.build(result(statuses={"skip": 3, "pass": 5, "raised": 2, "finding": 0}, reasons={
        "skip": {"no reference for this dtype": 1, "output is uninitialized": 2}, "raised": {"RuntimeError: bad": 2}}))
    assert report.run.statuses == (("pass", 5), ("raised", 2), ("skip", 3))
    assert [t.status for t in report.reasons] == ["skip", "raised"]
    assert report.reasons[0].rows == ((2, "output is uninitialized"), (1, "no reference for this dtype"))
    assert report.reasons[0].cases == 3
    assert report.heatmaps == () and report.groups == ()


# --- the page -----------------------------------------------------------------------------


def hostile_report(repros: bool = True) -> view.ReportView:
    found = finding(
        "neg|functional|float32|cpu|s0|input=transposed", op=f"aten.{HOSTILE}.default", summary=f"summary {HOSTILE}",
        detail=f"detail {HOSTILE}",
    )
    groups = [Group(id="g-1", summary=f"group {HOSTILE}", findings=(found.id,), diagnosis=f"diagnosis {HOSTILE}")]
    sweep_result = result(
        [found], statuses={"pass": 1, "finding": 1, "skip": 1}, reasons={"skip": {f"reason {HOSTILE}": 1}},
        notes=[("collateral", f"note {HOSTILE}")], failed_units=[(f"{HOSTILE}|float32|cpu", f"unit {HOSTILE}")],
    )
    return view.build(sweep_result, groups, repros=repros)


def test_every_string_from_the_data_is_escaped():
    page = html_report.render(hostile_report())
    assert HOSTILE not in page
    escaped = html.escape(HOSTILE, quote=True)
    for where in ("summary", "group", "diagnosis", "detail", "reason", "note", "unit"):
        assert f"{where} {escaped}" in page, where
    assert f"aten.{escaped}.default" in page  # the op
    tags = parsed(page)
    assert "script" not in tags.tags
    # and the text a reader sees is the data, unchanged
    text = "".join(tags.text)
    assert f"summary {HOSTILE}" in text and f"diagnosis {HOSTILE}" in text
    # the repro script carries the summary too: escaped inside <pre>
    assert "<pre><code>" in page and escaped in page.split("<pre><code>", 1)[1]


def test_page_is_self_contained():
    page = html_report.render(hostile_report())
    tags = parsed(page)
    assert tags.tags.isdisjoint({"script", "link", "img", "iframe", "object", "embed"})
    for name, value in tags.attributes:
        assert name != "src", (name, value)
        if name == "href":
            assert value.startswith("#"), value  # links within the page only
    assert "@import" not in page and "url(" not in page and "http://" not in page and "https://" not in page


def test_page_shows_the_run_groups_findings_and_heatmaps():
    report = hostile_report()
    page = html_report.render(report)
    text = html.unescape(page)
    for fact in ("run 7", "ops on cpu", "2.13.0+cpu", "float32, float64", "contiguous, transposed"):
        assert fact in text, fact
    # statuses and skip reasons
    assert '<td class="status-skip">skip</td><td class="n">1</td>' in page
    assert "not judged: 1 case, 1 reason" in text and f"reason {HOSTILE}" in text
    # the diagnosis, prominently: in the index and above the group's findings
    assert page.count('<p class="diagnosis"><strong>Diagnosis:</strong>') == 2
    found = report.groups[0].findings[0]
    for field in (found.kind, found.op, found.variant, found.dtype, found.device, found.reference, "input=transposed", found.mismatch):
        assert field in text, field
    assert f'<details><summary>repro script <code>{found.id}.py</code>' in page
    assert "failing cases by op and layout" in page and "failing cases by op and dtype" in page
    assert 'title="neg, layout transposed: 1 failing case"' in page


def test_clean_run_says_so():
    page = html_report.render(view.build(result(statuses={"pass": 12})))
    body = page.split("<body>", 1)[1]  # past the stylesheet
    assert "no findings" in body and "every judged case passed" in body
    assert 'id="findings"' not in body and "heatmap" not in body and "<details><summary>repro" not in body


# --- the terminal renders the same records ------------------------------------------------


def test_terminal_summary_and_page_show_the_same_groups_and_reasons():
    found = [finding("neg|functional|float32|cpu|s0|input=transposed"), finding("neg|functional|float64|cpu|s0|input=transposed")]
    groups = grouping.group(found)
    groups = [Group(id=g.id, summary=g.summary, findings=g.findings, diagnosis="neg reads input as if contiguous") for g in groups]
    sweep_result = result(found, statuses={"pass": 3, "finding": 2, "skip": 4}, reasons={"skip": {"grad[input] undefined": 4}})
    screen = io.StringIO()
    terminal.summary(sweep_result, console=Console(file=screen, width=200), groups=groups)
    page = html.unescape(html_report.render(view.build(sweep_result, groups)))
    text = screen.getvalue()
    for shown in (groups[0].id, found[0].id, "float32, float64", "transposed", "grad[input] undefined",
                  "neg reads input as if contiguous", "2 findings"):
        assert shown in text, shown
        assert shown in page, shown
    assert "2 findings in 1 group; 3 passed; 4 not judged" in text and "3 pass" in page and "4 skip" in page


# --- the command, on a real stored run ----------------------------------------------------


def addcmul_dropping_writes(self, tensor1, tensor2, *, value=1):
    if not self.is_contiguous():
        return self  # the planted bug: nothing lands in self
    return self.add_(tensor1 * tensor2 * value)


DIAGNOSIS = "addcmul_ drops its write whenever self is not contiguous; tensor1 and tensor2 do not matter"


@pytest.fixture
def stored(plant, tmp_path) -> Path:
    """A database with one run of addcmul_ that drops its writes, and a diagnosis for its first group."""
    from torchsleuth.shrink.records import Diagnosis

    plant("addcmul_", addcmul_dropping_writes)
    db = tmp_path / "out" / "runs.db"
    config = SweepConfig(ops=("addcmul",), dtypes=("float32",), layouts=("contiguous", "transposed", "strided"),
                         variants=("inplace",), samples=1, workers=0)
    swept = sweep(config, db=str(db))
    assert swept.findings, swept
    store = Store(db)
    try:
        first = grouping.of_run(store, swept.run.id)[1][0]
        store.add_diagnosis(swept.run.id, Diagnosis(group=first.id, finding=first.findings[0], case_id="", sentence=DIAGNOSIS))
    finally:
        store.close()
    return db


def groups_of(db: Path) -> list[Group]:
    store = Store(db)
    try:
        return grouping.of_run(store, store.runs()[-1].id)[1]
    finally:
        store.close()


def test_report_writes_the_page_next_to_the_database(stored, capsys):
    assert main(["report", "latest", "--db", str(stored)]) == 0
    page_path = stored.parent / "report-1.html"
    out = capsys.readouterr().out
    assert str(page_path) in out and out.count("\n") == 1
    page = page_path.read_text(encoding="utf-8")
    groups = groups_of(stored)
    assert groups and any(g.diagnosis == DIAGNOSIS for g in groups)
    text = html.unescape(page)
    for g in groups:
        assert g.summary in text and f'id="{g.id}"' in page
    assert DIAGNOSIS in text
    # a repro script per finding, the real one (it rebuilds the tensors and exits 1 while the bug is there)
    assert page.count("<details><summary>repro script") == sum(len(g.findings) for g in groups)
    assert "import torch" in text and "BUG PRESENT" in text
    # the same run named as FILE:ID, to a chosen file
    chosen = stored.parent / "chosen.html"
    assert main(["report", f"{stored}:1", "--output", str(chosen)]) == 0
    assert chosen.read_text(encoding="utf-8") == page


@pytest.mark.parametrize("arguments, says", [
    (["report", "latest", "--db", "{tmp}/missing.db"], "no database"),
    (["report", "{tmp}/a-file"], "not a torchsleuth database"),
    (["report", "3", "--db", "{tmp}/empty.db"], "holds no runs"),
    (["report", "run-three"], "cannot read 'run-three' as a run"),
    (["report", "latest", "--db", "{tmp}/empty.db", "--output", "{tmp}/a-file/report.html"], "--output"),
    (["report", "latest", "--db", "{tmp}/empty.db", "--junit", "{tmp}"], "--junit"),
])
def test_bad_run_or_output_is_one_line_and_exit_2(arguments, says, tmp_path, capsys):
    (tmp_path / "a-file").write_text("a regular file\n")
    Store(tmp_path / "empty.db").close()
    before = sorted(tmp_path.iterdir())
    assert main([a.format(tmp=tmp_path) for a in arguments]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchsleuth report: error:") and says in lines[0], captured.err
    assert captured.out == ""
    assert sorted(p for p in tmp_path.iterdir() if not p.name.startswith("empty.db")) == [p for p in before if not p.name.startswith("empty.db")]


def test_report_help_teaches(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for shown in ("RUN", "--db", "--output", "--junit", "examples:", "torchsleuth report latest", "heatmaps", "no network"):
        assert shown in text, shown


# --- in a browser -------------------------------------------------------------------------

NO_BROWSER = "TORCHSLEUTH_NO_BROWSER"


@pytest.fixture
def browser() -> str:
    return chromium()


def chromium() -> str:
    """Chromium's path; fails with how to install it, or skips when NO_BROWSER says so."""
    setting = os.environ.get(NO_BROWSER, "")
    if setting not in ("", "0", "1"):
        pytest.fail(f"{NO_BROWSER}={setting!r}: allowed values are 1 (skip the browser test) and 0 or unset (run it)")
    if setting == "1":
        pytest.skip(f"{NO_BROWSER}=1: the HTML report is not opened in a browser")
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if path is None:
        pytest.fail(
            "headless Chromium is needed to check the HTML report in a browser and is not installed: "
            f"`apt-get install -y chromium` (Debian; .ci/run does it), or set {NO_BROWSER}=1 to skip this test"
        )
    return path


def headless(browser: str, profile: Path, *arguments: str) -> subprocess.CompletedProcess:
    # a profile of its own, so that browsers started by other tests or people do not share a lock
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG (stdlib only: struct and zlib)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat, width, height, channels = 8, b"", 0, 0, 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8, depth
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + width * channels)
    return width, height, raw[1 + width * channels:]  # from the second row on, filtered against the first


def ink(scanlines: bytes, width: int, channels: int = 4) -> float:
    """Share of filtered bytes that are not zero: a page of one colour filters to all zeros under every PNG filter.

    The filter-type byte opening each row is left out.
    """
    row = 1 + width * channels
    nonzero = sum(len(scanlines[i + 1:i + row]) - scanlines[i + 1:i + row].count(0) for i in range(0, len(scanlines), row))
    return nonzero / max(1, len(scanlines))


def test_missing_chromium_fails_saying_how_to_install_it(monkeypatch):
    monkeypatch.delenv(NO_BROWSER, raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(pytest.fail.Exception, match=f"apt-get install -y chromium.*{NO_BROWSER}=1"):
        chromium()


def test_report_opens_in_headless_chromium_and_shows_the_groups(browser, stored, tmp_path, capsys):
    # (browser before stored: a skipped browser test costs no sweep)
    assert main(["report", "latest", "--db", str(stored), "--output", str(tmp_path / "report.html")]) == 0
    capsys.readouterr()
    page = (tmp_path / "report.html").resolve()
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>\n")

    shots = {}
    for name, source in (("report", page), ("blank", blank)):
        shots[name] = tmp_path / f"{name}.png"
        done = headless(browser, tmp_path / f"profile-{name}", f"--screenshot={shots[name]}", "--window-size=1200,900", source.as_uri())
        assert shots[name].is_file(), done.stderr[-2000:]
    width, height, scanlines = png_pixels(shots["report"])
    assert (width, height) == (1200, 900)
    assert 10_000 < shots["report"].stat().st_size < 5_000_000
    _, _, blank_scanlines = png_pixels(shots["blank"])
    # text, tables and colour on the page; none on the blank one
    assert ink(blank_scanlines, width) < 0.001
    assert ink(scanlines, width) > 0.01

    done = headless(browser, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = html.unescape(done.stdout)
    groups = groups_of(stored)
    for g in groups:
        assert g.summary in dom, g.summary
    assert DIAGNOSIS in dom
    assert "failing cases by op and layout" in dom
