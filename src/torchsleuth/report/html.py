"""The HTML report: one self-contained file that opens offline, in any browser.

Design note. The page renders ``report.view``'s records, the same ones the
terminal summary shows, but in full: every group (its diagnosis first, when
there is one, as the sentence a reader came for), every finding in it with
its mismatch and its repro script, every reason a case was not judged, and
two heatmaps of where the failing cases sit (op x layout, op x dtype).

Self-contained: the CSS is inline, nothing is fetched (no fonts, scripts or
images), and nothing needs JavaScript: repro scripts and long reason lists
fold with ``<details>``, which browsers open and close by themselves. So the
file can be mailed, attached to a CI job, or opened years later.

Every string that comes from the data (op names, summaries, reasons, the
scripts) goes through ``_text`` (``html.escape``, quotes included), with no
exception: a reason or a custom op's name is the user's text and may hold
``<script>``. Markup is only ever written by this module. Numbers are
formatted here, never taken as strings.

The file is written to a temporary name and renamed, so a reader never sees
half of it.
"""

from __future__ import annotations

import html
import os
import time
from pathlib import Path

from .._version import __version__
from .view import FindingView, GroupView, Heatmap, ReasonTable, ReportView, RunView

_CSS = """
:root { --ink: #1d1f23; --muted: #5d6470; --line: #d9dde3; --paper: #ffffff; --soft: #f5f6f8;
        --bad: #b3261e; --good: #1e7a3c; --warn: #8a5a00; --accent: #0b57d0; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       background: var(--paper); margin: 0 auto; padding: 1.5rem 2rem 4rem; max-width: 1200px; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; }
h2 { font-size: 1.25rem; margin: 2.5rem 0 .75rem; border-bottom: 2px solid var(--line); padding-bottom: .25rem; }
h3 { font-size: 1.05rem; margin: 0 0 .5rem; }
h4 { font-size: .95rem; margin: 0 0 .35rem; font-weight: 600; }
code, pre, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .85rem; }
.lead { color: var(--muted); margin: 0; }
.verdict { font-size: 1.1rem; font-weight: 600; margin: .75rem 0 0; }
.verdict.bad { color: var(--bad); } .verdict.good { color: var(--good); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1.25rem; margin: 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid var(--line); padding: .25rem .6rem; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.status-pass { color: var(--good); } .status-finding { color: var(--bad); font-weight: 600; }
.status-raised { color: var(--warn); } .status-skip { color: var(--muted); } .status-error { color: #7b1fa2; font-weight: 600; }
nav ol { padding-left: 1.5rem; } nav li { margin: .3rem 0; } nav .diagnosis { margin: .3rem 0 .6rem; }
a { color: var(--accent); }
.group { border: 1px solid var(--line); border-left: 5px solid var(--bad); border-radius: 6px;
         padding: 1rem 1.25rem; margin: 0 0 1.5rem; background: var(--paper); }
.diagnosis { background: #fff4e5; border: 1px solid #f0b35a; border-radius: 5px; padding: .6rem .9rem;
             margin: .25rem 0 .75rem; font-size: 1.02rem; }
.diagnosis strong { color: #8a4b00; }
.meta { color: var(--muted); font-size: .88rem; margin: 0 0 .75rem; }
.tag { display: inline-block; background: var(--soft); border: 1px solid var(--line); border-radius: 4px;
       padding: 0 .4rem; margin: 0 .2rem .2rem 0; font-size: .82rem; }
.finding { border-top: 1px dashed var(--line); padding: .75rem 0 .25rem; }
.finding p.facts { margin: 0 0 .2rem; } .tag .name { color: var(--muted); }
.finding p.case { margin: 0; color: var(--muted); font-size: .82rem; overflow-wrap: anywhere; }
.detail { margin: .35rem 0; }
.mismatch { background: var(--soft); border-radius: 4px; padding: .35rem .6rem; margin: .5rem 0; overflow-wrap: anywhere; }
details { margin: .35rem 0; } summary { cursor: pointer; color: var(--accent); }
pre { background: #f6f8fa; border: 1px solid var(--line); border-radius: 4px; padding: .75rem; overflow: auto;
      max-height: 32rem; white-space: pre; }
.heatmaps { display: flex; flex-wrap: wrap; gap: 2rem; }
.heatmap td.n { min-width: 3.2rem; } .heatmap td.zero { color: #b9bec7; }
.heatmap th.op { font-family: ui-monospace, Menlo, Consolas, monospace; font-weight: 500; font-size: .85rem; }
footer { margin-top: 3rem; color: var(--muted); font-size: .85rem; }
"""


def render(report: ReportView) -> str:
    """The whole page for ``report``, as text."""
    run = report.run
    title = f"torchsleuth run {run.id}: {run.command} on {run.device}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{_text(title)}</h1>",
        f'<p class="lead">torch {_text(run.torch)}, torchsleuth {_text(run.version)}; '
        f"{run.cases:,} cases in {_seconds(run.seconds)}: {_status_line(run)}</p>",
        _verdict(report),
        "</header>",
        # what a reader came for first (the groups, their diagnoses), then where the failures sit,
        # then each group in full, then the run in full
        _index_section(report.groups),
        _heatmaps_section(report.heatmaps),
        _details_section(report.groups),
        _run_section(run, report),
        # no time of writing: the same run gives the same file, so two reports diff cleanly
        f"<footer>written by torchsleuth {_text(__version__)}; "
        "every repro script needs only torch and exits 1 while its bug is present.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write(path: str | Path, report: ReportView) -> Path:
    """Writes the page to ``path`` (via a temporary name); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(render(report), encoding="utf-8")
    os.replace(temporary, path)
    return path


# --- sections ---------------------------------------------------------------------------


def _status_line(run: RunView) -> str:
    return ", ".join(f'<span class="status-{_text(status)}">{count:,} {_text(status)}</span>' for status, count in run.statuses) or "no cases"


def _verdict(report: ReportView) -> str:
    if not report.groups:
        return '<p class="verdict good">no findings</p>'
    findings = _plural(report.findings, "finding")
    groups = _plural(len(report.groups), "group")
    return f'<p class="verdict bad">{findings} in {groups} (each group is likely one bug)</p>'


def _run_section(run: RunView, report: ReportView) -> str:
    facts = [
        ("run", str(run.id)),
        ("command", run.command),
        ("device", run.device),
        ("torch", run.torch),
        ("torchsleuth", run.version),
        ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))),
        ("finished", "yes" if run.finished else "no: the run was cut off; rerun its command to resume it"),
        ("seconds", f"{run.seconds:.1f}"),
        ("cases", f"{run.cases:,}"),
        *run.settings,
    ]
    parts = ['<section id="run">', "<h2>The run</h2>", _facts(facts)]
    if run.statuses:
        rows = "".join(
            f'<tr><td class="status-{_text(status)}">{_text(status)}</td><td class="n">{count:,}</td></tr>'
            for status, count in run.statuses
        )
        parts.append(f'<table class="statuses"><thead><tr><th>status</th><th class="n">cases</th></tr></thead><tbody>{rows}</tbody></table>')
    parts += [_reasons(table) for table in report.reasons]
    if report.failed_units:
        items = "".join(f"<li><code>{_text(unit)}</code>: {_text(detail)}</li>" for unit, detail in report.failed_units)
        parts.append(f"<h3>units that could not run</h3><ul>{items}</ul>")
    if report.flaky:
        items = "".join(
            f'<li><span class="mono">{_text(f.id)}</span> {_text(f.summary)} <code>{_text(f.case_id)}</code></li>' for f in report.flaky
        )
        parts.append(f"<h3>did not recur when replayed (flaky; not reported as bugs)</h3><ul>{items}</ul>")
    if report.internal:
        items = "".join(
            f'<li><span class="mono">{_text(f.id)}</span> {_text(f.summary)} <code>{_text(f.case_id)}</code></li>' for f in report.internal
        )
        parts.append(f"<h3>torchsleuth's own failures (crashes no standalone script reproduces; not the op's)</h3><ul>{items}</ul>")
    if report.notes:
        items = "".join(f"<li>{_text(kind)}: {_text(detail)}</li>" for kind, detail in report.notes)
        parts.append(f"<h3>notes</h3><ul>{items}</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def _reasons(table: ReasonTable) -> str:
    rows = "".join(f'<tr><td class="n">{count:,}</td><td>{_text(reason)}</td></tr>' for count, reason in table.rows)
    # folded: a full sweep has hundreds of reasons; open when short enough to read at a glance
    opened = " open" if len(table.rows) <= 10 else ""
    return (
        f'<details class="reasons reasons-{_text(table.status)}"{opened}>'
        f"<summary>{_text(table.title)}: {_plural(table.cases, 'case')}, {_plural(len(table.rows), 'reason')}</summary>"
        f'<table><thead><tr><th class="n">cases</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table>'
        "</details>"
    )


def _index_section(groups: tuple[GroupView, ...]) -> str:
    if not groups:
        return '<section id="groups"><h2>Groups</h2><p>No findings: every judged case passed.</p></section>'
    items = []
    for g in groups:
        diagnosis = f'<p class="diagnosis"><strong>Diagnosis:</strong> {_text(g.diagnosis)}</p>' if g.diagnosis else ""
        items.append(f'<li><a href="#{_text(g.id)}" class="mono">{_text(g.id)}</a> {_text(g.summary)}{diagnosis}</li>')
    return f'<section id="groups"><h2>Groups ({len(groups)})</h2><nav><ol>{"".join(items)}</ol></nav></section>'


def _details_section(groups: tuple[GroupView, ...]) -> str:
    if not groups:
        return ""
    parts = ['<section id="findings">', "<h2>Findings by group</h2>"]
    parts += [_group(g) for g in groups]
    parts.append("</section>")
    return "\n".join(parts)


def _group(g: GroupView) -> str:
    tags = [
        ("op", g.op), ("kind", g.kind), ("variant", g.variant), ("reference", g.reference),
        ("layouts", ", ".join(g.layouts)), ("dtypes", ", ".join(g.dtypes)), ("devices", ", ".join(g.devices)),
    ]
    parts = [
        f'<article class="group" id="{_text(g.id)}">',
        f"<h3>{_text(g.summary)}</h3>",
    ]
    if g.diagnosis:
        parts.append(f'<p class="diagnosis"><strong>Diagnosis:</strong> {_text(g.diagnosis)}</p>')
    parts.append(
        f'<p class="meta"><span class="mono">{_text(g.id)}</span> &middot; {_plural(len(g.findings), "finding")} &middot; '
        + "".join(_tag(name, value) for name, value in tags)
        + "</p>"
    )
    parts += [_finding(f) for f in g.findings]
    parts.append("</article>")
    return "\n".join(parts)


def _finding(f: FindingView) -> str:
    # one line of tags, not a table: a group lists many findings that differ in a field or two
    facts = [
        ("kind", f.kind), ("op", f.op), ("variant", f.variant), ("dtype", f.dtype), ("device", f.device),
        ("reference", f.reference), ("layouts", f.where),
    ]
    parts = [
        f'<div class="finding" id="{_text(f.id)}">',
        f'<h4><span class="mono">{_text(f.id)}</span> {_text(f.summary)}</h4>',
        '<p class="facts">' + "".join(_tag(name, value) for name, value in facts) + "</p>",
        f'<p class="case">case <code>{_text(f.case_id)}</code>'
        + (f" (shrunk from <code>{_text(f.found_as)}</code>, where the sweep found it)" if f.found_as != f.case_id else "")
        + "</p>",
    ]
    if f.mismatch:
        parts.append(f'<p class="mismatch mono">{_text(f.mismatch)}</p>')
    if f.detail:
        parts.append(f'<p class="detail">{_text(f.detail)}</p>')
    if f.repro:
        parts.append(
            f"<details><summary>repro script <code>{_text(f.id)}.py</code> (needs only torch; exits 1 while the bug is present)</summary>"
            f"<pre><code>{_text(f.repro)}</code></pre></details>"
        )
    parts.append("</div>")
    return "\n".join(parts)


def _heatmaps_section(heatmaps: tuple[Heatmap, ...]) -> str:
    if not heatmaps:
        return ""
    parts = [
        '<section id="where">',
        "<h2>Where failures sit</h2>",
        '<p class="lead">Failing cases (a case with several findings counts once); a case with two laid-out '
        "arguments counts under each of their layouts, one with every tensor contiguous under contiguous.</p>",
        '<div class="heatmaps">',
        *(_heatmap(h) for h in heatmaps),
        "</div>",
        "</section>",
    ]
    return "\n".join(parts)


def _heatmap(h: Heatmap) -> str:
    peak = h.peak or 1
    head = "".join(f'<th class="n">{_text(c)}</th>' for c in h.columns)
    rows = []
    for op, counts in zip(h.rows, h.counts):
        cells = "".join(_cell(count, peak, op, column, h.columns_are) for count, column in zip(counts, h.columns))
        rows.append(f'<tr><th class="op">{_text(op)}</th>{cells}</tr>')
    return (
        f'<figure class="heatmap"><figcaption><h3>{_text(h.title)}</h3></figcaption>'
        f"<table><thead><tr><th>{_text(h.rows_are)} \\ {_text(h.columns_are)}</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></figure>"
    )


def _cell(count: int, peak: int, op: str, column: str, columns_are: str) -> str:
    tip = _text(f"{op}, {columns_are} {column}: {_plural(count, 'failing case')}")
    if not count:
        return f'<td class="n zero" title="{tip}">0</td>'
    # red, from faint to strong by share of the busiest cell; white text once dark
    strength = 0.15 + 0.85 * count / peak
    ink = "#fff" if strength > 0.55 else "#1d1f23"
    return f'<td class="n" title="{tip}" style="background: rgba(179, 38, 30, {strength:.2f}); color: {ink}">{count:,}</td>'


# --- small pieces -----------------------------------------------------------------------


def _tag(name: str, value: str) -> str:
    return f'<span class="tag"><span class="name">{_text(name)}</span> {_text(value)}</span>'


def _facts(facts) -> str:
    rows = "".join(f"<dt>{_text(name)}</dt><dd>{_text(value)}</dd>" for name, value in facts)
    return f'<dl class="facts">{rows}</dl>'


def _text(value) -> str:
    """Data as HTML text or attribute value: always escaped (see the design note)."""
    return html.escape(str(value), quote=True)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
