"""The records every report renders: one view of a stored run, built once.

Design note. The terminal summary, the HTML report and the JUnit file show
the same run, so they read the same records, built here from the stored run
(``frame.SweepResult``) and its groups. A reporter only lays these records
out; it never decides what a group covers, which statuses to count or in
what order, so the three cannot drift apart. Like every record that crosses
a stage boundary they are frozen and hold strings and numbers, never tensors.

Choices made here, once:

* statuses are listed pass, finding, raised, skip, error (the terminal's
  order since the start), then any status this code does not know;
* reasons (why a case was not judged, what the op raised, what failed in
  torchsleuth) are listed most frequent first; a renderer may cut the list;
* the groups decide what is reported: a report lists the findings its
  groups name, in the order they name them, and counts only those (the
  shrink stage leaves flaky findings out of its groups, and they must not
  come back through the side door); the flaky ones are listed apart, and
  so are torchsleuth's own failures (crashes no standalone script
  reproduces: shrink.attribute);
* a finding is shown as reported (``SweepResult.reported``: the shrunk case's
  call, mismatch and summary, as in the findings file and the repro
  scripts), with the case the sweep found it in beside it (``found_as``).
  Where failures sit (a group's layouts and dtypes, the heatmaps, the JUnit
  test case a finding belongs to) is told by the cases as found: those are
  what the sweep covered;
* the heatmaps count finding *cases* (a case with two findings, say a wrong
  value and a write outside the view, is one failing case), by the case's
  catalog op (``addcmul``, covering ``addcmul`` and ``addcmul_``) against
  each layout in the case and against its dtype. A case with every tensor
  contiguous counts as ``contiguous``; a case with two laid-out arguments
  counts once in each of their layouts. Columns are the layouts (dtypes)
  that appear, in the catalog's order; rows the ops, most failing cases first;
* repro scripts are the text ``report.repro.script`` writes (only when asked:
  the terminal does not need them, and they cost a moment each);
* tallies (per op, variant and dtype: statuses, reasons, seconds) come from
  the store's outcome rows, for reports that list every case, such as JUnit.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..cases.records import DEFAULT_DTYPES, LAYOUTS, Case
from ..judge.records import Finding
from . import groups as grouping
from .notes import run_notes

# The order statuses are shown in.
STATUS_ORDER = ("pass", "finding", "raised", "skip", "error")
# The statuses that carry reasons, with the title a report gives them, in the
# order they are shown.
REASON_TITLES = (
    ("error", "torchsleuth errors (bugs in torchsleuth; please report)"),
    ("skip", "not judged"),
    ("raised", "the op raised (loud, so not a silent bug)"),
)
CONTIGUOUS = "contiguous"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunView:
    id: int
    command: str
    device: str
    torch: str  # the torch version it ran under
    version: str  # the torchsleuth version that ran it
    started: float  # seconds since the epoch
    finished: bool  # False while a run is unfinished (killed, to be resumed)
    seconds: float
    cases: int
    statuses: tuple[tuple[str, int], ...]  # (status, count), nonzero only, in STATUS_ORDER
    settings: tuple[tuple[str, str], ...]  # what was swept, ("dtypes", "float32, float64"), ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasonTable:
    status: str  # skip, raised or error
    title: str
    rows: tuple[tuple[int, str], ...]  # (cases, reason), most cases first

    @property
    def cases(self) -> int:
        return sum(count for count, _ in self.rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class FindingView:
    id: str
    group: str  # the id of the group it is listed in
    kind: str
    op: str  # aten overload
    opinfo: str  # catalog name
    variant: str
    dtype: str
    device: str
    reference: str
    case_id: str  # the case as reported (shrunk, when it was)
    found_as: str  # the case the sweep found it in; case_id when not shrunk
    layouts: tuple[tuple[str, str], ...]  # (argument, layout) for each non-contiguous argument of case_id
    summary: str
    mismatch: str  # Mismatch.describe(), or "" when the finding has none
    detail: str
    repro: str  # the repro script's text; "" when not asked for

    @property
    def where(self) -> str:
        """``input=transposed, other=strided``, or ``contiguous``."""
        return ", ".join(f"{path}={layout}" for path, layout in self.layouts) or CONTIGUOUS


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupView:
    id: str
    summary: str
    diagnosis: str  # "" when not diagnosed
    op: str
    kind: str
    variant: str
    reference: str
    dtypes: tuple[str, ...]  # in order of first appearance
    devices: tuple[str, ...]
    layouts: tuple[str, ...]  # the layout names in its findings' cases as found, sorted; ("contiguous",) if none
    findings: tuple[FindingView, ...]

    @property
    def example(self) -> str:
        return self.findings[0].id


@dataclass(frozen=True, kw_only=True, slots=True)
class Heatmap:
    title: str
    rows_are: str  # what a row is ("op")
    columns_are: str  # what a column is ("layout", "dtype")
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]  # counts[row][column]: failing cases

    @property
    def peak(self) -> int:
        return max((c for row in self.counts for c in row), default=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportView:
    run: RunView
    findings: int
    groups: tuple[GroupView, ...]
    reasons: tuple[ReasonTable, ...]  # only statuses that occurred, in REASON_TITLES order
    failed_units: tuple[tuple[str, str], ...]  # (unit key "op|dtype|device", what went wrong)
    notes: tuple[tuple[str, str], ...]  # (kind, detail)
    heatmaps: tuple[Heatmap, ...]  # op x layout, op x dtype; () when nothing was found
    flaky: tuple[FindingView, ...] = ()  # found, but did not recur when replayed: not reported as bugs
    internal: tuple[FindingView, ...] = ()  # crashes no standalone script reproduces: torchsleuth's own failures


@dataclass(frozen=True, kw_only=True, slots=True)
class Tally:
    """Every case of one op, variant and dtype: what became of them."""

    op: str  # catalog name
    variant: str
    dtype: str
    statuses: tuple[tuple[str, int], ...]  # in STATUS_ORDER
    reasons: tuple[tuple[str, str, int], ...]  # (status, reason, cases), most cases first
    seconds: float

    def count(self, status: str) -> int:
        return dict(self.statuses).get(status, 0)


def build(result, groups: Sequence[grouping.Group] | None = None, *, repros: bool = False) -> ReportView:
    """The view of ``result`` (a ``frame.SweepResult``).

    ``groups`` default to the result's (diagnosed by the shrink stage), or to
    ``groups.group`` of its findings when it has none. ``repros``: write each
    finding's repro script (from the finding as reported) into its record.
    """
    findings = result.findings
    if groups is None:
        groups = list(result.groups) or grouping.group(findings)
    named = {i for g in groups for i in g.findings}
    shown = [f for f in dict((f.id, f) for f in findings).values() if f.id in named]
    reported = {f.id: result.reported(f) for f in shown}
    scripts = _scripts(reported.values(), result.run.torch) if repros else {}
    return ReportView(
        run=_run(result),
        findings=len(shown),
        groups=_groups(shown, groups, reported, scripts),
        reasons=_reasons(result.reasons),
        failed_units=tuple(result.failed_units),
        notes=run_notes(result.notes, result.run.config, result.reasons.get("raised", {})),
        heatmaps=heatmaps(shown) if shown else (),
        flaky=tuple(_finding(f, "", f.case_id, "") for f in result.flaky),
        internal=tuple(_finding(f, "", f.case_id, "") for f in getattr(result, "internal", ())),
    )


def ordered_statuses(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    known = [s for s in STATUS_ORDER if counts.get(s)]
    rest = sorted(s for s in counts if s not in STATUS_ORDER and counts[s])
    return tuple((s, int(counts[s])) for s in known + rest)


def _run(result) -> RunView:
    run = result.run
    return RunView(
        id=run.id, command=run.command, device=run.device, torch=run.torch, version=run.version,
        started=run.started, finished=run.finished is not None, seconds=result.seconds, cases=result.cases,
        statuses=ordered_statuses(result.statuses), settings=_settings(run.config),
    )


def _settings(config: dict) -> tuple[tuple[str, str], ...]:
    """The swept axes from the stored config, short enough to show (a full catalog is ~700 ops)."""
    shown = []
    ops = list(config.get("ops") or ())
    if ops:
        listed = ", ".join(ops[:12]) + (f", ... ({len(ops)} ops)" if len(ops) > 12 else "")
        shown.append(("ops", listed))
    for name in ("dtypes", "layouts", "variants", "imports"):
        values = config.get(name)
        if values:
            shown.append((name, ", ".join(map(str, values))))
    if "samples" in config:
        shown.append(("samples", "all" if config["samples"] == 0 else str(config["samples"])))
    for name in ("oracles", "search"):
        if config.get(name):
            shown.append((name, ", ".join(config[name])))
    if config.get("search"):
        budget = [f"{config['budget']} cases" if config.get("budget") else "", f"{config['budget_seconds']:g} s" if config.get("budget_seconds") else ""]
        shown.append(("search budget", " and ".join(b for b in budget if b) + " per op and dtype" if any(budget) else "none: every planned case"))
    if config.get("probe_dtypes"):
        shown.append(("probe dtypes", "on: each op also in the dtypes it does not declare, where its kernel takes them"))
    return tuple(shown)


def _reasons(reasons: dict[str, dict[str, int]]) -> tuple[ReasonTable, ...]:
    tables = []
    for status, title in REASON_TITLES:
        counts = reasons.get(status)
        if counts:
            rows = sorted(((int(n), reason) for reason, n in counts.items()), key=lambda row: (-row[0], row[1]))
            tables.append(ReasonTable(status=status, title=title, rows=tuple(rows)))
    return tuple(tables)


def _scripts(findings: Iterable[Finding], torch_version: str) -> dict[str, str]:
    from . import repro  # imports torch: only for reports that show scripts

    scripts = {}
    for finding in findings:
        try:
            scripts[finding.id] = repro.script(finding, torch_version=torch_version)
        except Exception as e:  # one unwritable script must not cost the whole report; it says why
            scripts[finding.id] = f"# no repro script: writing it failed ({type(e).__name__}: {e}); please report this\n"
    return scripts


def _groups(
    findings: Sequence[Finding], groups: Sequence[grouping.Group], reported: dict[str, Finding], scripts: dict[str, str]
) -> tuple[GroupView, ...]:
    by_id = {f.id: f for f in findings}
    views = []
    for g in groups:
        members = [by_id[i] for i in g.findings if i in by_id]
        if not members:
            continue
        views.append(GroupView(
            id=g.id, summary=g.summary, diagnosis=g.diagnosis,
            op=members[0].op, kind=members[0].kind, variant=members[0].variant, reference=members[0].reference,
            dtypes=_unique(f.dtype for f in members), devices=_unique(f.device for f in members),
            layouts=tuple(sorted({layout for f in members for _, layout in f.layouts})) or (CONTIGUOUS,),
            findings=tuple(_finding(reported[f.id], g.id, f.case_id, scripts.get(f.id, "")) for f in members),
        ))
    return tuple(views)


def _finding(f: Finding, group: str, found_as: str, repro: str) -> FindingView:
    return FindingView(
        id=f.id, group=group, kind=f.kind, op=f.op, opinfo=f.opinfo, variant=f.variant, dtype=f.dtype, device=f.device,
        reference=f.reference, case_id=f.case_id, found_as=found_as, layouts=tuple(f.layouts), summary=f.summary,
        mismatch=f.mismatch.describe() if f.mismatch is not None else "", detail=f.detail, repro=repro,
    )


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


# --- heatmaps ---------------------------------------------------------------------------


def heatmaps(findings: Iterable[Finding]) -> tuple[Heatmap, Heatmap]:
    """Failing cases by op and layout, and by op and dtype (see the design note)."""
    cases = {}
    for f in findings:
        cases.setdefault(f.case_id, _case_of(f))
    by_layout: Counter = Counter()
    by_dtype: Counter = Counter()
    per_op: Counter = Counter()
    for case in cases.values():
        per_op[case.op] += 1
        by_dtype[case.op, case.dtype] += 1
        for layout in {layout for _, layout in case.layouts} or {CONTIGUOUS}:
            by_layout[case.op, layout] += 1
    rows = tuple(sorted(per_op, key=lambda op: (-per_op[op], op)))
    return (
        _heatmap("failing cases by op and layout", "layout", rows, by_layout, LAYOUTS),
        _heatmap("failing cases by op and dtype", "dtype", rows, by_dtype, DEFAULT_DTYPES),
    )


def _case_of(f: Finding) -> Case:
    try:
        return Case.parse(f.case_id)
    except ValueError:
        # a case id of another source (watch, shard) that does not parse: the finding names the same things
        return Case(op=f.opinfo or f.op, variant=f.variant, dtype=f.dtype, device=f.device, sample=0, layouts=tuple(f.layouts))


def _heatmap(title: str, columns_are: str, rows: tuple[str, ...], counts: Counter, order: Sequence[str]) -> Heatmap:
    present = {column for _, column in counts}
    columns = tuple(c for c in order if c in present) + tuple(sorted(present - set(order)))
    return Heatmap(
        title=title, rows_are="op", columns_are=columns_are, rows=rows, columns=columns,
        counts=tuple(tuple(counts[op, c] for c in columns) for op in rows),
    )


# --- tallies ----------------------------------------------------------------------------


def tallies(outcome_rows: Iterable[Sequence]) -> tuple[Tally, ...]:
    """Per op, variant and dtype, from ``Store.outcome_rows`` (case id, status, reason, seconds)."""
    statuses: dict[tuple, Counter] = defaultdict(Counter)
    reasons: dict[tuple, Counter] = defaultdict(Counter)
    seconds: dict[tuple, float] = defaultdict(float)
    for case_id, status, reason, took in outcome_rows:
        key = tally_key(case_id)
        statuses[key][status] += 1
        seconds[key] += float(took or 0.0)
        if reason and status != "pass":
            reasons[key][status, reason] += 1
    return tuple(
        Tally(
            op=key[0], variant=key[1], dtype=key[2], statuses=ordered_statuses(statuses[key]),
            reasons=tuple((s, r, n) for (s, r), n in sorted(reasons[key].items(), key=lambda item: (-item[1], item[0]))),
            seconds=seconds[key],
        )
        for key in sorted(statuses)
    )


def tally_key(case_id: str) -> tuple[str, str, str]:
    """(catalog op, variant, dtype) of a case id: what a ``Tally`` is keyed by."""
    try:
        case = Case.parse(case_id)
    except ValueError:
        return (case_id, "", "")  # not an ops case id: its own line, never dropped
    return (case.op, case.variant, case.dtype)
