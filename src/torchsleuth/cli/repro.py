"""``torchsleuth repro``: the standalone repro script of one stored finding."""

from __future__ import annotations

from pathlib import Path

from ..errors import ExitCode, UsageError
from ..store.runs import DEFAULT_DB, FORMS
from .arguments import command

EPILOG = f"""\
FINDING_ID is a finding's id as the sweep's summary, the findings file
(--json) or `torchsleuth diff` shows it (f-3a9c0d1e2f), or a group's id
(g-490fe9f2): its first finding, the example the summary shows. Ids are stable across
runs; when several runs of the database have the finding, the newest one's is
used. A mistyped or truncated id is answered with the closest ids stored.

The script needs only torch: it rebuilds the exact tensors (shape, stride,
storage offset, dtype, device, values), makes the call and its reference,
prints both and the difference, and exits 1 while the bug is present, 0 once
it is fixed, 2 when it cannot check (for example the call now raises). Paste
it into a bug report, or run it against each torch build.

Commands that take a RUN accept {FORMS}; `torchsleuth runs` lists them.

examples:
  torchsleuth repro f-3a9c0d1e2f                   # print it (database {DEFAULT_DB})
  torchsleuth repro f-3a9c0d1e2f -o bug.py && python bug.py
  torchsleuth repro f-3a9c0d1e2f --db ci/runs.db -o repros/   # writes repros/f-3a9c0d1e2f.py
"""


def add_parser(commands) -> None:
    p = command(commands, "repro", "print or write the standalone repro script of one finding", __doc__, EPILOG)
    p.add_argument("finding_id", metavar="FINDING_ID", help="the finding's id, f-..., or a group's, g-... (its first finding)")
    p.add_argument("--db", metavar="PATH", default=DEFAULT_DB, help=f"the SQLite file a sweep wrote (default {DEFAULT_DB})")
    p.add_argument("-o", "--output", metavar="PATH", help="write the script to PATH (a folder: PATH/FINDING_ID.py) instead of printing it")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..store.lookup import close_finding_ids, reported_finding
    from ..store.runs import open_store

    store = open_store(args.db)
    try:
        wanted = args.finding_id.strip()
        if wanted.startswith("g-"):  # a group: its first finding, the example the summary shows
            wanted = _example(store, wanted)
            if wanted is None:
                raise UsageError(f"no group {args.finding_id.strip()!r} in {args.db}; the sweep's summary and `--json` file list the ids")
        reported = reported_finding(store, wanted)
        if reported is None:
            close = close_finding_ids(store, wanted)
            hint = f"; did you mean {', '.join(close)}?" if close else "; the sweep's summary and `--json` file list the ids"
            raise UsageError(f"no finding {wanted!r} in {args.db}{hint}")
    finally:
        store.close()
    finding = reported.finding
    text = script_text(finding, reported.run)
    if not args.output:
        print(text, end="" if text.endswith("\n") else "\n")
        return ExitCode.CLEAN
    target = Path(args.output)
    if target.is_dir():
        target = target / f"{finding.id}.py"
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write the script to {str(target)!r}: {e.strerror or e}") from None
    print(f"repro of {finding.id} ({finding.op}, {finding.kind}; run {reported.run.id}) written to {target}; run it with `python {target}`")
    return ExitCode.CLEAN


def _example(store, group_id: str) -> str | None:
    """The first finding of group ``group_id`` in the newest run that has the group; None if none has it."""
    from ..report.groups import of_run

    for info in reversed(store.runs()):
        for group in of_run(store, info.id)[1]:
            if group.id == group_id:
                return group.findings[0]
    return None


def script_text(finding, run) -> str:
    """The repro script of ``finding`` of stored ``run``, written by the command that found it."""
    if run.command == "optim":
        return _optim_script(finding, run)
    if run.command == "watch" and _sharded(finding):
        from ..watch import sharded_repro

        return sharded_repro.script(finding, sharded_repro.resolved(tuple(run.config.get("imports", ()))))
    if run.command == "shard":
        from ..shard.repro import script as shard_script

        return shard_script(finding)
    from ..report.repro import script

    return script(finding, torch_version=run.torch, imports=tuple(run.config.get("imports", ())))


def _sharded(finding) -> bool:
    """A DTensor call ``watch`` judged on a sharded program (watch.sharded_repro writes its script)."""
    from ..watch import sharded_repro

    return sharded_repro.is_ours(finding)


def _optim_script(finding, run) -> str:
    """An optimizer finding's script: it runs the optimizer, not one op call (optim.repro)."""
    from ..optim import matrix, repro as optim_repro
    from ..optim.matrix import OptimConfig
    from .. import codec

    return optim_repro.script(finding, matrix.spec(finding.opinfo), codec.decode(OptimConfig, run.config))
