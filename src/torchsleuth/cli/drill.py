"""``torchsleuth drill``: plant one bug of each class the oracles target and show each is caught."""

from __future__ import annotations

import argparse

from ..errors import ExitCode, UsageError
from ..paths import creatable_dir
from .arguments import command, count, cpus


def _epilog() -> str:
    from ..drill.classes import CLASSES

    rows = "\n".join(f"  {c.name:<18} {c.condition}\n  {'':<18} -> {c.expected}" for c in CLASSES)
    return f"""\
what it does:
  A clean report is worth something only if torchsleuth would have caught the
  bug had it been there. The drill replaces one aten CPU kernel per bug class
  with a kernel that is wrong in one way under one condition (torch.library,
  inside the worker process of a small sweep; never in this process), runs
  the sweep that reaches it, and checks that the findings name that op, that
  kind and that condition. A control sweep of the same ops without plants
  must find nothing on the same cases. Each sweep shrinks what it finds, as
  `torchsleuth ops` does, so a finding the report would leave out as flaky
  is missed here too. Takes about a minute on 2 cores, most of it
  starting workers (--no-shrink skips the shrinking).

classes (--classes, comma-separated; default all):
{rows}

reading the result:
  caught     the planted bug was reported as that kind, on that op and layout.
  missed     it was not: on this machine and torch, a sweep that is clean
             says nothing about bugs of that class. The row says what was
             found instead; please report it as a torchsleuth bug.
  control    a finding on a drilled case without any plant is a false alarm:
             either this torch has that bug itself (then the catch proves
             nothing) or an oracle is wrong here.

exit status: 0 every class caught and the control clean (trustworthy),
1 a class missed or a false alarm, 2 usage error.

examples:
  torchsleuth drill
  torchsleuth drill --classes dropped_write,crash --json drill.json
"""


def add_parser(commands) -> None:
    p = command(commands, "drill", "plant a bug of each class and check that each is caught (can a clean report be trusted?)",
                __doc__, _epilog())
    p.add_argument("--classes", metavar="LIST", help="bug classes to drill, comma-separated (see below); default: all")
    p.add_argument("--workers", type=_workers, default=cpus(), metavar="N",
                   help="sweeps run at once, each in a worker process of its own (default: one per CPU; at least 1)")
    p.add_argument("--json", metavar="PATH", help="write the results (a findings file with the drill's fields) to PATH")
    p.add_argument("--no-shrink", action="store_true",
                   help="skip each sweep's shrink stage: about twice as fast; checks the oracles, but not that shrinking "
                        "(which leaves out findings whose replay passes) keeps what they found")
    p.add_argument("--no-progress", action="store_true", help="no line per class as it finishes (for logs)")
    p.set_defaults(run=run)


def _workers(text: str) -> int:
    try:
        value = count(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        # 0 would mean "in this process" elsewhere: here it would plant the bugs in the user's process
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r} (plants live only in worker processes)")
    return value


def run(args) -> int:
    from pathlib import Path

    from ..cases.select import resolve_names
    from ..drill import BY_NAME, NAMES, drill, report

    names = resolve_names(args.classes, NAMES, "class", NAMES)
    if args.json and (Path(args.json).is_dir() or not creatable_dir(Path(args.json).resolve().parent)):
        raise UsageError(f"cannot write the --json file {args.json!r}: not a writable file path")
    progress = report.LineProgress(workers=args.workers, enabled=not args.no_progress)
    result = drill([BY_NAME[name] for name in names], workers=args.workers, shrink=not args.no_shrink, progress=progress)
    if args.json:
        report.write(args.json, result)
    report.summary(result)
    return ExitCode.CLEAN if result.trustworthy else ExitCode.FINDINGS
