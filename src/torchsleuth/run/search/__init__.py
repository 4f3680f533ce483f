"""The search: calls OpInfo's samples never make, as edits of a sample (issue 13).

Design note. A sweep's planned cases take an OpInfo sample as it is and vary
where its tensors sit (layouts), how the op is called (variants) and the
dtype. Real silent bugs also sit at values, argument values and sizes the
samples never hold. Each search here is a planner that, for one sample and
variant, returns edits of that sample (``run.edits``): new values for one
tensor, a new value for one non-tensor argument, a dim grown past a block
size. A searched case is an ordinary ``Case`` whose ``edits`` say what was
changed, so it is judged by the same references and contracts, shrunk,
diagnosed and replayed from its id like every other case, and its repro
script holds the edited call.

Searches are named in ``SweepConfig.search``; ``plan`` gathers their edits
for one sample and variant and, when the sweep has a budget, keeps an
evenly spread, seeded subset (the summary counts what was left out).

A planner is ``plan(op, variant, dtype, sample) -> list[tuple[str, ...]]``:
deterministic (the same sample plans the same edits in every process), and
cheap (it runs nothing; a planned edit that breaks the op makes the case
raise, which is loud, not a finding).
"""

from __future__ import annotations

from typing import Callable

from . import arguments, draws, internal, long_dims, overloads, values  # noqa: F401  (verbs.py imports them too)

Planner = Callable[[str, str, str, object], list[tuple[str, ...]]]

# Name -> planner, in the order their cases run.
SEARCHES: dict[str, Planner] = {
    "values": values.plan,
    "arguments": arguments.plan,
    "long": long_dims.plan,
    "overloads": overloads.plan,
    "internal": internal.plan,
    "draws": draws.plan,
}

# What each search looks for, for --help and the summary.
DESCRIPTIONS = {
    "values": values.DESCRIPTION,
    "arguments": arguments.DESCRIPTION,
    "long": long_dims.DESCRIPTION,
    "overloads": overloads.DESCRIPTION,
    "internal": internal.DESCRIPTION,
    "draws": draws.DESCRIPTION,
}


def plan(searches: tuple[str, ...], op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """Every edit the named searches plan for one sample and variant, in order, without repeats."""
    planned: list[tuple[str, ...]] = []
    for name in searches:
        try:
            found = SEARCHES[name](op, variant, dtype, sample)
        except Exception:  # a sample a search cannot read (sparse tensors have no bytes to key on): nothing to plan
            continue
        for edits in found:
            if edits and edits not in planned:
                planned.append(edits)
    return planned


def laid_out(op: str, edits: tuple[str, ...], sample, layouts: tuple[str, ...]) -> list:
    """The layout assignments a searched case is tried under: all contiguous (``[()]``), or, for a direct call of an
    internal kernel (``internal``) and a random op's decisive parameters (``draws``), each of the sweep's ``layouts``
    on its tensors."""
    found = draws.assignments(edits, sample, layouts)
    return found if found is not None else internal.assignments(op, edits, sample, layouts)


def within(planned: list, budget: int) -> list:
    """At most ``budget`` of ``planned``, spread evenly over the list (all when the budget is 0 or enough)."""
    if budget <= 0 or len(planned) <= budget:
        return list(planned)
    step = len(planned) / budget
    return [planned[int(i * step)] for i in range(budget)]
