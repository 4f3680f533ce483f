"""JUnit XML (``--junit PATH``): a run as test results, for CI systems.

Design note. CI systems (GitLab, Jenkins, GitHub actions that read JUnit)
show suites of test cases, each passed, failed, errored or skipped. A sweep
has hundreds of thousands of cases, far more than such pages can show, so a
test case here is one op in one variant and dtype, covering every layout and
sample of it, and a suite is one op (its catalog name, so ``addcmul`` holds
``addcmul`` and ``addcmul_``):

* ``<testsuite name="addcmul">`` per op, ``<testcase classname="addcmul"
  name="addcmul[inplace-float32]">`` per variant and dtype;
* a test case with findings has one ``<failure>``: the message counts them
  by kind, the text lists each (id, kind, reference, aten op, layouts,
  summary, mismatch, and the group id the HTML report lists it under), at
  most ``MAX_LISTED`` of them;
* else, one with a case torchsleuth failed on has an ``<error>`` (a bug in
  torchsleuth, not in the op);
* else, one where no case was judged (every case skipped or raised) is
  ``<skipped>``, with the reasons;
* else it passed; cases in it that were not judged are counted, with their
  reasons, in ``<system-out>``;
* a unit (op and dtype) that could not run at all is a test case
  ``op[dtype]`` with an ``<error>``.

So the counts a CI page shows are of (op, variant, dtype) triples, bounded
by the catalog (a few thousand), and a failing one names every finding in
it. The records come from ``report.view``: the same groups and findings the
terminal and HTML reports show, plus a ``Tally`` per triple from the store's
outcome rows.

Text is escaped by ``xml.etree``. XML 1.0 cannot hold most control
characters at all (an exception's message may contain one), so those are
written as ``\\x1b``-style escapes first. The file is written to a temporary
name and renamed.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

from .view import FindingView, ReportView, Tally, tally_key

# Findings listed in one failure's text before "... and N more".
MAX_LISTED = 50
# Reasons listed in one skipped or system-out text.
MAX_REASONS = 10

# Characters XML 1.0 does not allow (every C0 control but tab, newline, return; U+FFFE, U+FFFF; lone surrogates).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def write(path: str | Path, report: ReportView, tallies: tuple[Tally, ...]) -> Path:
    """Writes the JUnit file to ``path``; returns the path."""
    path = Path(path)
    tree = ET.ElementTree(document(report, tallies))
    ET.indent(tree)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tree.write(temporary, encoding="utf-8", xml_declaration=True)
    os.replace(temporary, path)
    return path


def document(report: ReportView, tallies: tuple[Tally, ...]) -> ET.Element:
    """The ``<testsuites>`` element (see the design note)."""
    run = report.run
    findings: dict[tuple[str, str, str], list[FindingView]] = defaultdict(list)
    for group in report.groups:
        for f in group.findings:
            findings[tally_key(f.found_as)].append(f)  # where the sweep found it (see view's note)
    by_key = {(t.op, t.variant, t.dtype): t for t in tallies}
    # every triple with outcomes or findings (a finding whose outcome is missing still shows)
    keys = sorted(set(by_key) | set(findings))
    failed_units = defaultdict(list)
    for unit, detail in report.failed_units:
        op, dtype = (unit.split("|") + ["", ""])[:2]
        failed_units[op].append((dtype, detail))

    root = ET.Element("testsuites", name=_safe(f"torchsleuth {run.command} on {run.device} (run {run.id})"))
    suites: dict[str, ET.Element] = {}
    for op in sorted({k[0] for k in keys} | set(failed_units)):
        suite = ET.SubElement(root, "testsuite", name=_safe(op))
        properties = ET.SubElement(suite, "properties")
        for name, value in (("run", run.id), ("command", run.command), ("device", run.device), ("torch", run.torch), ("torchsleuth", run.version)):
            ET.SubElement(properties, "property", name=name, value=_safe(str(value)))
        suites[op] = suite
    for key in keys:
        _testcase(suites[key[0]], key, by_key.get(key), findings.get(key, []))
    for op, units in failed_units.items():
        for dtype, detail in units:
            case = ET.SubElement(suites[op], "testcase", classname=_safe(op), name=_safe(f"{op}[{dtype}]"), time="0")
            error = ET.SubElement(case, "error", message=_safe(f"the unit could not run: {detail}"), type="unit_failed")
            error.text = _safe(detail)
    for suite in suites.values():
        _count(suite)
    _count(root)
    return root


def _testcase(suite: ET.Element, key: tuple[str, str, str], tally: Tally | None, found: list[FindingView]) -> None:
    op, variant, dtype = key
    seconds = tally.seconds if tally else 0.0
    case = ET.SubElement(suite, "testcase", classname=_safe(op), name=_safe(f"{op}[{variant}-{dtype}]"), time=f"{seconds:.3f}")
    if found:
        kinds = Counter(f.kind for f in found)
        message = f"{_plural(len(found), 'finding')}: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
        failure = ET.SubElement(case, "failure", message=_safe(message), type=_safe(",".join(sorted(kinds))))
        failure.text = _safe(_listing(found))
    elif tally and tally.count("error"):
        errors = [(r, n) for s, r, n in tally.reasons if s == "error"]
        message = f"torchsleuth failed on {_plural(tally.count('error'), 'case')} (a bug in torchsleuth; please report)"
        error = ET.SubElement(case, "error", message=_safe(message), type="torchsleuth_error")
        error.text = _safe(_reasons(errors))
    elif tally and not (tally.count("pass") or tally.count("finding")):
        not_judged = sum(n for _, n in tally.statuses)
        reasons = [(f"{s}: {r}", n) for s, r, n in tally.reasons]
        skipped = ET.SubElement(case, "skipped", message=_safe(f"no case judged ({not_judged} not judged): {_first_reason(reasons)}"))
        skipped.text = _safe(_reasons(reasons))
    if tally and tally.reasons and not (found or tally.count("error")) and (tally.count("pass") or tally.count("finding")):
        out = ET.SubElement(case, "system-out")
        counts = ", ".join(f"{n} {s}" for s, n in tally.statuses)
        out.text = _safe(f"{counts}\nnot judged:\n" + _reasons([(f"{s}: {r}", n) for s, r, n in tally.reasons]))


def _listing(found: list[FindingView]) -> str:
    lines = []
    for f in found[:MAX_LISTED]:
        lines.append(f"{f.id} {f.kind} ({f.reference} reference) {f.op} on {f.where} [group {f.group}]")
        lines.append(f"  {f.summary}")
        if f.mismatch:
            lines.append(f"  {f.mismatch}")
        if f.detail:
            lines.append(f"  {f.detail}")
    if len(found) > MAX_LISTED:
        lines.append(f"... and {len(found) - MAX_LISTED} more")
    return "\n".join(lines)


def _reasons(reasons: list[tuple[str, int]]) -> str:
    lines = [f"{n} x {reason}" for reason, n in reasons[:MAX_REASONS]]
    if len(reasons) > MAX_REASONS:
        lines.append(f"... and {len(reasons) - MAX_REASONS} more reasons")
    return "\n".join(lines)


def _first_reason(reasons: list[tuple[str, int]]) -> str:
    return reasons[0][0] if reasons else "no reason recorded"


def _count(element: ET.Element) -> None:
    """tests, failures, errors, skipped, time: summed over the test cases below ``element``."""
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    element.set("errors", str(sum(c.find("error") is not None for c in cases)))
    element.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    element.set("time", f"{sum(float(c.get('time', '0')) for c in cases):.3f}")


def _safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
