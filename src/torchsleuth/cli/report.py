"""``torchsleuth report``: a stored run as one self-contained HTML page (and JUnit XML for CI)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ExitCode, UsageError
from ..store.runs import DEFAULT_DB, FORMS
from .arguments import command

EPILOG = f"""\
RUN is {FORMS}
(`torchsleuth runs` lists them). The run is read from the database as the
sweep left it; nothing is rerun, so a report of a run on a GPU machine can be
made anywhere the database is copied to (torch is needed for repro scripts).

The page needs nothing but a browser (no network, no JavaScript): the run
(command, device, torch, cases by status, why cases were not judged), every
finding group with its diagnosis when the shrink stage made one, every
finding in it with its mismatch and its repro script (folded; each needs
only torch and exits 1 while the bug is present), and two heatmaps of the
failing cases: op x layout and op x dtype.

--junit writes the same run as JUnit XML for CI systems: a <testsuite> per
op, a <testcase> per op, variant and dtype, failing with the findings in it
(`torchsleuth ops --junit PATH` writes it straight after a sweep).

exit status: 0 when the report was written (findings or not), 2 when RUN
names no run or an output cannot be written.

--issue GROUP writes, instead, a markdown bug report of one group ready to
file upstream (GROUP: a group id g-... or a finding id f-... of RUN, by
default the newest run): a title, a few lines of plain torch that fail (the
values inline; no torchsleuth import), expected against actual with the
reference used, the trigger in one sentence, the environment (torch build,
CPU capability, GPU, torch.utils.collect_env's key lines). The snippet is run
before it is written and must raise its assert; if it does not, the full
repro script is filed instead and the report says so. --torch PATH ...
runs it under other interpreters too (python executables or venvs, each
with its own torch release) and lists which releases it reproduces on.
Written to -o FILE.md, by default issue-<group>.md next to the database.

examples:
  torchsleuth report --issue g-490fe9f2            # the newest run's group g-490fe9f2, as issue-g-490fe9f2.md
  torchsleuth report --issue f-3a9c0d1e2f --run 3 --torch ~/venvs/torch-2.6 ~/venvs/torch-2.10/bin/python -o bug.md
  torchsleuth report latest                        # newest run in {DEFAULT_DB}; writes report-<id>.html beside it
  torchsleuth report 3 --output run3.html          # run 3, to a file of your choice
  torchsleuth report ci/runs.db:7 --junit results.xml
  torchsleuth report gpu-box.db -o gpu.html        # the newest run of a copied database
"""


def add_parser(commands) -> None:
    p = command(commands, "report", "write a stored run as a self-contained HTML report (and JUnit XML)", __doc__, EPILOG)
    p.add_argument("run_spec", metavar="RUN", nargs="?", default=None,
                   help="the run: an id, 'latest', a database file, or FILE:ID (default latest)")
    p.add_argument("--db", metavar="PATH", default=None, help=f"the SQLite file a sweep wrote (default {DEFAULT_DB})")
    p.add_argument("-o", "--output", metavar="FILE.html",
                   help="where the HTML goes (default: report-<run id>.html next to the database)")
    p.add_argument("--junit", metavar="FILE.xml", help="also write JUnit XML for CI to FILE.xml")
    p.add_argument("--issue", metavar="GROUP", help="write a markdown bug report of group GROUP (g-... or a finding's f-...) for upstream")
    p.add_argument("--run", metavar="RUN", dest="issue_run", help="with --issue: the run GROUP is of (default: RUN, or latest)")
    p.add_argument("--torch", metavar="PATH", nargs="+", default=(),
                   help="with --issue: python executables or venvs of other torch releases to run the report's snippet under")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.issue:
        return _issue(args)
    if args.torch or args.issue_run:
        raise UsageError("--torch and --run go with --issue GROUP")
    if args.run_spec is None:
        args.run_spec = "latest"
    from ..report import html, junit, view
    from ..store.runs import open_run
    from ..frame import result as stored_result
    from ..paths import writable_file

    # the outputs first, so that a typo costs nothing; the default output's folder is the database's
    if args.output:
        writable_file(args.output, "--output")
    if args.junit:
        writable_file(args.junit, "--junit")
    store, info = open_run(args.run_spec, args.db)
    try:
        # the findings the shrink stage did not find flaky, grouped, with its diagnoses
        result = stored_result(store, info.id)
        output = Path(args.output) if args.output else store.path.parent / f"report-{info.id}.html"
        if not args.output:
            writable_file(output, "--output")
        report = view.build(result, repros=True)
        tallies = view.tallies(store.outcome_rows(info.id)) if args.junit else ()
    finally:
        store.close()
    html.write(output, report)
    groups = len(report.groups)
    found = f"{report.findings} finding{'s' if report.findings != 1 else ''} in {groups} group{'s' if groups != 1 else ''}"
    print(f"report of run {info.id} ({found}): {output}")
    if args.junit:
        junit.write(args.junit, report, tallies)
        print(f"junit: {args.junit}")
    return ExitCode.CLEAN


def _issue(args) -> int:
    """``--issue GROUP``: the group's upstream report, its snippet run here (and under ``--torch``) first."""
    from ..report import upstream
    from ..paths import writable_file
    from ..store.runs import open_run
    from .repro import script_text

    if args.junit:
        raise UsageError("--junit writes a whole run; leave it out with --issue")
    pythons = upstream.check_pythons(args.torch)
    if args.output:
        writable_file(args.output, "--output")
    store, info = open_run(args.issue_run or args.run_spec or "latest", args.db)
    try:
        issue = upstream.build(store, info, args.issue, script=lambda finding: script_text(finding, info), pythons=pythons)
        output = Path(args.output) if args.output else store.path.parent / f"issue-{issue.group}.md"
    finally:
        store.close()
    writable_file(output, "--output")
    output.write_text(issue.text, encoding="utf-8")
    what = "a minimal snippet" if issue.minimal else "the full repro script (no minimal snippet reproduces)"
    releases = "; ".join(f"torch {r.torch or '?'}: {r.verdict}" for r in issue.runs)
    print(f"upstream report of {issue.group} ({what}; {releases}): {output}")
    print(f"title: {issue.title}")
    return ExitCode.CLEAN
