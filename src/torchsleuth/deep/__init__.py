"""The deeper oracles: where no fixed tolerance reaches (issue 6).

Design note. The references and contracts (judge/) judge every case a sweep
plans. A deeper oracle judges an op by a property of its own: an element's
result does not depend on the length of the tensor around it (``sizes``),
aliased arguments raise or give the right answer (``alias``), a changed
argument between two calls is not ignored (``repeat``), the CPU's
instruction-set paths agree (``capability``), ``torch.compile`` agrees with
eager and leaves eager alone (``compile``), elements past 2^31 and 2^32 get
what small tensors get (``large``).

Each oracle is a module here with:

* ``DESCRIPTION``: one line for ``--help``;
* ``plan(unit, variant, sample) -> list[str]``: the oracle names (``"sizes"``,
  ``"alias:out-overlaps-input"``) of the cases it adds for one sample and
  variant of a unit; most add one case or none. An oracle with an option
  (``capability:default,avx2``: which instruction sets) is named with it in
  ``SweepConfig.oracles`` and gets it as a fourth argument;
* ``run(subject) -> Outcome``: judges one such case; ``subject`` (below) is
  what the engine knows about it. Findings are ``judge.records.Finding``
  with the oracle's own kind and reference, so they are stored, grouped,
  shrunk and reported as every other finding is;
* ``repro(finding, torch_version) -> str | None``: the standalone script for
  one of its findings (None: the generic script applies).

A deep case is an ordinary ``Case`` with ``oracle`` set: its id carries the
oracle (``...|s0|contiguous|@sizes``), so the shrinker and ``repro`` replay it
from the id alone, through ``engine.run_case``, like any other case.

The sweep adds an oracle's cases when ``SweepConfig.oracles`` names it
(``torchsleuth ops --oracles sizes,alias``).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..cases.records import Case, Unit
from ..judge.records import Outcome

# Oracle name -> module name under torchsleuth.deep, in the order they run.
ORACLES = {
    "sizes": "sizes",
    "alias": "alias",
    "repeat": "repeat",
    "capability": "capability",
    "compile": "compiled",
    "large": "large",
}


def module(name: str):
    """The module of an oracle, by its name or a case's ``oracle`` field (``"alias:..."``)."""
    family = name.split(":", 1)[0]
    if family not in ORACLES:
        raise KeyError(f"unknown oracle {family!r}; known: {', '.join(ORACLES)}")
    return importlib.import_module(f"{__name__}.{ORACLES[family]}")


def available() -> dict[str, str]:
    """The oracles that exist in this checkout, with their one-line descriptions."""
    found = {}
    for name in ORACLES:
        try:
            found[name] = module(name).DESCRIPTION
        except ModuleNotFoundError:
            continue
    return found


@dataclass(frozen=True, kw_only=True)
class Subject:
    """What the engine hands an oracle for one case."""

    case: Case
    entry: Any  # the OpInfo entry
    function: Callable  # the case's variant, as a callable (cases/opinfo.functions)
    sample: Any  # the OpInfo SampleInput, edits applied
    references: Callable  # references(case) -> run.references.References, shared per sample
    override: tuple[float, float] | None  # the OpInfo's tolerance override, if any

    def base(self):
        """The References of this case's base (its contiguous functional or backward call)."""
        return self.references(dataclasses.replace(self.case, oracle=""))


def cases_for(oracles: tuple[str, ...], unit: Unit, variant: str, sample: int) -> list[Case]:
    """The deep cases the selected oracles add for one sample and variant of ``unit``."""
    cases = []
    for entry in oracles:
        name, _, option = entry.partition(":")  # "capability:default,avx2": the oracle's own option
        plan = module(name).plan
        for oracle in (plan(unit, variant, sample, option) if option else plan(unit, variant, sample)):
            cases.append(Case(op=unit.op, variant=variant, dtype=unit.dtype, device=unit.device, sample=sample, oracle=oracle))
    return cases


def slower(case_id: str) -> float:
    """How many of the sweep's timeouts a case may take: its oracle's ``SLOWER`` (a compile: inductor's
    code generation and kernel builds), 1 for every other case."""
    oracle = case_id.rpartition("|@")[2] if "|@" in case_id else ""
    if oracle.split(":", 1)[0] not in ORACLES:
        return 1.0
    return float(getattr(module(oracle), "SLOWER", 1))


def run(subject: Subject) -> Outcome:
    return module(subject.case.oracle).run(subject)


def repro(finding, torch_version: str) -> str | None:
    """A deep finding's script, or None when the finding is not a deep oracle's."""
    oracle = Case.parse(finding.case_id).oracle
    if oracle.split(":", 1)[0] not in ORACLES:  # none, or another command's (shard's mesh)
        return None
    make = getattr(module(oracle), "repro", None)
    return make(finding, torch_version) if make else None
