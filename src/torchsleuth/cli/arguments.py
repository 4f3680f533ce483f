"""What the commands' arguments share: the parser of a command, numbers, CPUs, --import."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UsageError


def command(commands, name: str, help: str, doc: str | None, epilog: str) -> argparse.ArgumentParser:
    """A subcommand's parser: one-line help, the module's docstring, an epilog of examples kept as written."""
    return commands.add_parser(name, help=help, description=doc, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def budget(text: str) -> tuple[int, float]:
    """``--budget``: ``N`` or ``Ncases`` searched cases, or ``Ns`` seconds, per op and dtype: (cases, seconds), 0 for none."""
    number, unit = text.strip(), "cases"
    for suffix, name in (("cases", "cases"), ("case", "cases"), ("s", "seconds")):
        if number.endswith(suffix):
            number, unit = number[: -len(suffix)].strip(), name
            break
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N, Ncases or Ns (searched cases or seconds per op and dtype), got {text!r}") from None
    if value < 0 or (unit == "cases" and value != int(value)):
        raise argparse.ArgumentTypeError(f"expected a whole number of cases >= 0, or seconds >= 0 (Ns), got {text!r}")
    return (int(value), 0.0) if unit == "cases" else (0, value)


def positive(text: str) -> int:
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def time_target(text: str) -> float:
    """``--time``: ``N``, ``Ns`` or ``Nm`` (seconds or minutes, >= 0), or ``none``; 0.0 for none."""
    number, scale = text.strip().lower(), 1.0
    if number == "none":
        return 0.0
    if number.endswith(("s", "m")):
        number, scale = number[:-1].strip(), 60.0 if number.endswith("m") else 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (120, 120s), minutes (2m), 0 or none, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0 (120, 120s), minutes (2m), 0 or none, got {text!r}")
    return value


def imports(names: list[str]) -> tuple[str, ...]:
    """The --import modules, loaded here (and kept) so that a broken one stops the command before it starts."""
    from ..run.imports import load_imports

    resolved = []
    for name in names:
        if name.endswith(".py"):
            if not Path(name).is_file():
                raise UsageError(f"--import {name!r}: no such file")
            name = str(Path(name).resolve())
        try:
            load_imports((name,))
        except Exception as e:  # the user's module: any failure is theirs to see
            raise UsageError(f"--import {name!r} failed: {type(e).__name__}: {e}") from None
        resolved.append(name)
    return tuple(resolved)
