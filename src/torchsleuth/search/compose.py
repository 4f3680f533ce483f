"""Composition: every search edit crossed with the layouts and the variants, under a covering design.

Design note. A search edit alone is tried on contiguous tensors, and the
layouts alone on OpInfo's own values, so a bug that needs both at once (a
``.Scalar`` overload's kernel misreading a strided ``self``, an argument value
whose kernel path mishandles a transposed input, a special value in the tail
of a channels_last tensor) is never called. Here each edit a search plans for
a sample is crossed with the layouts and the variants it was planned for,
under a covering design of strength two over the three factors (edit,
layout, variant): every edit is tried under every layout that fits its
edited tensors, with some variant it was planned for; every edit in every
such variant, contiguous; and every (layout, variant) pair, which the
sample's own planned cases cover (cases.plan) except for the layouts only an
edit makes fit (``channels_last`` once the ranks search grew the sample to
4-D): those the first edit that makes them fit takes in every variant. The
variants take the other layouts in turn, so the design is the fewest cases
that cover every pair: for one edit, its variants plus its layouts, less
one, where the full product is their product. No library is needed for
three factors of which one (the edit) is fixed per row; the construction
below is the covering array.

A layout level is one layout given to every tensor of the edited sample it
fits at once (cases.plan.jointly): the laid out tensors are those the variant
lays out (the inputs of a functional, method or in-place call, self being the
one written in place; a backward call's differentiable inputs). Only layouts
that move elements compose (``value_changing`` ones, ``expanded`` and
``empty``, would overwrite the edit's values or leave none); an ``out=``
case keeps its outputs contiguous, since their shape is the edited call's
result, unknown until it runs. A search that lays out its own cases
(``Search.layouts``: a direct call of an internal kernel, a random op's
decisive parameters) keeps its own assignments.

A pointed run runs the whole design; a whole-catalog run spreads its budget
over it (search.within), so its sample has layouts too.
"""

from __future__ import annotations

from ..cases import layouts as layout_table
from ..cases.plan import Assignment, jointly
from ..run import tree
from . import edits as sample_edits

# What a variant lays out of a searched case's edited sample (an out= case: its outputs, which stay contiguous).
LAID_OUT = ("functional", "method", "inplace", "backward")


def composable(layouts: tuple[str, ...]) -> tuple[str, ...]:
    """The layouts of ``layouts`` that move elements only, so an edit's values survive them."""
    return tuple(name for name in layouts if not layout_table.by_name(name).value_changing)


def levels(op: str, variant: str, edits: tuple[str, ...], sample, layouts: tuple[str, ...]) -> list[Assignment]:
    """The layout levels a searched case of ``variant`` with ``edits`` can take: all contiguous, then each composable
    layout on every tensor of the edited sample it fits (an in-place call's self only where it may be written)."""
    if variant not in LAID_OUT:
        return [()]
    edited = sample_edits.apply(sample, edits, op=op)
    tensors = tree.sample_tensors(edited)
    if variant == "backward":
        tensors = {p: t for p, t in tensors.items() if t.dtype.is_floating_point or t.dtype.is_complex}
    written = frozenset(p for p in tensors if p == "input" or p.startswith("input[")) if variant == "inplace" else frozenset()
    return jointly(tensors, composable(layouts), written=written)


def baseline(op: str, variants: list[str], sample, layouts: tuple[str, ...]) -> set[tuple[str, str]]:
    """The (variant, layout) pairs the sample's own planned cases already cover (cases.plan): a layout that fits some
    tensor of the unedited sample, in a variant that lays it out."""
    return {(variant, name) for variant in variants for level in levels(op, variant, (), sample, layouts) for _, name in level[:1]}


def cover(variants: list[str], levels_of, covered: set[tuple[str, str]]) -> list[tuple[str, Assignment]]:
    """(variant, layout level) pairs for one edit planned for ``variants``: each variant contiguous; then each other
    level in every variant that holds it where that (variant, layout) pair is covered nowhere yet (a layout that only
    the edit makes fit, ``channels_last`` on a sample grown to 4-D), else once, the variants taking it in turn.
    ``levels_of(variant)`` lists a variant's levels; ``covered`` (the sample's (variant, layout) pairs so far,
    ``baseline`` to start) grows with what is chosen."""
    chosen = [(variant, ()) for variant in variants]
    by_variant = {variant: levels_of(variant) for variant in variants}
    seen: list[Assignment] = []
    for variant in variants:
        for level in by_variant[variant]:
            if level and level not in seen:
                seen.append(level)
    for turn, level in enumerate(seen):
        name = level[0][1]
        holders = [v for v in variants if level in by_variant[v]]
        new = [v for v in holders if (v, name) not in covered]
        for variant in new or [holders[turn % len(holders)]]:
            chosen.append((variant, level))
            covered.add((variant, name))
    return chosen
