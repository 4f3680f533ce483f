"""The ``large`` oracle: elements past 2^31 and 2^32 (and 2^31 bytes) get what small tensors get; long reductions, 65536 rows.

Design note. A kernel that computes an offset in 32 bits wraps around at
2^31 elements (signed) or 2^32 (unsigned), or at 2^31 bytes when it counts
bytes; the elements past the wrap are read from or written to the wrong
place, silently. A case of this oracle takes a pointwise call's values
(the sample's tensor arguments broadcast and flattened, an odd number of
them, at most ``DISTINCT``, so that a position read through an offset
wrapped by a power of two holds another value), tiles them to one length
past a boundary, makes the call once, and reads the result at a few positions: the first and last
elements, both sides of each boundary the length crosses, and some drawn
from a seeded generator. The expected value at a position is the same
call on the short tensor of the distinct values (one call, no second large
run), at the value that position holds. The probes, one case each:

* ``large:2^31``: 2^31 + 4096 elements;
* ``large:2^32``: 2^32 + 4096 elements;
* ``large:bytes``: just past 2^31 bytes (dtypes wider than a byte: fewer
  than 2^31 elements, so only a byte count can overflow).

Policy, as the ``sizes`` oracle's (oracles/sizes): the short call runs
other lanes of the vector body and tail, so a bitwise difference is a
finding only when it exceeds the op's tolerance (the judge's rule, its
sensitivity measured on the picked values) or changes the class of a value
(NaN, infinity, integers at all); within tolerance it is noted.

Reductions (``large:length=L``). Kernels that index by dim break at other
sizes: a reduction of 32768 elements and more (a 16-bit count, a block's
share), a grid of 65536 rows or more (CUDA's grid y and z stop at 65535).
For a reduction, the input's largest dim is tiled to L, for L in 32767,
32768, 32769, 65535, 65536, 65537 (search.edits' ``dim:input@D>L``), and that
call is judged as the ops engine judges any case: against the precision
reference (float64 on the CPU), the device reference off the CPU, and the
contracts. Its findings are that stretched case's
(``...|dim:input@1>32768``), replayed, shrunk and scripted as such. At most
``stretched.MAX_STRETCHED`` elements (the other dims stay as the sample has them), so
these run in every ``--large`` sweep.

Rows (``large:rows=L``). Ops that launch a block per row (softmax,
layer_norm, cumsum, sort, topk, cat, index_select, embedding, upsampling)
put the rows in a grid's y or z, which stops at 65535. For an op whose
OpInfo entry is neither a ufunc nor a reduction (those have the probes
above), dim 0 of a tensor argument with two dims or more is tiled to L,
for L in 65535, 65536, 65537, and the stretched case is judged as the
reductions' is (the same code). Dim 0 because it is the outermost: every
kernel that flattens the leading dims into rows gets at least L of them.
It is tiled together with the other arguments whose dim 0 has as many
entries (a batch they share: bmm's operands, a loss's input and target,
attention's query, key and value), else alone. The tensor is the first,
in call order, of the case's sample (else of the op's other samples)
whose dim 0 is a batch of independent rows, as two small calls tell: with
that dim doubled (its rows twice over) the call gives each result twice
over along its dim 0, within tolerance, and with the copy's floating
values changed its first half still gives the sample's results (rows twice
over leave batch norm's training statistics as they were; other rows beside
them do not). That rules out a dim tied to an
argument not tiled with it (layer_norm's normalized shape), an op working
along it (softmax along dim 0 is a long reduction, whose length the
tolerance rule does not know; an SVD, whose rows mix), a result that
grows faster than the dim (cov, pdist: 2^32 elements at 65536 rows) and a
table rather than rows (embedding's weight: its indices are the rows). The
tiled tensors hold at most ``stretched.MAX_STRETCHED`` elements together. A finding
of the stretched case stands only where some row differs from the same
row of the sample's own call: the judge's slack is measured with random
nudges, one per element, and 65536 copies of a row meet the tail of that
draw (they did in matrix_exp); when every row equals the sample's, the
row count changed nothing and the case passes saying so. When the call's
trace is pointwise (the element probes' job), random or views only, or its
contract is stated in storage (resize_as_ to 65536 rows leaves the new
ones uninitialized), the case is a skip saying so. Tiled alone, a tensor
can get a dim 0 the other arguments do not match; a kernel that does not
check its arguments' shapes can crash on the doubled call (a ``crash``
finding of the rows case; bench/deep-large.md lists them).

Spans (``large:span=L``, L = 2^23 + 3, 2^24 + 3, float32 only): a dim of the input
just past where float32 holds every integer, for every op but the ufuncs
(an index or a scale computed in float32 reads a neighbour there), judged
as the reductions' lengths are; large/span.py has its design note.

Indexing (``large:index=2^31``, ``=2^32``, ``=bytes``): gathers and scatters
whose source or destination tensor is past a boundary, the indices on both
sides of it; large/index.py has its design note.

Creation (``large:creation=2^31``, ``=2^32``, ``=bytes``): the catalog's
factories (arange, linspace, logspace, full, ones, zeros, eye,
tril/triu_indices, the ``_like`` and ``new_`` ones, randint) made just past
a boundary, each position read checked against the value the formula gives
at that index; large/creation.py has its design note.

Memory. A probe needs its tiled arguments and its result in memory at
once; before the call the oracle asks the device what is free (the CPU's
MemAvailable, CUDA's free memory) and skips the probe, saying how much it
needed, when the estimate (with half again for temporaries) does not fit.
The oracle runs when asked (``torchsleuth ops --large``), and in a run
pointed at a few ops on CUDA, where a GPU has the memory (the memory check
above skips what does not fit, saying so); a catalog run and a CPU run
leave it out unless asked: a probe of 2^31 float32 elements moves 16 GiB.
Named with an option in ``SweepConfig.oracles`` (``"large:rows"``,
``"large:rows,index"``), it plans only those of its forms (``FORMS``:
elements, length, rows, span, index, creation).

Where it is. This module plans a unit's probes and hands each case to its
form: large.elements (the element probes), large.stretched (lengths and
rows), large.index (indexing), large.creation (factories); large.bounds
holds the boundaries, the positions read and the memory check they share,
and large.script writes a finding's repro script from its ``Detail``
(large.detail).
"""

from __future__ import annotations

import torch

from ...cases import opinfo
from ...errors import UsageError
from ...judge.plugin import Oracle
from ...judge.records import Outcome
from ...run.opclass import classes, may_be_pointwise_or_reduction
from . import bounds, creation, elements, index, script, span, stretched

DESCRIPTION = ("elements past 2^31 and 2^32 (and 2^31 bytes) get what small tensors get (pointwise ops), are gathered "
               "and scattered right (indexing ops) and made right (creation ops); reductions over 32768 and 65536 elements "
               "and ops over 65536 rows and along a dim past 2^23 and 2^24 are right (--large; on by default in a pointed "
               "run on CUDA)")

# A case of this oracle may take this many of the sweep's --timeout: it moves gigabytes, or makes 65536
# rows of a batched linalg op (on the H200, linalg.eig and ldl_factor over 65535 matrices passed 60 s).
SLOWER = 5
_PROBED = frozenset({"UnaryUfuncInfo", "BinaryUfuncInfo", "ReductionOpInfo"})  # ops that have probes of their own
# The probe forms, for the oracle's option (``large:rows``): pointwise elements, reduction lengths, rows, indexing, creation.
FORMS = ("elements", "length", "rows", "span", "index", "creation")


def chosen_forms(text: str, what: str = "large probe form") -> tuple[str, ...]:
    """The forms named in ``text`` ("rows,index"), checked against FORMS."""
    forms = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        raise UsageError(f"unknown {what} {', '.join(map(repr, unknown)) or repr(text)}; known: {', '.join(FORMS)}")
    return forms


def plan(unit, variant: str, sample: int, forms: str = "") -> list[str]:
    """The probes of one unit; ``forms`` (the oracle's option, ``large:rows,index``) picks among FORMS, default all."""
    chosen = chosen_forms(forms) if forms else FORMS
    if variant != "functional" or sample != 0:
        return []
    op_classes = classes(opinfo.get(unit.op))
    planned = []
    if "ReductionOpInfo" in op_classes:
        planned += [f"large:length={n}" for n in stretched.REDUCTION_LENGTHS if "length" in chosen]
    elif may_be_pointwise_or_reduction(unit.op) and "elements" in chosen:
        itemsize = getattr(torch, unit.dtype).itemsize
        planned += [f"large:{name}" for name in bounds.PROBES if not (name == "bytes" and itemsize == 1)]
    if not op_classes & _PROBED and "rows" in chosen:
        planned += [f"large:rows={n}" for n in stretched.ROW_COUNTS]
    if not op_classes & {"UnaryUfuncInfo", "BinaryUfuncInfo"} and "span" in chosen and unit.dtype == span.DTYPE:
        planned += [f"large:span={n}" for n in span.LENGTHS]
    planned += index.plan(unit) if "index" in chosen else []
    return planned + (creation.plan(unit) if "creation" in chosen else [])


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the large oracle lays out its own tensors (functional, contiguous cases only)")
    if case.oracle.startswith("large:length="):
        return stretched.stretched(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:rows="):
        return stretched.rows(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:span="):
        return span.span(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:index="):
        return index.run(subject)
    if case.oracle.startswith("large:creation="):
        return creation.run(subject)
    return elements.run(subject)


ORACLE = Oracle(name="large", description=DESCRIPTION, cost="large", plan=plan, run=run, script=script.script, slower=SLOWER,
                option=lambda text: ",".join(chosen_forms(text or "", "--large form")))
