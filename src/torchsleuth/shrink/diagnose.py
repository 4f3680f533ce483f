"""Naming a group's trigger in one sentence, by testing the neighbours of its shrunk case.

Design note. A shrunk case keeps only the non-contiguous arguments the
failure needs. Its neighbours say what the trigger is:

* each of those arguments made contiguous (it must pass, or the argument is
  not a trigger after all), then given every other layout that fits it:
  which layouts fail and which pass names the property (non-contiguous,
  storage offset, stride 0, ...);
* with the triggers contiguous, every other argument given every layout
  that fits it: if all pass, that argument's layout does not matter ("any
  layout of tensor1 is fine");
* the other dtypes of the sweep, and, off the CPU, the CPU.

The sentence reads like the one a person would file: "in-place addcmul_
drops its writes when self is transposed or strided, at a storage offset or
not; contiguous self, or self at a storage offset, is fine; any layout of
args[0], args[1] is fine; in float32 and float64." Each layout is said once:
a combined layout whose first part fails alone is a modifier of that part
("at a storage offset or not"), not a clause of its own.

With a time limit (``until``: the run's end, run.deadline.finish, or the
diagnosis's own seconds, shrink.stage) a neighbour is tried only while the
longest one so far would end by then; those left are
neither failing nor fine, and the sentence says how many were not tried.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from ..cases import layouts as layout_rules
from ..cases import opinfo
from ..cases.records import VARIANT_WORDS, Case
from ..judge.records import KIND_WORDS, Finding, Outcome
from ..run import deadline
from .records import Diagnosis, Trigger
from .shrinker import DeviceLost, matching

Runner = Callable[[Case], Outcome]


def diagnose(group: str, finding: Finding, shrunk: Finding, run: Runner, *, dtypes: tuple[str, ...],
             healthy: Callable[[], bool] = lambda: True, until: float = 0.0) -> Diagnosis:
    """``shrunk`` is the replayed finding of ``finding``'s shrunk case.

    A neighbour counts as failing when it shows the same failure, as fine only
    when it was judged clean; one that raises (an unsupported dtype, values a
    layout makes invalid) is neither and is left out of the sentence. Raises
    ``shrinker.DeviceLost`` when a neighbour leaves the device unusable.
    ``until``: the wall-clock second no neighbour may end after (0: none).
    """
    case = Case.parse(shrunk.case_id)
    tries, untried, longest = 0, 0, 0.0

    def verdict(c: Case) -> bool | None:
        """True: fails the same way; False: judged clean; None: neither (or not tried, out of time)."""
        nonlocal tries, untried, longest
        if not deadline.fits(until, longest):
            untried += 1
            return None
        tries += 1
        began = time.time()
        outcome = run(c)
        longest = max(longest, time.time() - began)
        if not healthy():
            raise DeviceLost(outcome.reason)
        if matching(outcome, finding) is not None:
            return True
        return False if outcome.status == "pass" else None

    def sort(c: Case, item, failing: list, passing: list) -> None:
        result = verdict(c)
        if result is not None:
            (failing if result else passing).append(item)

    shapes = {t.path: t.shape for t in shrunk.call.tensors} if shrunk.call else {}
    triggers = []
    for path, layout in case.layouts:
        others = tuple(pl for pl in case.layouts if pl[0] != path)
        failing, passing = [layout], []
        for other in _fitting(path, shapes, case):
            if other == layout:
                continue
            candidate = dataclasses.replace(case, layouts=tuple(sorted(others + (((path, other),) if other != "contiguous" else ()))))
            sort(candidate, other, failing, passing)
        triggers.append(Trigger(path=path, failing=tuple(failing), passing=tuple(passing)))
    indifferent, also_failing = [], []
    plain = dataclasses.replace(case, layouts=())
    for path in shapes:
        if any(path == t.path for t in triggers):
            continue
        fitting = [name for name in _fitting(path, shapes, case) if name != "contiguous"]
        if len(fitting) < 2:  # a scalar's storage offset alone says little about "any layout"
            continue
        verdicts = [verdict(dataclasses.replace(plain, layouts=((path, name),))) for name in fitting]
        if any(verdicts):
            also_failing.append(path)
        elif all(v is False for v in verdicts):
            indifferent.append(path)
    failing_dtypes, passing_dtypes = [case.dtype], []
    supported = {str(d).removeprefix("torch.") for d in opinfo.dtypes(opinfo.get(case.op), torch.device(case.device).type, backward=case.variant == "backward")}
    for dtype in dtypes:
        if dtype != case.dtype and dtype in supported:
            sort(dataclasses.replace(case, dtype=dtype), dtype, failing_dtypes, passing_dtypes)
    cpu = ""
    if torch.device(case.device).type != "cpu":
        on_cpu = verdict(dataclasses.replace(case, device="cpu"))
        cpu = "" if on_cpu is None else "fails" if on_cpu else "passes"
    found = Diagnosis(
        group=group, finding=finding.id, case_id=case.id, sentence="", triggers=tuple(triggers),
        indifferent=tuple(indifferent), also_failing=tuple(also_failing),
        dtypes_failing=tuple(failing_dtypes), dtypes_passing=tuple(passing_dtypes), cpu=cpu, tries=tries, untried=untried,
    )
    return dataclasses.replace(found, sentence=sentence(found, shrunk))


def _fitting(path: str, shapes: dict, case: Case) -> list[str]:
    """The layouts that fit the argument at ``path`` (by its shape), contiguous first."""
    shape = shapes.get(path)
    if shape is None:
        return []
    probe = torch.empty(shape, device="meta")
    written = (case.variant == "inplace" and path.startswith("input")) or path.startswith("out")
    found = [layout_rules.CONTIGUOUS]
    for layout in layout_rules.ALL:
        # a joint-only layout (empty) changes every argument's shape at once, never one argument's
        if layout.name == layout_rules.CONTIGUOUS or layout.joint_only or (written and layout.read_only):
            continue
        if layout_rules.applies(layout.name, probe, written=written):
            found.append(layout.name)
    return found


def argument(path: str, variant: str) -> str:
    """How a person names the argument: ``self`` for what an in-place op or a method is called on."""
    if path == "input" and variant in ("inplace", "method"):
        return "self"
    return path


def sentence(d: Diagnosis, shrunk: Finding) -> str:
    name = shrunk.name
    what = KIND_WORDS.get(shrunk.kind, f"shows {shrunk.kind}")
    head = f"{name}{VARIANT_WORDS.get(shrunk.variant, f' ({shrunk.variant})')} {what}"
    if shrunk.reference == "precision":
        head += " (further from float64 than its dtype allows)"
    oracle = Case.parse(shrunk.case_id).oracle
    if oracle.startswith("alias:"):  # alias:out-overlaps-input:out=args[0]: the form of aliasing, in words
        head += f" ({oracle.split(':')[1].replace('-', ' ')})"
    parts = []
    if d.triggers:
        conditions = [f"{argument(t.path, shrunk.variant)} is {_either(t.failing)}" for t in d.triggers]
        parts.append(f"{head} when {' and '.join(conditions)}")
        fine = [f"{argument(t.path, shrunk.variant)} {_either(t.passing)}" for t in d.triggers if t.passing]
        if fine:
            parts.append(f"{', or '.join(_with_first_layout(f) for f in fine)} {'is' if len(fine) == 1 else 'are'} fine")
    else:
        parts.append(f"{head}, every argument contiguous" if " when " in head else f"{head} with every argument contiguous")
    if d.indifferent:
        names = ", ".join(argument(p, shrunk.variant) for p in d.indifferent)
        parts.append(f"any layout of {names} is fine")
    if d.also_failing:
        names = ", ".join(argument(p, shrunk.variant) for p in d.also_failing)
        parts.append(f"a non-contiguous {names} fails alone too (another group)")
    dtype_part = f"in {_and(d.dtypes_failing)}"
    if d.dtypes_passing:
        dtype_part += f"; {_and(d.dtypes_passing)} {'is' if len(d.dtypes_passing) == 1 else 'are'} fine"
    parts.append(dtype_part)
    if d.cpu:
        parts.append("the CPU is fine" if d.cpu == "passes" else "the CPU fails too")
    if d.untried:
        parts.append(f"{d.untried} of its {d.tries + d.untried} neighbours untried (out of time)")
    return "; ".join(parts) + "."


def _with_first_layout(text: str) -> str:
    # "self contiguous or at a storage offset" reads better as "contiguous self, or self at ..."
    arg, _, rest = text.partition(" ")
    if rest.startswith("contiguous"):
        tail = rest.removeprefix("contiguous").removeprefix(" or ").removeprefix(", or ").removeprefix(", ")
        return f"contiguous {arg}" + (f", or {arg} {tail}," if tail else "")
    return text


def _either(layouts: tuple[str, ...]) -> str:
    """The layouts as one clause, each said once: a combined layout whose first part fails alone is said as a
    modifier of that part ("transposed or strided, at a storage offset or not"), never as a layout of its own."""
    names = list(dict.fromkeys(layouts))
    modifiers: dict[str, list[str]] = {}  # a failing part -> what the combined layouts add to it
    for name in names:
        record = layout_rules.find(name)
        if record is not None and len(record.parts) == 2 and record.parts[0] in names:
            modifiers.setdefault(record.parts[0], []).append(_phrase(record.parts[1]))
    # in the order given (the shrunk case's layout first); the layouts sharing modifiers said together where the
    # first of them stands
    items: list[tuple[tuple[str, ...], list[str]]] = []
    for name in names:
        if _folded(name, modifiers):
            continue
        mods = tuple(modifiers.get(name, ()))
        same = next((phrases for m, phrases in items if mods and m == mods), None)
        if same is None:
            items.append((mods, [_phrase(name)]))
        else:
            same.append(_phrase(name))
    if not modifiers:
        return _or([phrases[0] for _, phrases in items])
    return ", or ".join(_or(phrases) + "".join(f", {m} or not" for m in mods) for mods, phrases in items)


def _folded(name: str, modifiers: dict[str, list[str]]) -> bool:
    """Whether ``name`` is a combined layout said as a modifier of its failing first part."""
    record = layout_rules.find(name)
    return record is not None and len(record.parts) == 2 and record.parts[0] in modifiers


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _phrase(layout: str) -> str:
    """What ``layout`` says about an argument, after "when self is"; a name of no layout is said as it is."""
    record = layout_rules.find(layout)
    return record.phrase if record is not None else layout


def _and(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
