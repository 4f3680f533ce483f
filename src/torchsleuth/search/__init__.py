"""The searches: calls OpInfo's samples never make, as edits of a sample.

Design note. A sweep's planned cases take an OpInfo sample as it is and vary
where its tensors sit (layouts), how the op is called (variants) and the
dtype. Real silent bugs also sit at values, argument values and sizes the
samples never hold. Each search here is a planner that, for one sample and
variant, returns edits of that sample (``search.edits``): new values for one
tensor, a new value for one non-tensor argument, a dim grown past a block
size. A searched case is an ordinary ``Case`` whose ``edits`` say what was
changed, so it is judged by the same references and contracts, shrunk,
diagnosed and replayed from its id like every other case, and its repro
script holds the edited call.

Searches are named in ``SweepConfig.search``; ``plan`` gathers their edits
for one sample and variant and, when the sweep has a budget, keeps an
evenly spread, seeded subset (the summary counts what was left out).

Each search is a ``Search`` record at the bottom of its own module
(search.registry says what it holds, and how a new one is found); this
module reads the registry. A planner is ``plan(op, variant, dtype, sample)
-> list[tuple[str, ...]]``: deterministic (the same sample plans the same
edits in every process), and cheap (it runs nothing; a planned edit that
breaks the op makes the case raise, which is loud, not a finding).
"""

from __future__ import annotations

from ..cases.plan import Assignment
from . import compose
from .registry import Search, descriptions, get, names, searches

__all__ = ["Search", "composed", "descriptions", "judged_by_oracles", "names", "plan", "searches", "within"]


def plan(chosen: tuple[str, ...], op: str, variant: str, dtype: str, sample, device: str = "cpu") -> list[tuple[str, ...]]:
    """Every edit the searches named in ``chosen`` plan for one sample and variant on ``device``, in order, without
    repeats."""
    planned: list[tuple[str, ...]] = []
    kind = device.split(":")[0]
    for name in chosen:
        search = get(name)
        if search.on_device is not None and not search.on_device(kind):
            continue
        try:
            found = search.plan(op, variant, dtype, sample)
        except Exception:  # a sample a search cannot read (sparse tensors have no bytes to key on): nothing to plan
            continue
        for edits in found:
            if edits and edits not in planned:
                planned.append(edits)
    return planned


def composed(op: str, edits: tuple[str, ...], variants: list[str], sample, layouts: tuple[str, ...],
             covered: set[tuple[str, str]] | None = None) -> list[tuple[str, Assignment]]:
    """The (variant, layout assignment) pairs a searched case with ``edits``, planned for ``variants``, is tried
    under: those of the search whose edits it holds where it lays out its own (``Search.layouts``: each of the
    sweep's ``layouts`` on a direct call's tensors, on a random op's decisive parameters), in every variant; else the
    covering design of search.compose, every composable layout crossed with the edit. ``covered``: the sample's
    (variant, layout) pairs covered so far (compose.baseline to start; grows), shared by its edits."""
    if covered is None:
        covered = compose.baseline(op, variants, sample, layouts)
    for search in searches():
        if search.layouts is not None:
            found = search.layouts(op, edits, sample, layouts)
            if found is not None:
                return [(variant, laid) for variant in variants for laid in found]
    try:
        return compose.cover(variants, lambda variant: compose.levels(op, variant, edits, sample, layouts), covered)
    except Exception:  # an edit the sample cannot take: its cases, contiguous, raise when they run (loud, not a finding)
        return [(variant, ()) for variant in variants]


def judged_by_oracles(edits: tuple[str, ...]) -> bool:
    """Whether the oracles that judge values (``Oracle.on_values``) judge a searched case too: it holds an edit of a
    search whose cases they judge (``Search.on_values``: the special values)."""
    return any(s.on_values and any(s.owns(e) for e in edits) for s in searches())


def within(planned: list, budget: int) -> list:
    """At most ``budget`` of ``planned``, spread evenly over the list (all when the budget is 0 or enough)."""
    if budget <= 0 or len(planned) <= budget:
        return list(planned)
    step = len(planned) / budget
    return [planned[int(i * step)] for i in range(budget)]
