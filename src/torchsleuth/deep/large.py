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

Policy, as the ``sizes`` oracle's (deep/sizes.py): the short call runs
other lanes of the vector body and tail, so a bitwise difference is a
finding only when it exceeds the op's tolerance (the judge's rule, its
sensitivity measured on the picked values) or changes the class of a value
(NaN, infinity, integers at all); within tolerance it is noted.

Reductions (``large:length=L``). Kernels that index by dim break at other
sizes: a reduction of 32768 elements and more (a 16-bit count, a block's
share), a grid of 65536 rows or more (CUDA's grid y and z stop at 65535).
For a reduction, the input's largest dim is tiled to L, for L in 32767,
32768, 32769, 65535, 65536, 65537 (run.edits' ``dim:input@D>L``), and that
call is judged as the ops engine judges any case: against the precision
reference (float64 on the CPU), the device reference off the CPU, and the
contracts. Its findings are that stretched case's
(``...|dim:input@1>32768``), replayed, shrunk and scripted as such. At most
``MAX_STRETCHED`` elements (the other dims stay as the sample has them), so
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
tiled tensors hold at most ``MAX_STRETCHED`` elements together. A finding
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

Indexing (``large:index=2^31``, ``=2^32``, ``=bytes``): gathers and scatters
whose source or destination tensor is past a boundary, the indices on both
sides of it; deep/large_index.py has its design note.

Memory. A probe needs its tiled arguments and its result in memory at
once; before the call the oracle asks the device what is free (the CPU's
MemAvailable, CUDA's free memory) and skips the probe, saying how much it
needed, when the estimate (with half again for temporaries) does not fit.
The oracle runs only when asked (``torchsleuth ops --large``): a probe of
2^31 float32 elements moves 16 GiB. Named with an option in
``SweepConfig.oracles`` (``"large:rows"``, ``"large:rows,index"``), it
plans only those of its forms (``FORMS``: elements, length, rows, index).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..cases import opinfo
from ..cases.records import VARIANT_WORDS, Case
from ..errors import UsageError
from ..judge import compare as cmp
from ..judge.oracles import one_line
from ..judge.records import Mismatch, Outcome
from ..judge.tolerance import table
from ..run import call, edits
from ..run.facts import facts as read_facts
from ..run.facts import of_references
from . import calls, large_index
from .sizes import _candidate, _classes, _kind

DESCRIPTION = ("elements past 2^31 and 2^32 (and 2^31 bytes) get what small tensors get (pointwise ops), and are gathered "
               "and scattered right (indexing ops); reductions over 32768 and 65536 elements and ops over 65536 rows are "
               "right (--large)")

PAD = 4096
# Where 32-bit offsets wrap: 2^31 (signed) and 2^32 (unsigned) elements, and 2^31 bytes.
BOUNDS = (1 << 31, 1 << 32)
PROBES = {"2^31": lambda itemsize: BOUNDS[0] + PAD, "2^32": lambda itemsize: BOUNDS[-1] + PAD,
          "bytes": lambda itemsize: -(-(BOUNDS[0] + PAD) // itemsize)}
# Values tiled: position i holds value i % d, d odd (at most DISTINCT), so a
# position read through an offset wrapped by a power of two holds another value.
DISTINCT = 1023
DRAWN = 32  # positions drawn at random, besides the boundaries
HEADROOM = 1.5  # the estimate times this must fit in free memory


# Lengths a reduction's largest dim is stretched to, and the most elements that may make.
REDUCTION_LENGTHS = (32767, 32768, 32769, 65535, 65536, 65537)
MAX_STRETCHED = 1 << 22
# A case of this oracle may take this many of the sweep's --timeout: it moves gigabytes, or makes 65536
# rows of a batched linalg op (on the H200, linalg.eig and ldl_factor over 65535 matrices passed 60 s).
SLOWER = 5
# Rows a tensor's dim 0 is tiled to (CUDA's grid y and z stop at 65535).
ROW_COUNTS = (65535, 65536, 65537)
_PROBED = frozenset({"UnaryUfuncInfo", "BinaryUfuncInfo", "ReductionOpInfo"})  # ops that have probes of their own
# The probe forms, for the oracle's option (``large:rows``): pointwise elements, reduction lengths, rows, indexing.
FORMS = ("elements", "length", "rows", "index")


def plan(unit, variant: str, sample: int, forms: str = "") -> list[str]:
    """The probes of one unit; ``forms`` (the oracle's option, ``large:rows,index``) picks among FORMS, default all."""
    chosen = set(forms.split(",")) if forms else set(FORMS)
    if chosen - set(FORMS):
        raise UsageError(f"unknown large probe form(s) {', '.join(sorted(chosen - set(FORMS)))}; known: {', '.join(FORMS)}")
    if variant != "functional" or sample != 0:
        return []
    classes = _classes(opinfo.get(unit.op))
    planned = []
    if "ReductionOpInfo" in classes:
        planned += [f"large:length={n}" for n in REDUCTION_LENGTHS if "length" in chosen]
    elif _candidate(unit.op) and "elements" in chosen:
        itemsize = getattr(torch, unit.dtype).itemsize
        planned += [f"large:{name}" for name in PROBES if not (name == "bytes" and itemsize == 1)]
    if not classes & _PROBED and "rows" in chosen:
        planned += [f"large:rows={n}" for n in ROW_COUNTS]
    return planned + (large_index.plan(unit) if "index" in chosen else [])


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the large oracle lays out its own tensors (functional, contiguous cases only)")
    if case.oracle.startswith("large:length="):
        return _stretched(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:rows="):
        return _rows(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:index="):
        return large_index.run(subject)
    refs = subject.base()
    if not refs.contiguous.ok:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(refs.contiguous.error))
    kind = _kind(refs.trace, subject.entry)
    if kind != "pointwise":
        return Outcome(case=case, status="skip", reason=kind if kind != "reduction" else "a reduction: the large probes take pointwise ops")
    op = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=case.op).op
    prepared = _tileable(case, subject)
    if prepared is None:
        return Outcome(case=case, status="skip", reason="no sample of the op has a dimensioned tensor of 3 values or more to tile")
    return _Probe(subject, prepared, op).outcome()


def _rows(case, subject, rows: int) -> Outcome:
    """The case with ``rows`` rows, for an op the trace says is neither pointwise, random nor views only."""
    try:
        refs = subject.base()
        error = None if refs.contiguous.ok else refs.contiguous.error
    except Exception as e:  # the sample's tensors cannot even be made (a sparse layout, say)
        error = getattr(e, "error", e)
    if error is not None:
        return Outcome(case=case, status="raised", reason="the contiguous reference raised: " + one_line(error))
    kind = _kind(refs.trace, subject.entry)
    if kind == "pointwise":
        return Outcome(case=case, status="skip", reason="pointwise: the element probes (large:2^31, ...) take pointwise ops")
    if kind != "reduction" and not kind.startswith("neither"):
        return Outcome(case=case, status="skip", reason=kind)
    if of_references(refs, case.op).storage_defined:  # resize_as_ to 65536 rows makes uninitialized ones
        return Outcome(case=case, status="skip", reason="its contract is stated in storage (as_strided, resize_): it has no rows")
    return _stretched(case, subject, rows, rows=True)


def _stretched(case, subject, length: int, *, rows: bool = False) -> Outcome:
    """The case with a dim tiled to ``length``, judged as the engine judges any case.

    A reduction's input has its longest dim tiled; with ``rows``, dim 0 of
    the first tensors (of the case's sample, then the op's others) where
    that dim is a batch of rows (see the design note).
    """
    from ..engine import run_case

    passed_over = []  # rows: the tensors whose dim 0 is not rows, and why
    for index, sample in _samples(case, subject):
        for paths, x, dim, per_entry in _targets(sample, rows):
            where = f"dim 0 of {' and '.join(paths)}"
            if per_entry * length > MAX_STRETCHED:
                if not rows:
                    return Outcome(case=case, status="skip",
                                   reason=f"its input {list(x.shape)} stretched to {length} would pass {MAX_STRETCHED} elements")
                passed_over.append(f"sample {index}: {where} tiled to {length} would pass {MAX_STRETCHED} elements")
                continue
            why = _rows_differ(case, subject, sample, paths, x, 2 * x.shape[0]) if rows else ""
            if why:
                passed_over.append(f"sample {index}: with {where} doubled, {why}")
                continue
            stretched = dataclasses.replace(case, sample=index, oracle="", edits=case.edits + tuple(edits.stretch(p, dim, length) for p in paths))
            judged = run_case(stretched)
            reason = f"{stretched.id}: {judged.reason}" if judged.reason else f"judged as {stretched.id}"
            if rows and judged.findings and not _rows_differ(case, subject, sample, paths, x, length):
                # every row gets what the sample's own call gives it: whatever the judge saw there (the sample's
                # own error, or its randomly drawn slack's tail on one of 65536 copies), the row count did not cause it
                f = judged.findings[0]
                return Outcome(case=case, status="pass", reason=f"{stretched.id}: every one of the {length} rows equals the same row of the "
                                                                 f"sample's own call; the {f.kind} against the {f.reference} reference there "
                                                                 f"({' '.join(f.summary.split())}) does not come from the row count")
            return Outcome(case=case, status=judged.status, reason=reason, findings=judged.findings)
    if not rows:
        return Outcome(case=case, status="skip", reason="no sample of the op has an input with a dim to stretch")
    if not passed_over:
        return Outcome(case=case, status="skip", reason="no sample of the op has a tensor of two dims or more")
    more = f"; {len(passed_over) - 2} more" if len(passed_over) > 2 else ""
    return Outcome(case=case, status="skip", reason=f"no sample of the op has a dim 0 of rows: {'; '.join(passed_over[:2])}{more}")


def _samples(case, subject):
    """(index, sample): the case's own (its edits applied), then, unless it has edits, the op's others."""
    from ..engine import samples_of

    yield case.sample, subject.sample
    if not case.edits:
        yield from ((i, s) for i, s in enumerate(samples_of(case.op, case.dtype)) if i != case.sample)


def _targets(sample, rows: bool) -> list:
    """(paths, tensor, dim, elements per entry of the dim) to tile in ``sample``, in the order to try them.

    A reduction: its input's longest dim. Rows: for each tensor of two dims
    or more, dim 0 of it and of every argument with as many entries there
    (a batch they share), then of it alone.
    """
    found = edits.tensors(sample)
    if not rows:
        x = found.get("input")
        if x is None or x.dim() == 0 or x.numel() <= 1:
            return []
        dim = max(range(x.dim()), key=lambda d: x.shape[d])
        return [(("input",), x, dim, x.numel() // x.shape[dim])]
    targets, seen = [], set()
    for lead, x in found.items():
        if x.dim() < 2 or x.numel() == 0:
            continue
        shared = tuple(p for p, t in found.items() if t.dim() >= 1 and t.shape[0] == x.shape[0])
        for paths in dict.fromkeys([shared, (lead,)]):
            if frozenset(paths) not in seen:
                seen.add(frozenset(paths))
                targets.append((paths, x, 0, sum(found[p].numel() // found[p].shape[0] for p in paths)))
    return targets


def _rows_differ(case, subject, sample, paths: tuple[str, ...], x: torch.Tensor, rows: int) -> str:
    """How the call with dim 0 of ``paths`` tiled to ``rows`` fails to give each result tiled likewise; "" when it does not fail.

    Each result's dim 0 must grow as the rows do, and hold the sample's own
    result over and over, within the dtype's tolerance: the rows are
    independent (doubled: the design note says what that rules out), and
    (at the probe's row count) every row gets what it gets in the sample.
    """
    plain = calls.plain(case)
    tiled = edits.apply(sample, tuple(edits.stretch(p, 0, rows) for p in paths))
    try:
        once = calls.leaves(calls.run(call.prepare(plain, subject.function, sample)))
        many = calls.leaves(calls.run(call.prepare(plain, subject.function, tiled)))
    except Exception as e:
        return f"the call raises ({one_line(e)})"
    if not once or len(once) != len(many):
        return f"the call returns {len(many)} results, {len(once)} without"
    tolerance = lambda dtype: table(dtype, subject.override)  # noqa: E731
    for (result, a), (_, e) in zip(many, once):
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or e.layout != torch.strided or e.dim() == 0 or e.shape[0] == 0 \
                or a.shape[1:] != e.shape[1:] or a.shape[0] * x.shape[0] != e.shape[0] * rows \
                or cmp.compare_leaf(result, a, e.repeat(-(-a.shape[0] // e.shape[0]), *[1] * (e.dim() - 1))[:a.shape[0]],
                                    tolerance=tolerance) is not None:
            return f"{result} is not its result tiled likewise (its rows are not independent)"
    if rows == 2 * x.shape[0]:
        return _copy_changes_first(plain, subject, tiled, paths, x.shape[0], once, tolerance)
    return ""


def _copy_changes_first(plain, subject, tiled, paths, n: int, once, tolerance) -> str:
    """Whether changing the second copy's values changes the first copy's results ("" if not).

    Rows twice over can give each result twice over and still not be
    independent: batch norm in training normalises by statistics over every
    row, which a copy of the same rows leaves as they were. With the copy's
    floating values changed, independent rows keep the first copy's results.
    """
    changed = False
    with torch.no_grad():
        for path in paths:
            t = edits.tensors(tiled)[path]
            if t.is_floating_point() or t.is_complex():
                t[n:] = t[n:] * 2 + 1
                changed = True
    if not changed:
        return ""
    try:
        many = calls.leaves(calls.run(call.prepare(plain, subject.function, tiled)))
    except Exception as e:
        return f"the call raises with other values in its rows ({one_line(e)})"
    for (result, a), (_, e) in zip(many, once):
        if cmp.compare_leaf(result, a[:e.shape[0]], e, tolerance=tolerance) is not None:
            return f"{result} of the first rows changes with the values of the others (its rows are not independent)"
    return ""


def _tileable(case, subject) -> call.Prepared | None:
    """The case's call, on its own sample or else the op's first with values enough to tile.

    The probes run on the first sample; many ops' first sample is a 0-dim
    tensor, and which values are tiled matters less than that there are some.
    A replay (same id) picks the same sample again.
    """
    from ..engine import samples_of

    candidates = [subject.sample] + ([] if case.edits else samples_of(case.op, case.dtype))
    for sample in candidates:
        prepared = call.prepare(calls.plain(case), subject.function, sample)
        if any(t.dim() > 0 and t.numel() >= 3 for t in prepared.tensors.values()):
            return prepared
    return None


class _Skip(Exception):
    pass


class _Probe:
    def __init__(self, subject, prepared: call.Prepared, op: str):
        self.subject, self.case, self.prepared, self.op = subject, subject.case, prepared, op
        self.function_name = opinfo.public_name(subject.entry, "functional")

    def outcome(self) -> Outcome:
        try:
            return self._judge()
        except _Skip as e:
            return Outcome(case=self.case, status="skip", reason=str(e))

    def _judge(self) -> Outcome:
        tensors = {p: t for p, t in self.prepared.tensors.items() if t.dim() > 0}
        if not tensors:
            raise _Skip("the call has no dimensioned tensor argument to tile")
        try:
            shape = torch.broadcast_shapes(*(t.shape for t in tensors.values()))
        except RuntimeError:
            raise _Skip("its tensor arguments do not broadcast together") from None
        if shape.numel() == 0:
            raise _Skip("its tensor arguments are empty")
        distinct = min(shape.numel(), DISTINCT)
        distinct -= 1 - distinct % 2  # odd: see DISTINCT
        if distinct < 3:
            raise _Skip("the sample has too few values: a position read through a wrapped offset would hold the same one")
        values = {p: t.detach().expand(shape).reshape(-1)[:distinct].contiguous() for p, t in tensors.items()}
        short = self._call({**self.prepared.tensors, **values}, "the short call")
        for path, value in short:
            if not isinstance(value, torch.Tensor) or value.shape != (distinct,):
                raise _Skip(f"its result {path} is not shaped like its arguments: not elementwise")
        name = self.case.oracle.split(":", 1)[1]
        itemsize = max(t.element_size() for t in values.values())
        n = PROBES[name](itemsize)
        need = n * (sum(t.element_size() for t in values.values()) + sum(v.element_size() for _, v in short))
        self._fits(need)
        big = {p: t.repeat(-(-n // distinct))[:n] for p, t in values.items()}
        try:
            actual = self._call({**self.prepared.tensors, **big}, f"the call of {n} elements")
            positions = _positions(n).to(next(iter(big.values())).device)
            picked_actual = [(p, v.reshape(-1)[positions].clone()) for p, v in actual]
        finally:
            del big
        at = positions % distinct
        picked_expected = [(p, v[at]) for p, v in short]
        picked = calls.with_tensors(self.prepared, {**self.prepared.tensors, **{p: t[at] for p, t in values.items()}})
        return self._verdict(name, n, distinct, positions, picked, picked_actual, picked_expected)

    def _call(self, tensors: dict, what: str):
        try:
            return calls.leaves(calls.run(self.prepared, tensors))
        except torch.OutOfMemoryError:
            raise _Skip(f"{what} ran out of memory") from None
        except Exception as e:
            raise _Skip(f"{what} raised where the sample's did not: {one_line(e)}") from None

    def _fits(self, need: int) -> None:
        short = short_of_memory(self.case.device, need)
        if short:
            raise _Skip(short)

    def _verdict(self, name, n, distinct, positions, picked, actual, expected) -> Outcome:
        tolerance = lambda dtype: table(dtype, self.subject.override)  # noqa: E731
        ulps, hard = 0, None
        for (path, a), (_, e) in zip(actual, expected):
            if cmp.compare_leaf(path, a, e, tolerance=tolerance, bitwise=True) is None:
                continue
            changed = calls.class_change(a, e, signed_zero=True)
            if bool(changed.any()):
                hard = hard or _mismatch(path, a, e, changed, positions, tolerance)
            if a.is_floating_point() or a.is_complex():
                ulps = max(ulps, int(calls.ulps(a, e).max()))
        if hard is None and ulps:
            judged = calls.Judged(picked, dict(actual) if len(actual) > 1 else actual[0][1], override=self.subject.override,
                                  function_name=self.function_name, op=self.op)
            found = judged.differs(dict(expected) if len(expected) > 1 else expected[0][1])
            hard = found[0] if found else None
            if hard is not None and hard.worst_index:
                hard = _at_position(hard, positions)
        if hard is None:
            reason = f"{n} elements, read at {len(positions)} positions"
            if ulps:
                reason += f"; bits differ by up to {ulps} ULP from the short call, within tolerance"
            return Outcome(case=self.case, status="pass", reason=reason)
        short = self.op.split(".")[1] if self.op.startswith("aten.") else self.op
        summary = (f"{short}{VARIANT_WORDS[self.case.variant]} [{self.case.dtype}] on {n} elements ({_boundary(name)}) "
                   f"gives element {list(hard.worst_index)} {hard.actual} where the same value in a short tensor gives {hard.expected}")
        spec = call.call_spec(self.prepared, calls.ran(self.prepared), self.function_name)
        finding = calls.finding(self.case, kind="large_size", reference="large", op=self.op, summary=summary, mismatch=hard,
                                call_spec=spec, detail=f"{n} elements tiled from {distinct} values; positions read: "
                                                       f"{_span(positions)}")
        return Outcome(case=self.case, status="finding", findings=(finding,))


def _boundary(name: str) -> str:
    return {"2^31": "past 2^31 elements", "2^32": "past 2^32 elements", "bytes": "past 2^31 bytes"}[name]


def _positions(n: int) -> torch.Tensor:
    """The boundaries' neighbours below ``n``, the ends, and DRAWN seeded positions."""
    marks = {0, 1, n - 2, n - 1}
    for bound in BOUNDS:
        marks |= {bound - 2, bound - 1, bound, bound + 1}
    generator = torch.Generator().manual_seed(n)
    marks |= set(torch.randint(n, (DRAWN,), generator=generator).tolist())
    return torch.tensor(sorted(m for m in marks if 0 <= m < n), dtype=torch.int64)


def _mismatch(path, a, e, changed, positions, tolerance) -> Mismatch:
    flat = int(changed.to(torch.uint8).argmax())
    tol = tolerance(a.dtype)
    inexact = a.is_floating_point() or a.is_complex()
    return Mismatch(path=path, attribute="values", expected=_fmt(e[flat]), actual=_fmt(a[flat]), mismatched=int(changed.sum()),
                    numel=a.numel(), worst_index=(int(positions[flat]),), max_abs_err=None,
                    atol=tol.atol if inexact else 0.0, rtol=tol.rtol if inexact else 0.0, allowed=0.0)


def _at_position(m: Mismatch, positions: torch.Tensor) -> Mismatch:
    """A mismatch found among the picked values, its index made the position in the large tensor."""
    return dataclasses.replace(m, worst_index=(int(positions[m.worst_index[0]]),))


def _fmt(x: torch.Tensor) -> str:
    value = x.item()
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


def _span(positions: torch.Tensor) -> str:
    listed = positions.tolist()
    return ", ".join(str(p) for p in listed[:12]) + (f", ... ({len(listed)} in all)" if len(listed) > 12 else "")


def short_of_memory(device: str, need: int) -> str:
    """Why ``need`` bytes (with half again for temporaries) do not fit on ``device`` now; "" when they do."""
    free = _free_bytes(device)
    if need * HEADROOM > free:
        return f"needs about {need * HEADROOM / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free on {device}"
    return ""


def _free_bytes(device: str) -> int:
    kind = torch.device(device).type
    if kind == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free
    if kind == "cpu":
        return _mem_available()
    return 0  # other devices: unknown, so no probe runs


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_MAIN = '''

def main():
    T = tensors()
    print(f"torchsleuth repro: elements of a tensor of {N} elements must get what the same values get in a short one")
    print("call:", CALL)
    describe(T)
    dims = {p: t for p, t in T.items() if t.dim() > 0}
    kept = {p: t for p, t in T.items() if p not in dims}
    shape = torch.broadcast_shapes(*(t.shape for t in dims.values()))
    distinct = min(shape.numel(), DISTINCT)
    distinct -= 1 - distinct % 2  # odd, as torchsleuth tiled them
    values = {p: t.detach().expand(shape).reshape(-1)[:distinct].contiguous() for p, t in dims.items()}
    short = leaves(call({**kept, **values}))
    big = {p: t.repeat(-(-N // distinct))[:N] for p, t in values.items()}  # element i holds value i % distinct
    result = leaves(call({**kept, **big}))
    del big
    at = torch.tensor(POSITIONS)
    wrong = False
    for (path, a), (_, e) in zip(result, short):
        a, e = a.reshape(-1)[at.to(a.device)], e[(at % distinct).to(e.device)]
        bad = disagree(a, e, signed_zero=True)
        if bool(bad.any()):
            wrong = True
            report(f"{N} elements", path, a, e, bad, lambda i: f"element {POSITIONS[i]} (value {POSITIONS[i] % distinct})")
    if wrong:
        print("BUG PRESENT:", SUMMARY)
        return 1
    print(f"OK: the {len(POSITIONS)} elements read give what the same values give in a short tensor")
    return 0
'''


def repro(finding, torch_version: str) -> str | None:
    """A standalone script: the same tiling, the same positions, the short call as the reference."""
    from ..report import repro as common  # the parts every script shares
    from .sizes_repro import written  # placed, disagree, report: the sizes oracle's policy, written out

    if finding.kind in ("crash", "hang"):
        why = (f"the worker died in one of the large oracle's own calls (a probe's large tensors; for large:rows the "
               f"sample with one argument's dim 0 doubled or tiled, which a kernel that does not check its arguments' "
               f"shapes can crash on); rerun the case {finding.case_id!r} with --workers 1 to see which")
        return common._no_repro(finding, torch_version, why)
    if Case.parse(finding.case_id).oracle.startswith("large:index="):
        return large_index.repro(finding, torch_version)
    if finding.kind != "large_size":
        return None  # a stretched case's finding is the judge's own: the generic script
    call = finding.call
    if call is None or not call.function or call.why_not:
        return None  # the generic script says why there is none
    m = finding.mismatch
    n = int(finding.detail.split(" ", 1)[0])  # "N elements tiled ..."
    positions = _positions(n).tolist()
    constants = [
        f"ATOL, RTOL = {(m.atol if m else 0.0)!r}, {(m.rtol if m else 0.0)!r}  # the tolerance table's, for this dtype",
        "SLACK = 0.0",
        f"CALL = {common._call_source(call)!r}",
        f"N = {n}  # elements of the large call",
        f"DISTINCT = {DISTINCT}  # values tiled",
        f"POSITIONS = {positions!r}  # the elements read",
        'REFERENCE = "in a short tensor"',
    ]
    return written(finding, call, torch_version, constants, _MAIN)
