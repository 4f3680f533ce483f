"""Kernel coverage of a stored run: per op, the aten overloads found, those its cases reached, and why not the rest.

Design note. ``cases.reach.found`` says which overloads an op's packets have
kernels for; each stored outcome says which its case reached
(``Outcome.reached``, in the store's ``reached`` table, from cases that
were judged: a kernel that refused the call is not covered); an overload
counts as reached when any case of the run reached it, the op's own or
another's (a pointed run sweeps the overloads its op's samples never reach
from their schema, ``cases.unreached``). What is left is
named with the reason a reader can act on: no case of that variant ran, no
case passed a Python number (``--search overloads``), the kernel is a
composite one no trace can see, or no sample reaches it. Variants swept that
OpInfo does not declare (``cases.opinfo.undeclared``) are counted apart.

Reached is counted per layout family too (cases.layouts.families: the
contiguous call, strides, a storage offset, stride 0, empty tensors): an
overload that only contiguous cases reached (a ``.Scalar`` overload before
the searches composed with the layouts) had no contract of a non-contiguous
call judged at it, which counting it once as reached hid.
Only runs of ``ops`` have OpInfo ops to cover.

What judged float64 is counted too (``OpCoverage.float64``): a narrow
dtype's result is judged against the same call in float64, but float64's
own result has a reference above it only where the ``exact`` oracle ran and
knows the op's function (run.exact_functions, evaluated by mpmath);
elsewhere float64 was judged only for consistency (layouts, variants,
devices, gradients against each other), and the report says so rather than
letting "no finding" read as "right".

The internal aten kernels an op dispatches to (``aten._softmax`` under
``softmax``) are not the op's own overloads, so they are neither found nor
reached; the ``internal`` search calls them directly (an edit
``internal:aten._softmax.default#0``, ``cases.reach.called``). Those a judged
case called so are counted apart, per op (``OpCoverage.internal``), read from
the stored case ids: the ``reached`` table holds them too, but among every
kernel a trace named.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cases import opinfo, reach
from ..cases.records import Case
from ..run.exact_functions import FUNCTIONS

# The outcomes whose case was judged: the store keeps what these reached (a kernel that refused the call is not covered).
JUDGED = ("pass", "finding")


@dataclass(frozen=True, kw_only=True, slots=True)
class OpCoverage:
    op: str  # catalog name
    found: tuple[str, ...]  # overloads with a kernel, "aten.add.Scalar"
    reached: tuple[str, ...]  # those some case reached
    unreached: tuple[tuple[str, str], ...]  # (overload, why no case reached it)
    undeclared: tuple[tuple[str, int], ...] = ()  # (variant, cases) swept beyond OpInfo's declared variants
    internal: tuple[str, ...] = ()  # internal overloads, not of the op's packets, a judged case called directly
    families: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (reached overload, the layout families of the cases that reached it)
    float64: str = ""  # "exact" (judged against mpmath), "consistency" (nothing above float64), "" (no float64 case)


@dataclass(frozen=True, kw_only=True, slots=True)
class Coverage:
    ops: tuple[OpCoverage, ...] = ()

    @property
    def found(self) -> int:
        return sum(len(o.found) for o in self.ops)

    @property
    def reached(self) -> int:
        return sum(len(o.reached) for o in self.ops)

    @property
    def internal(self) -> int:
        """Internal overloads called directly, counted per op (as ``found`` and ``reached`` are)."""
        return sum(len(o.internal) for o in self.ops)

    def by_family(self) -> dict[str, int]:
        """Layout family -> overloads (of those found, counted per op) some case of that family reached."""
        counts: dict[str, int] = {}
        for o in self.ops:
            for _, families in o.families:
                for family in families:
                    counts[family] = counts.get(family, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (item[0] != "contiguous", item[0])))

    def float64(self, how: str) -> tuple[str, ...]:
        """The ops whose float64 results were judged ``how``: "exact" or "consistency" (OpCoverage.float64)."""
        return tuple(o.op for o in self.ops if o.float64 == how)

    @property
    def undeclared(self) -> int:
        """Cases of variants OpInfo does not declare."""
        return sum(n for o in self.ops for _, n in o.undeclared)


def of_run(store, run) -> Coverage:
    """The kernel coverage of ``run`` (a ``RunInfo``) as stored; empty for commands other than ``ops``."""
    if run.command != "ops":
        return Coverage()
    counts = store.variant_counts(run.id)
    reached = store.reached(run.id)
    # an overload is reached by any case of the run: an op's own, or an overload swept from its schema on its behalf
    # (cases.unreached), which its name says it called even where it decomposes before a trace sees it
    anywhere = set().union(*reached.values()) | {op for op, hits in reached.items() if hits and reach.overload(op) is not None}
    rows = store.outcome_rows(run.id)
    direct = called_directly(rows)
    wide = float64_judged(rows, "exact" in (run.config.get("oracles") or ()))
    laid = store.reached_by_family(run.id)
    searched = tuple(run.config.get("search") or ())
    catalog = opinfo.catalog()
    found = []
    for op in sorted({op for op, _ in counts}):
        entry = catalog.get(op)
        if entry is None:
            continue
        variants = {v for (o, v) in counts if o == op}
        overloads = reach.found(entry)
        hit = tuple(o for o in overloads if o in anywhere)
        missed = tuple((o, why(entry, o, variants, searched)) for o in overloads if o not in hit)
        extra = tuple((v, counts[(op, v)]) for v in opinfo.undeclared(entry) if (op, v) in counts)
        internal = tuple(sorted(o for o in direct.get(op, ()) if o not in overloads))
        families = tuple((o, tuple(sorted(laid.get(o, ())))) for o in hit)
        found.append(OpCoverage(op=op, found=overloads, reached=hit, unreached=missed, undeclared=extra, internal=internal, families=families,
                                float64=wide.get(op, "")))
    return Coverage(ops=tuple(found))


def called_directly(rows) -> dict[str, set[str]]:
    """Op -> the overloads its judged cases called by name (``internal:aten._softmax.default#0``), from ``outcome_rows``."""
    found: dict[str, set[str]] = {}
    for case_id, status, *_ in rows:
        if status not in JUDGED or reach.INTERNAL + ":" not in case_id:
            continue
        case = Case.parse(case_id)
        name = reach.called(case.edits)
        if name:
            found.setdefault(case.op, set()).add(name)
    return found


def float64_judged(rows, exact_ran: bool) -> dict[str, str]:
    """Op -> how its float64 functional results were judged: "exact" where the exact oracle ran and knows the op's
    function, else "consistency"; ops with no such case are left out."""
    found = {}
    for case_id, status, *_ in rows:
        case = Case.parse(case_id)
        if case.dtype == "float64" and case.variant == "functional" and status in JUDGED:
            found[case.op] = "exact" if exact_ran and case.op in FUNCTIONS else "consistency"
    return found


def why(entry, overload: str, variants: set[str], searched: tuple[str, ...]) -> str:
    """Why no case reached ``overload``, in a reader's terms."""
    packet = overload.split(".")[1]
    name = reach.aten_name(entry)
    if packet == getattr(entry, "aten_backward_name", None) and "backward" not in variants:
        return "no backward case"
    if packet != name and packet == name + "_" and "inplace" not in variants:
        return "no in-place case"
    if reach.is_out(overload) and "out" not in variants:
        return "no out= case"
    slots = reach.number_slots(entry)
    if any(reach.takes_number(a) and a.name in slots for a in reach.overload(overload)._schema.arguments):
        if "overloads" not in searched:
            return "no case passes a Python number (--search overloads)"
        return "no case with a Python number reached it"
    if reach.composite_only(overload):
        return "a composite kernel: it decomposes before a trace sees it, and no case calls it by name"
    return "no sample reaches it"
