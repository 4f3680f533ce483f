"""``torchsleuth``: the command line, one module per command over the Python API."""

from __future__ import annotations

import argparse
import sys

from .. import _version
from ..errors import ExitCode, UsageError
from . import precheck

DESCRIPTION = """\
torchsleuth finds silent correctness bugs in PyTorch: kernels that return
wrong numbers and raise nothing. Each command judges calls against
references (the same call on contiguous tensors, on the CPU, in float64)
and contracts (in-place results land, out= keeps its strides, nothing is
written outside a view), and writes a runnable repro for every finding.

start with:
  torchsleuth ops --ops nn.functional.gelu   one op, deep (a pointed run: about 30 s)
  torchsleuth ops                            the whole catalog on the CPU (minutes)
  torchsleuth watch train.py                 the wrong op inside your training step
  torchsleuth COMMAND --help                 a command's flags, defaults and examples
Your own op or kernel is checked from Python, torchsleuth.check(op, samples),
or from a test with the pytest fixture torchsleuth_check (docs/python-api.md).

exit status: 0 no findings, 1 findings, 2 usage or environment error,
3 the script `watch` ran failed, 4 nothing was checked.
"""

# Words a newcomer types as a command that are not one: what to do instead.
NOT_COMMANDS = {
    "check": "check is no command: a kernel of your own is checked from Python, torchsleuth.check(op, samples), or "
             "from a test with the pytest fixture torchsleuth_check (docs/python-api.md); an op of the catalog with "
             "torchsleuth ops --ops NAME",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str):  # noqa: D102 (argparse's hook)
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")

    def format_help(self) -> str:
        # the commands' descriptions are their modules' docstrings, whose ``code`` reads as `code` on a terminal
        return super().format_help().replace("``", "`")


def build_parser() -> argparse.ArgumentParser:
    from . import diff, drill, ops, optim, report, repro, runs, shard, watch

    parser = _Parser(prog="torchsleuth", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"torchsleuth {_version.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # the sources of findings; then what reads the store back; then the drill
    for command in (ops, watch, optim, shard, report, diff, repro, runs, drill):
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in NOT_COMMANDS:
        print(f"torchsleuth: error: {NOT_COMMANDS[argv[0]]}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        precheck.check(argv)  # a mistyped name is answered before torch loads
    except UsageError as e:
        print(f"torchsleuth {argv[0]}: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(args.run(args))
    except UsageError as e:
        print(f"torchsleuth {args.command}: error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        print("\ninterrupted; rerun the same command to resume where it stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
