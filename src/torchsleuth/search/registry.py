"""What a search is, and where the searches are found: each module of this package that defines ``SEARCH``.

Design note. A search is one ``Search`` record, defined at the bottom of its
own module, the way an oracle is one ``Oracle`` record (judge.plugin):

* ``name``, ``description`` (one line for ``--help`` and the docs) and
  ``order``: where its cases run among the searches' (lower first), which
  also keeps the plans, and so the case ids, of a run the same whatever order
  the modules are found in;
* ``plan(op, variant, dtype, sample) -> list[tuple[str, ...]]``: the edits it
  plans for one sample and variant (search.edits says what an edit is);
  deterministic and cheap;
* ``verb``, ``form`` and ``apply``: the edit verb it adds to search.edits,
  the edit's form as an error shows it (``special:PATH=SET[@K]``), and
  ``apply(sample, rest, *, op) -> sample``, the pure transform of an OpInfo
  sample that ``VERB:REST`` means; ``op`` is the case's op (a verb that
  re-traces the op's own call reads it). A search that plans only the edits
  search.edits already knows (``long``: ``dim:``) has none;
* ``edits``: what it changes, in a few words (``--help`` and the docs);
* ``layouts(op, edits, sample, layouts) -> list | None``: the layout
  assignments (cases.plan) a searched case with ``edits`` is tried under,
  or None where the edits are not this search's; a search without the hook
  tries its cases on contiguous tensors;
* ``on_values``: its cases are judged by the oracles that judge values too
  (``Oracle.on_values``);
* ``pointed_ops(ops) -> ops``: the ops a run pointed at ``ops`` sweeps with
  them (``overloads``: the overloads no sample of theirs reaches,
  cases.unreached); a catalog run adds none;
* ``on_device(kind) -> bool``: whether it plans on a device of that kind
  (``bounds``: only where a bad index asserts); every device when absent.

A new search is one module here and its test; nothing else names it. The
registry imports this package's modules when first asked (a module that
defines no ``SEARCH`` is a helper of one that does), so a search module
imports this one and never search.edits, which asks the registry.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError

Planner = Callable[[str, str, str, object], list[tuple[str, ...]]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Search:
    name: str
    description: str
    edits: str  # what it changes, in a few words
    order: int
    plan: Planner
    verb: str = ""
    form: str = ""
    apply: Callable[..., object] | None = None  # apply(sample, rest, *, op) -> sample
    layouts: Callable[[str, tuple[str, ...], object, tuple[str, ...]], list | None] | None = None
    on_values: bool = False
    pointed_ops: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None
    on_device: Callable[[str], bool] | None = None  # whether it plans for a device kind ("cuda"); None: on every one

    def __post_init__(self):
        if bool(self.verb) != (self.apply is not None) or bool(self.verb) != bool(self.form):
            raise ValueError(f"search {self.name!r}: a verb comes with its form and its apply, or none of them")

    def owns(self, edit: str) -> bool:
        """Whether ``edit`` is one of this search's verb (``special:input=nonfinite`` for ``values``)."""
        return bool(self.verb) and edit.partition(":")[0] == self.verb


@functools.cache
def searches() -> tuple[Search, ...]:
    """Every search of this package, in order."""
    found = []
    for module in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        search = getattr(importlib.import_module(f"{__package__}.{module.name}"), "SEARCH", None)
        if isinstance(search, Search):
            found.append(search)
    found.sort(key=lambda s: (s.order, s.name))
    names, verbs = [s.name for s in found], [s.verb for s in found if s.verb]
    for kind, seen in (("name", names), ("verb", verbs)):
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            raise ValueError(f"two searches share the {kind} {', '.join(twice)}")
    return tuple(found)


def names() -> tuple[str, ...]:
    return tuple(s.name for s in searches())


def get(name: str) -> Search:
    for search in searches():
        if search.name == name:
            return search
    raise UsageError(f"unknown search {name!r}; known: {', '.join(names())}")


def by_verb(verb: str) -> Search | None:
    """The search whose edit verb is ``verb``; None for a verb no search adds."""
    for search in searches():
        if search.verb and search.verb == verb:
            return search
    return None


def descriptions() -> dict[str, str]:
    """Every search's one-line description, by name, in order: what ``--help`` lists."""
    return {s.name: s.description for s in searches()}
