"""Minimising a finding's case, as Hypothesis does, and replaying it before it is reported.

Design note. One definition of "simpler" drives every move: ``cost(case)``,
compared as a tuple, smallest first,

1. the elements of the sample's tensors (smaller shapes),
2. the layout properties of the arguments not contiguous: one per
   argument, a combined layout (``transposed_offset``) its number of parts,
   since two properties at once are less simple than either alone,
3. the dtype's place in ``DTYPE_ORDER`` (float32 first: what a bug report
   would use),
4. how plain the values are (zeros < ones < the small integers -2..2 <
   the sample's own values, summed over the tensors).

A candidate is a case one move away: another, smaller sample of the op; one
dimension size narrowed (to 1, 2, or half) in every tensor at once; one
argument made contiguous, or its combined layout replaced by one of its parts
(so a bug that ``transposed`` alone triggers, found under
``transposed_offset``, is reported, and grouped, as the ``transposed`` bug it
is; only a bug that needs the pair keeps it); a simpler dtype; one tensor's
values made plain.
Moves are tried cheapest-to-check first and a candidate is taken only if it
costs less and still fails, meaning its outcome holds a finding of the same
kind against the same reference in the same aten op. After each success the moves start again
from the new case; the search stops when a whole round makes no progress, or
when the budget of runs or seconds is spent (the best case so far is kept).
The seconds bound the whole shrink, replays included: a candidate is tried
only while it and the last replay, each as long as the longest replay so far,
would end within them (a compiled case or a span probe replays in seconds, so
the search for it does not start a replay at its last moment).

The original case is replayed first, in this process, with references of its
own: a finding that does not recur, on a replay that was judged clean, is
``flaky`` and never reported as a bug (a replay that raised says nothing, and
the finding is ``kept``). The shrunk case is replayed once more at the end;
if it does not fail again the original case is what is reported. Off the
CPU, a candidate whose values trip a device-side assert leaves the process's
device unusable; shrinking then stops and the finding is kept as found. Crashes, hangs and nondeterminism are
``kept`` as found: their replay belongs in a fresh process (the pool did it)
or needs many runs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

import torch

from ..cases import layouts as layout_rules
from ..cases import opinfo
from ..cases.records import Case
from ..judge.records import Finding, Outcome
from ..search import edits
from .records import Shrunk

# Simplest first; dtypes not listed come last.
DTYPE_ORDER = ("float32", "float64", "int64", "int32", "bool", "float16", "bfloat16", "complex64", "complex128")
_VALUE_COST = {"zeros": 0, "ones": 1, "small": 2}
_ORIGINAL_VALUES = 3

# Kinds whose replay in this process says nothing.
UNREPLAYED = {
    "crash": "a crash is replayed alone in a fresh worker by the sweep, not in this process",
    "hang": "a hang is replayed alone in a fresh worker by the sweep, not in this process",
    "nondeterministic": "nondeterminism shows on some runs only; one replay cannot confirm or shrink it",
}

MAX_TRIES = 60
MAX_SECONDS = 10.0
# Other samples tried per round, smallest first.
SAMPLES_TRIED = 6

Runner = Callable[[Case], Outcome]


def matching(outcome: Outcome, finding: Finding) -> Finding | None:
    """The finding in ``outcome`` that is the same failure as ``finding``, if any.

    The same kind against the same reference, in the same aten op: a
    composite op (``grid_sample``) may reach another kernel on a smaller
    sample, and a failure there is another bug.
    """
    for found in outcome.findings:
        if found.kind == finding.kind and found.reference == finding.reference and found.op == finding.op:
            return found
    return None


def cost(case: Case) -> tuple[int, int, int, int]:
    """How complicated a case is (see the design note); smaller is simpler."""
    sample = _sample(case)
    properties = sum(len(layout_rules.parts_of(layout)) for _, layout in case.layouts)
    return (edits.elements(sample), properties, _dtype_rank(case.dtype), _value_cost(case, sample))


class DeviceLost(Exception):
    """A replay left the device unusable (a CUDA device-side assert poisons the process)."""


def shrink(finding: Finding, run: Runner, *, healthy: Callable[[], bool] = lambda: True,
           max_tries: int = MAX_TRIES, max_seconds: float = MAX_SECONDS,
           moves: Callable[[Case], Iterator[Case]] | None = None, simpler: Callable[[Case], tuple] | None = None) -> Shrunk:
    """``finding``'s smallest failing case, replayed (see the design note).

    ``moves`` and ``simpler`` are the cases one move away and the cost to
    compare (default: an ops case's, ``candidates`` and ``cost``); other case
    sources (torchsleuth shard) bring their own.

    ``healthy`` says whether the device still works after a run; when it does
    not, nothing more can be run in this process: the search stops, the
    finding is kept as found, and ``DeviceLost`` is raised by the caller's
    next check (``lost`` on the result's reason).
    """
    moves, simpler = moves or candidates, simpler or cost
    original = Case.parse(finding.case_id)
    if finding.kind in UNREPLAYED:
        return Shrunk(finding=finding.id, status="kept", case_id=original.id, reason=UNREPLAYED[finding.kind])
    tries, longest = 0, 0.0
    deadline = time.monotonic() + max_seconds

    def replay(case: Case) -> Outcome:
        nonlocal tries, longest
        tries += 1
        began = time.monotonic()
        outcome = run(case)
        longest = max(longest, time.monotonic() - began)
        if not healthy():
            raise DeviceLost(outcome.reason)
        return outcome

    def kept(reason: str) -> Shrunk:
        return Shrunk(finding=finding.id, status="kept", case_id=original.id, tries=tries, reason=reason)

    try:
        first = replay(original)
        if matching(first, finding) is None:
            if first.status != "pass":  # raised or failed to run: says nothing about the finding
                return kept(f"its replay did not run cleanly ({first.status}: {first.reason})")
            return Shrunk(finding=finding.id, status="flaky", case_id=original.id, tries=tries,
                          reason="the finding did not recur when its case was replayed in a fresh process")
        best, best_cost = original, simpler(original)

        def in_time() -> bool:  # a candidate's replay and the last one, each as long as the longest so far, end in time
            return time.monotonic() + 2 * longest < deadline

        progress = True
        while progress and tries < max_tries and in_time():
            progress = False
            for candidate in moves(best):
                if tries >= max_tries or not in_time():
                    break
                candidate_cost = _cost_or_none(candidate, simpler)
                if candidate_cost is None or candidate_cost >= best_cost:
                    continue
                if matching(replay(candidate), finding) is not None:
                    best, best_cost, progress = candidate, candidate_cost, True
                    break
        last = replay(best)
        if matching(last, finding) is None and best != original:
            best, last = original, replay(original)
    except DeviceLost as e:
        return kept(f"{LOST}: {e}")
    replayed = matching(last, finding)
    if replayed is None:
        if last.status != "pass":
            return kept(f"its last replay did not run cleanly ({last.status}: {last.reason})")
        return Shrunk(finding=finding.id, status="flaky", case_id=original.id, tries=tries,
                      reason="the finding recurred once but not on its second replay")
    return Shrunk(finding=finding.id, status="shrunk", case_id=best.id, replay=replayed, tries=tries)


# The start of a kept finding's reason when a replay took the device down.
LOST = "a replay left the device unusable, so it was not shrunk"


def candidates(case: Case) -> Iterator[Case]:
    """Cases one move away from ``case``, in the order they are tried (see the design note)."""
    sample = _sample(case)
    yield from _smaller_samples(case, sample)
    for size in edits.sizes(sample):
        for new in dict.fromkeys((1, 2, size // 2)):
            if 0 < new < size:
                yield dataclasses.replace(case, edits=case.edits + (edits.size(size, new),))
    for i in range(len(case.layouts)):
        yield dataclasses.replace(case, layouts=case.layouts[:i] + case.layouts[i + 1:])
    for i, (path, layout) in enumerate(case.layouts):
        for part in layout_rules.parts_of(layout):
            if part != layout:
                yield dataclasses.replace(case, layouts=case.layouts[:i] + ((path, part),) + case.layouts[i + 1:])
    entry = opinfo.get(case.op)
    supported = {str(d).removeprefix("torch.") for d in opinfo.dtypes(entry, torch.device(case.device).type, backward=case.variant == "backward")}
    for dtype in DTYPE_ORDER[: _dtype_rank(case.dtype)]:
        if dtype in supported:
            yield dataclasses.replace(case, dtype=dtype)
    plain = _plain_paths(case)
    for path in edits.paths(sample):
        for kind in edits.VALUES:
            if _VALUE_COST[kind] < plain.get(path, _ORIGINAL_VALUES):
                yield dataclasses.replace(case, edits=case.edits + (edits.values(path, kind),))


def _smaller_samples(case: Case, sample) -> Iterator[Case]:
    """Other samples of the op with fewer elements, with the case's edits carried over and without."""
    from ..run.samples import samples_of

    samples = samples_of(case.op, case.dtype)
    size = edits.elements(sample)
    smaller = []
    for index, other in enumerate(samples):
        if index == case.sample or _layouts_that_fit(case, other) is None:
            continue
        for kept in dict.fromkeys((case.edits, ())):
            try:
                elements = edits.elements(edits.apply(other, kept, op=case.op))
            except Exception:
                continue
            if elements < size:
                smaller.append((elements, len(kept), index, kept))
    for _, _, index, kept in sorted(smaller)[:SAMPLES_TRIED]:
        yield dataclasses.replace(case, sample=index, edits=kept)


def _layouts_that_fit(case: Case, sample) -> tuple | None:
    """``case``'s layouts on another sample, if every input they name is there and takes them."""
    tensors = edits.tensors(sample)
    written = case.variant == "inplace"
    for path, layout in case.layouts:
        if path.startswith(("out", "grad_output")):
            continue
        t = tensors.get(path)
        if t is None or not layout_rules.applies(layout, t, written=written and path.startswith("input")):
            return None
    return case.layouts


def _sample(case: Case):
    return edits.sample_of(case)


def _cost_or_none(case: Case, simpler: Callable[[Case], tuple] = cost):
    try:
        return simpler(case)
    except Exception:  # an edit the sample cannot take (a size no tensor has any more)
        return None


def _dtype_rank(dtype: str) -> int:
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def _plain_paths(case: Case) -> dict[str, int]:
    """The value cost of each tensor the case's edits made plain (the last edit of a path wins)."""
    found = {}
    for edit in case.edits:
        if edit.startswith("values:"):
            path, kind = edit.removeprefix("values:").rsplit("=", 1)
            found[path] = _VALUE_COST[kind]
    return found


def _value_cost(case: Case, sample) -> int:
    plain = _plain_paths(case)
    return sum(plain.get(path, _ORIGINAL_VALUES) for path in edits.paths(sample))
