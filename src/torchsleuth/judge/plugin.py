"""The oracle seam: what an oracle is, and the registry every stage is handed.

Design note. The references and contracts (``judge.verdict``) judge every case
a sweep plans. An oracle plug-in judges an op by a property of its own (an
element's result does not depend on the tensor's length; aliased arguments
raise or give the right answer; ...). A plug-in is an ``Oracle`` record:

* ``name``, ``description`` (one line for ``--help``) and ``cost``: how it
  weighs on a sweep, one of ``COSTS`` (``cheap`` oracles go into pointed
  runs by default; ``costly`` and ``large`` ones are asked for by name);
* ``plan(unit, variant, sample, option) -> list[str]``: the oracle names
  (``"sizes"``, ``"alias:out-overlaps-input"``) of the cases it adds for one
  sample and variant of a unit; ``option`` is what followed the colon in
  ``SweepConfig.oracles`` (``capability:default,avx2``), or ``""``;
* ``run(subject) -> Outcome``: judges one such case; ``Subject`` below is
  what the engine knows about it. Findings are ordinary ``Finding`` records
  with the oracle's own kind and reference, and the oracle's ``Detail``
  record in ``Finding.data``, which is what its script reads back;
* ``script(finding, torch_version) -> str | None``: the standalone repro
  script of one of its findings (None: the generic script applies);
* ``handed(finding) -> tuple[(path, layout), ...]``: the layouts the op's
  kernel was handed where the case's own arguments are contiguous (vmap's
  batch at a moved dim hands each sample a strided slice): ``check``'s
  grouping folds such a finding into the op's group of those layouts
  (``report.groups``), one kernel's bug seen twice;
* ``slower``: how many of the sweep's timeouts one of its cases may take;
* ``option(text) -> str``: checks what a user gave for the oracle's option
  (``--large rows,index``) and returns it as carried in the config
  (``"rows,index"``); raises ``UsageError`` with what is allowed;
* ``on_values``: its cases are planned on the value search's edits too
  (``search.values``: special values in the vector body and the scalar
  tail of one tensor), each judged by the oracle's property with the edit
  made, as well as on the sample as it is;
* ``sampled``: a whole-catalog run that did not ask for it by name still
  runs a sample of its cases: they join the searched cases, within the
  sweep's budget (``SweepConfig.sampled``).
* ``pick(unit, planned, option, swept) -> list[Case]``: the oracle judges
  some of the sweep's own cases (every variant and layout assignment the
  engine planned for one sample, ``planned``) its own way: it picks them,
  its oracle name set (the compile oracle's compiled variant). ``swept``
  (``Swept``) says what the sweep covers of the op and which of the unit's
  swept samples this is, so that a pick spread over an op's dtypes and
  samples is the same on a replay. It is asked once more with the unit's
  searched cases (``Swept.searched``); what it picks of those runs beside
  the searched cases the sweep's budget keeps (its pick is its own budget).
* ``moves(case) -> list[Case]`` and ``weight(case) -> int``: what the
  shrinker knows of the oracle's own part of a case: cases one move simpler
  that only the oracle can make (a compiled chain with one op dropped),
  tried before the shrinker's own, and how complex that part is (the
  chain's length), compared before the shrinker's cost.

A plug-in case is an ordinary ``Case`` with ``oracle`` set: its id carries the
oracle (``...|s0|contiguous|@sizes``), so the shrinker and ``repro`` replay it
from the id alone, like any other case.

The ``Registry`` maps names to the modules that define them (each module has
a module-level ``ORACLE``). It holds module paths, not modules: it is
picklable, so worker processes get the same registry, and a module is
imported only when its oracle is asked for. The engine, the sweep, case
selection and the reports are handed a registry (``BUILTIN`` unless the
caller gives another) and never import an oracle themselves; an oracle
imports only the floors at or below this one and the repro kit.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from .. import codec
from ..cases.records import Case, Unit
from .records import Finding, Outcome

# How an oracle weighs on a sweep. cheap: milliseconds a case, part of a run
# pointed at a few ops; costly: seconds a case or a process of its own
# (compile, other CPU capabilities); large: gigabytes a probe (--large).
COSTS = ("cheap", "costly", "large")


@dataclass(frozen=True, kw_only=True)
class Subject:
    """What the engine hands an oracle for one case."""

    case: Case
    entry: Any  # the OpInfo entry
    function: Callable  # the case's variant, as a callable (cases/opinfo.functions)
    sample: Any  # the OpInfo SampleInput, edits applied
    references: Callable  # references(case) -> run.references.References, shared per sample
    override: tuple[float, float] | None  # the OpInfo's tolerance override, if any
    replay: Callable[[Case], Outcome]  # any case judged from scratch, as the shrinker replays one

    def base(self):
        """The References of this case's base (its contiguous functional or backward call)."""
        return self.references(dataclasses.replace(self.case, oracle=""))


@dataclass(frozen=True, kw_only=True)
class Swept:
    """What a sweep covers of a unit's op, for an oracle's ``pick``; and where in the unit the sample is."""

    dtypes: tuple[str, ...]  # the op's dtypes the sweep covers (those OpInfo declares), in the config's order
    layouts: tuple[str, ...]
    variants: tuple[str, ...]
    position: int  # the sample's place among the unit's swept samples
    count: int  # how many samples the unit sweeps
    searched: bool = False  # the cases handed over are the unit's searched cases (edited samples), not one sample's


@dataclass(frozen=True, kw_only=True)
class Oracle:
    name: str
    description: str
    cost: str  # one of COSTS
    plan: Callable[[Unit, str, int, str], list[str]]
    run: Callable[[Subject], Outcome]
    script: Callable[[Finding, str], str | None] | None = None
    # the few lines of plain torch an upstream report files (report.upstream); None: the full script is filed
    snippet: Callable[[Finding], str | None] | None = None
    handed: Callable[[Finding], tuple[tuple[str, str], ...]] | None = None
    slower: float = 1.0
    option: Callable[[str | None], str] | None = None
    on_values: bool = False
    sampled: bool = False
    pick: Callable[[Unit, list[Case], str, "Swept"], list[Case]] | None = None
    moves: Callable[[Case], list[Case]] | None = None
    weight: Callable[[Case], int] | None = None

    def __post_init__(self):
        if self.cost not in COSTS:
            raise ValueError(f"oracle {self.name!r}: cost {self.cost!r} is not one of {', '.join(COSTS)}")


D = TypeVar("D")


def encode_detail(detail) -> str:
    """An oracle's ``Detail`` record (a frozen dataclass of plain values) as ``Finding.data``."""
    return json.dumps(codec.encode(detail), sort_keys=True)


def decode_detail(cls: type[D], finding: Finding) -> D | None:
    """The ``Detail`` record a finding carries, or None when it carries none (a finding stored before records)."""
    return codec.decode(cls, json.loads(finding.data)) if finding.data else None


def family(oracle: str) -> str:
    """The oracle's name in a case's ``oracle`` field or a config entry: ``"alias:out-overlaps-input"`` -> ``"alias"``."""
    return oracle.split(":", 1)[0]


@dataclass(frozen=True)
class Registry:
    """Oracle names and the modules that define them, in the order their cases run."""

    modules: tuple[tuple[str, str], ...]

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.modules)

    def __contains__(self, name: str) -> bool:
        return family(name) in self.names()

    def get(self, name: str) -> Oracle:
        """The oracle by its name, a case's ``oracle`` field or a config entry (``"alias:..."``)."""
        wanted = family(name)
        for known, path in self.modules:
            if known == wanted:
                oracle = importlib.import_module(path).ORACLE
                if oracle.name != known:
                    raise ValueError(f"{path}.ORACLE is named {oracle.name!r}, registered as {known!r}")
                return oracle
        raise KeyError(f"unknown oracle {wanted!r}; known: {', '.join(self.names())}")

    def available(self) -> dict[str, str]:
        """Every oracle's one-line description, by name."""
        return {name: self.get(name).description for name in self.names()}

    def with_option(self, name: str, text: str | None) -> str:
        """The config entry for oracle ``name`` with the option a user gave (``"large:rows,index"``), checked by the oracle."""
        check = self.get(name).option
        if check is None:
            raise ValueError(f"oracle {name!r} takes no option")
        return f"{name}:{check(text)}"

    def of_cost(self, *costs: str) -> tuple[str, ...]:
        return tuple(name for name in self.names() if self.get(name).cost in costs)

    def sampled(self) -> tuple[str, ...]:
        """The oracles a whole-catalog run samples within its budget when not asked for by name."""
        return tuple(name for name in self.names() if self.get(name).sampled)

    def cases_for(self, oracles: tuple[str, ...], unit: Unit, variant: str, sample: int,
                  edits: tuple[str, ...] = ()) -> list[Case]:
        """The cases the selected oracles add for one sample and variant of ``unit`` (with ``edits`` made: only the
        oracles that judge the value search's edits, ``Oracle.on_values``)."""
        cases = []
        for entry in oracles:
            _, _, option = entry.partition(":")  # "capability:default,avx2": the oracle's own option
            oracle = self.get(entry)
            if edits and not oracle.on_values:
                continue
            for name in oracle.plan(unit, variant, sample, option):
                cases.append(Case(op=unit.op, variant=variant, dtype=unit.dtype, device=unit.device, sample=sample,
                                  edits=edits, oracle=name))
        return cases

    def picked(self, oracles: tuple[str, ...], unit: Unit, planned: list[Case], swept: Swept) -> list[Case]:
        """The sweep's cases of one sample (``planned``) that the selected oracles with a ``pick`` judge their own way."""
        cases = []
        for entry in oracles:
            oracle = self.get(entry)
            if oracle.pick is not None:
                cases += oracle.pick(unit, planned, entry.partition(":")[2], swept)
        return cases

    def moves(self, case: Case) -> list[Case]:
        """The cases one move simpler that the case's oracle knows (``Oracle.moves``); none for other cases."""
        oracle = self.get(case.oracle) if case.oracle and case.oracle in self else None
        return oracle.moves(case) if oracle is not None and oracle.moves else []

    def weight(self, case: Case) -> int:
        """How complex the oracle's own part of the case is (``Oracle.weight``); 0 for other cases."""
        oracle = self.get(case.oracle) if case.oracle and case.oracle in self else None
        return oracle.weight(case) if oracle is not None and oracle.weight else 0

    def slower(self, case_id: str) -> float:
        """How many of the sweep's timeouts a case may take: its oracle's ``slower``, 1 for every other case."""
        oracle = case_id.rpartition("|@")[2] if "|@" in case_id else ""
        return float(self.get(oracle).slower) if oracle and oracle in self else 1.0

    def run(self, subject: Subject) -> Outcome:
        return self.get(subject.case.oracle).run(subject)

    def script(self, finding: Finding, torch_version: str) -> str | None:
        """An oracle finding's own script; None for other findings (and oracles without a script)."""
        oracle = Case.parse(finding.case_id).oracle
        if not oracle or oracle not in self:  # none, or another command's (shard's mesh)
            return None
        make = self.get(oracle).script
        return make(finding, torch_version) if make else None

    def snippet(self, finding: Finding) -> str | None:
        """An oracle finding's plain-torch snippet for an upstream report; None for other findings and oracles without."""
        oracle = Case.parse(finding.case_id).oracle
        if not oracle or oracle not in self:
            return None
        make = self.get(oracle).snippet
        return make(finding) if make else None

    def handed(self, finding: Finding) -> tuple[tuple[str, str], ...]:
        """(path, layout) of what an oracle finding's call handed the op beyond its case's layouts; () for others."""
        oracle = Case.parse(finding.case_id).oracle
        if not oracle or oracle not in self:
            return ()
        make = self.get(oracle).handed
        return make(finding) if make else ()


# The oracles torchsleuth ships, in the order their cases run. Named by module
# path, as plug-ins are: nothing here imports them.
BUILTIN = Registry(modules=(
    ("sizes", "torchsleuth.oracles.sizes"),
    ("alias", "torchsleuth.oracles.alias"),
    ("repeat", "torchsleuth.oracles.repeat"),
    ("autodiff", "torchsleuth.oracles.autodiff"),
    ("vmap", "torchsleuth.oracles.vmap"),
    ("capability", "torchsleuth.oracles.capability"),
    ("compile", "torchsleuth.oracles.compile"),
    ("large", "torchsleuth.oracles.large"),
    ("exact", "torchsleuth.oracles.exact"),
))
