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
from ..run import call
from ..run.facts import facts as read_facts
from . import calls, large_index, stretched
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


# A case of this oracle may take this many of the sweep's --timeout: it moves gigabytes, or makes 65536
# rows of a batched linalg op (on the H200, linalg.eig and ldl_factor over 65535 matrices passed 60 s).
SLOWER = 5
_PROBED = frozenset({"UnaryUfuncInfo", "BinaryUfuncInfo", "ReductionOpInfo"})  # ops that have probes of their own
# The probe forms, for the oracle's option (``large:rows``): pointwise elements, reduction lengths, rows, indexing.
FORMS = ("elements", "length", "rows", "index")


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
    classes = _classes(opinfo.get(unit.op))
    planned = []
    if "ReductionOpInfo" in classes:
        planned += [f"large:length={n}" for n in stretched.REDUCTION_LENGTHS if "length" in chosen]
    elif _candidate(unit.op) and "elements" in chosen:
        itemsize = getattr(torch, unit.dtype).itemsize
        planned += [f"large:{name}" for name in PROBES if not (name == "bytes" and itemsize == 1)]
    if not classes & _PROBED and "rows" in chosen:
        planned += [f"large:rows={n}" for n in stretched.ROW_COUNTS]
    return planned + (large_index.plan(unit) if "index" in chosen else [])


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the large oracle lays out its own tensors (functional, contiguous cases only)")
    if case.oracle.startswith("large:length="):
        return stretched.stretched(case, subject, int(case.oracle.split("=", 1)[1]))
    if case.oracle.startswith("large:rows="):
        return stretched.rows(case, subject, int(case.oracle.split("=", 1)[1]))
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
