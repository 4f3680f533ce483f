"""The ``sizes`` oracle: an element's result must not depend on the tensor around it.

Design note. For a pointwise op on one device, the result at an element is
a function of the arguments at that element alone: not of the tensor's
length, the element's position, the batch it sits in or where the storage
starts. CPU kernels have a vectorised body and a scalar tail, GPU kernels
block boundaries; a kernel whose body and tail disagree gives an element
another value in another tensor. A case of this oracle takes a sample's
values (deep.lengths: broadcast, flattened, tiled) and computes

* each distinct value alone, as a length-1 tensor: the reference;
* every length of ``lengths.lengths(device)`` (1, 7, 8, 9, ... 257 on the
  CPU; up to 65537 on a GPU), each in a fresh storage;
* the longest length at a storage offset that breaks vector alignment;
* every length but 1 again in each layout form (deep.lengths, laid out by
  cases.layouts as the main sweep lays out its ``strided`` and
  ``transposed`` cases, gaps poisoned): strided, every other element of a
  buffer twice as long; transposed, an ``n x 2`` grid in column-major
  order, so the op walks columns of ``n``; and, when the call has several
  tiled arguments, the same grid with only the first one transposed;
* the sample's own call, flattened;

and compares every element with the same value alone, bit for bit.

Layout. Issue 6 asks that an element's result not depend on its layout
either. A CPU kernel given a strided operand leaves the vectorised loop for
a scalar or gathered one with a tail of its own; a CUDA kernel leaves its
vectorised loads for an offset calculator. The forms are configurations of
the one ``sizes`` case, not cases of their own: they share its most
expensive part, each distinct value computed alone, so the case count per
op stays one per sample, and a finding's summary names the form and the
lengths ("wrong at strided lengths 7, 9, ... (every other element)"). Every
operand transposed alike is what TensorIterator reorders back into one
contiguous run (on the CPU it behaves as length ``2n``); operands with
different strides (``transposed-first``) are what reach the strided inner
loop, so both are there. A form the op refuses (it raises) is left out and
named in the outcome's reason: a loud error is not this oracle's class.

Policy. PyTorch computes the body and the tail of some kernels differently
on purpose: on the CPU, sigmoid, sinh, cosh, exp2, gelu, silu, mish and
softplus take SLEEF's vectorised functions in the body and libm in the tail,
about one unit in the last place (ULP) apart in float32 and float64. So a
bitwise difference is a finding only when

* it exceeds the op's tolerance (judge.tolerance: the table, widened by the
  op's measured sensitivity to rounding, as the layout reference does for
  two rounded results; the sensitivity is measured once, on the sample's own
  call, and indexed by value, so a value gets one verdict wherever it sits),
  or
* it changes the class of the value: NaN against a number, an infinity
  against anything else, +0 against -0 (pointwise ops only: IEEE defines the
  sign of every zero a pointwise op returns, so the two paths owe the same
  one), or any difference at all in an integer or bool result.

A bitwise difference within tolerance is not a finding; the pass outcome's
reason says "bits differ by up to N ULP between length L and length 1 (the
element alone)", and whether NaNs differ in their sign or payload bits
(NaN on both sides is the same class), which bench/deep-sizes.md tallies.

Reductions get the same treatment where the contract allows: a batch of
independent rows (deep.lengths.rows) must give each row what the row gives
alone, within the reduction's tolerance (summation order may differ, so
the rule's reduction-length term applies), NaN and infinity matching, and
integer results (argmax, count_nonzero) exactly. This needs the dims the
kernel reduces over, read off the call as the kernel receives it: a call
that reduces every element, or one whose dims mix signs, has no batch that
keeps its meaning, and is skipped with that reason; so is one whose kernel,
once the batch dim is there, reduces other dims than it should (Python
code that normalises ``dim`` before the kernel sees it).

Which ops are which is PyTorch's own word: pointwise when every op that
computes something in the call's trace is tagged ``torch.Tag.pointwise``,
or the OpInfo entry is a unary or binary ufunc (PyTorch's own tests call it
elementwise; ``rsub`` and ``floor_divide`` lack the tag), and no op is
``nondeterministic_seeded``; a reduction when one is tagged
``torch.Tag.reduction``. Planning is cheaper and looser (the OpInfo entry
is a ufunc or reduction class, or its aten name carries one of those tags);
a planned case the trace rules out is a skip with its reason.

Only the functional variant is planned, and only with every argument
contiguous: the oracle lays out its own tensors (above), so a shrunk or
diagnosed case that asks for a layout is skipped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..cases import layouts, opinfo
from ..cases.records import VARIANT_WORDS
from ..judge import compare as cmp
from ..judge.context import bits_equal
from ..judge.oracles import one_line
from ..judge.records import Mismatch, Outcome
from ..judge.tolerance import table
from ..run import call, edits
from ..run.facts import facts as read_facts
from ..run.trace import PLUMBING
from . import calls, lengths

DESCRIPTION = "an element's result does not depend on the tensor's length, offset, layout or batch (pointwise ops, reductions)"

_UFUNCS = frozenset({"UnaryUfuncInfo", "BinaryUfuncInfo"})
_PLANNED_CLASSES = _UFUNCS | {"ReductionOpInfo"}
_CONVERSIONS = frozenset({"_to_copy", "copy_"})
# How a reduction finding's detail says where the batch dim went (its repro script reads it).
BATCH_FRONT, BATCH_BACK = "new first dim", "new last dim"


def plan(unit, variant: str, sample: int) -> list[str]:
    if variant != "functional" or not _candidate(unit.op):
        return []
    from ..engine import samples_of  # cached: the engine has just made them

    tensors = edits.tensors(samples_of(unit.op, unit.dtype)[sample])
    return ["sizes"] if any(t.numel() for t in tensors.values()) else []


@functools.cache
def _candidate(op: str) -> bool:
    """Whether the op may be pointwise or a reduction (the trace decides when the case runs)."""
    entry = opinfo.get(op)
    if _classes(entry) & _PLANNED_CLASSES:
        return True
    wanted = {torch.Tag.pointwise, getattr(torch.Tag, "reduction", torch.Tag.pointwise)}
    try:
        packet = getattr(torch.ops.aten, getattr(entry, "aten_name", None) or entry.name)
        return any(wanted & set(getattr(packet, name).tags) for name in packet.overloads())
    except Exception:  # no such aten op
        return False


def run(subject) -> Outcome:
    case = subject.case
    if case.layouts or case.variant != "functional":
        return Outcome(case=case, status="skip", reason="the sizes oracle lays out its own tensors (functional, contiguous cases only)")
    refs, raised = calls.base(subject)
    if raised is not None:
        return raised
    prepared = call.prepare(calls.plain(case), subject.function, subject.sample)
    kind = _kind(refs.trace, subject.entry)
    if kind not in ("pointwise", "reduction"):
        return Outcome(case=case, status="skip", reason=kind)
    op = read_facts(refs.trace, refs.base.tensors, refs.contiguous.value, fallback=case.op).op
    check = _Check(subject, prepared, op)
    try:
        return check.pointwise() if kind == "pointwise" else check.reduction()
    except _Skip as e:
        return Outcome(case=case, status="skip", reason=str(e))


def _short(op) -> str:
    return op._schema.name.split("::")[-1]


def _kind(trace, entry) -> str:
    """"pointwise", "reduction", or why the oracle does not apply."""
    computing = [op for op in trace.ops if _short(op) not in PLUMBING]
    if not computing:  # a dtype conversion computes too, elementwise
        computing = [op for op in trace.ops if _short(op) in _CONVERSIONS]
    if not computing:
        return "the call computes nothing (only views)"
    if trace.has_tag(torch.Tag.nondeterministic_seeded):
        return "the op draws random numbers: an element's draw depends on its position by design"
    reduction = getattr(torch.Tag, "reduction", None)
    if reduction is not None and any(reduction in op.tags for op in computing):
        return "reduction"
    if all(torch.Tag.pointwise in op.tags for op in computing) or _classes(entry) & _UFUNCS:
        return "pointwise"
    odd = sorted({_short(op) for op in computing if torch.Tag.pointwise not in op.tags})
    return f"neither pointwise nor a reduction: it computes with {', '.join(odd[:3])}"


def _classes(entry) -> set[str]:
    """The names of the OpInfo classes the entry is (a ufunc is elementwise by PyTorch's own account)."""
    return {c.__name__ for c in type(entry).__mro__}


class _Skip(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Place:
    """Where the oracle put an element: "length", "offset", a layout form or "sample" (pointwise), "outer" or "inner" (rows)."""

    kind: str  # one of the above; a layout form is a key of lengths.FORM_WORDS
    size: int  # the length, or the rows in the batch
    label: str  # "length 9", "strided length 9 (every other element)", "a batch of 9 rows (innermost in memory)"
    argument: str = ""  # the argument a layout form lays out alone ("transposed-first")


@dataclass(frozen=True, slots=True)
class _Verdict:
    """One configuration judged: its mismatch (None: fine), and the largest bitwise distance seen."""

    place: _Place
    mismatch: Mismatch | None = None
    ulps: int = 0
    nan_bits: bool = False  # NaN on both sides, with other sign or payload bits


class _Check:
    def __init__(self, subject, prepared: call.Prepared, op: str):
        self.subject = subject
        self.case = subject.case
        self.prepared = prepared
        self.op = op
        self.function_name = opinfo.public_name(subject.entry, "functional")
        self._slack: dict[bool, dict] = {}
        self.detail = ""  # how the configurations were made, for the reader and the repro script
        self.notes: list[str] = []  # what a passing outcome's reason says besides the bits

    def name(self) -> str:
        short = self.op.split(".")[1] if self.op.startswith("aten.") else self.op
        return f"{short}{VARIANT_WORDS[self.case.variant]} [{self.case.dtype}]"

    def call(self, tensors: dict):
        try:
            return calls.run(self.prepared, tensors)
        except Exception as e:
            raise _Skip(f"the oracle's call raised where the sample's did not: {one_line(e)}") from None

    def tolerance(self, dtype: torch.dtype):
        return table(dtype, self.subject.override)

    def slack_of(self, judged: calls.Judged, jumps: bool) -> dict:
        """The rule's slack for two rounded results of ``judged``'s call (made once per probe)."""
        if jumps not in self._slack:
            self._slack[jumps] = judged.context.slack(2.0, jumps=jumps) or {}
        return self._slack[jumps]

    # --- pointwise -------------------------------------------------------------------------

    def pointwise(self) -> Outcome:
        sizes = lengths.lengths(self.case.device)
        tiles = lengths.tiling(self.prepared.tensors, max(sizes))
        if isinstance(tiles, str):
            raise _Skip(tiles)
        sample_result = self.call(self.prepared.tensors)
        sample_leaves = calls.leaves(sample_result)
        for path, value in sample_leaves:
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != tiles.shape:
                raise _Skip(f"its result {path} does not have its arguments' broadcast shape: not elementwise")
        alone = [calls.leaves(self.call(tiles.alone(j))) for j in range(tiles.distinct)]
        reference = [(path, torch.cat([a[i][1].reshape(-1) for a in alone])) for i, (path, _) in enumerate(alone[0])]
        # the slack of each value, from the sample's own call: the same for the value wherever it sits
        sample = calls.Judged(self.prepared, sample_result, override=self.subject.override, function_name=self.function_name, op=self.op)

        def judged_at(n: int):
            at = tiles.positions(n)
            expected = [(path, values[at.to(values.device)]) for path, values in reference]

            def slack(jumps: bool) -> dict:
                return {p: v.reshape(-1)[:tiles.distinct][at] for p, v in self.slack_of(sample, jumps).items()}

            return expected, slack

        longest = tiles.longest
        configurations = [(_Place("length", n, f"length {n}"), n, tiles.length(n)) for n in sizes]
        configurations.append((_Place("offset", longest, f"length {longest} at storage offset {layouts.OFFSET}"),
                               longest, tiles.length(longest, "offset")))
        first = next(iter(tiles.tiled))
        configurations += [(_Place(form, n, _form_words(form, n, first), first), tiles.count(n, form), tiles.form(n, form))
                           for form in tiles.forms() for n in sizes if n > 1]
        verdicts, raised = [], {}
        for place, count, tensors in configurations:
            if place.kind in lengths.FORM_WORDS:
                try:  # a form that raises is loud, not this oracle's class: noted, and the form dropped
                    actual = calls.leaves(calls.run(self.prepared, tensors))
                except Exception as e:
                    raised.setdefault(place.kind, f"{place.label} raised: {one_line(e)}")
                    continue
                grid = (place.size, lengths.COLUMNS)
                actual = [(p, v.reshape(-1) if isinstance(v, torch.Tensor) and tuple(v.shape) == grid else v) for p, v in actual]
            else:
                actual = calls.leaves(self.call(tensors))
            expected, slack = judged_at(count)
            verdicts.append(self.compare(place, actual, expected, slack, signed_zero=True))
        self.notes += raised.values()
        if torch.Size(tiles.shape).numel() == tiles.distinct:  # every element of the sample has its value alone
            expected, slack = judged_at(tiles.distinct)
            flat = [(p, v.reshape(-1)) for p, v in sample_leaves]
            place = _Place("sample", tiles.distinct, f"the sample's shape {list(tiles.shape)}")
            verdicts.append(self.compare(place, flat, expected, slack, signed_zero=True))
        return self.outcome(verdicts, reference="length 1 (the element alone)")

    # --- reductions --------------------------------------------------------------------------

    def reduction(self) -> Outcome:
        others = [p for p in self.prepared.tensors if p != "input"]
        if "input" not in self.prepared.tensors or others:
            raise _Skip("only a reduction of one input tensor is batched" + (f" (it also takes {', '.join(others)})" if others else ""))
        x = self.prepared.tensors["input"]
        if x.dim() == 0 or x.numel() == 0:
            raise _Skip("its input is a scalar or empty: there is no row to batch")
        reduced = _reduced_dims(self, {"input": x})
        if not reduced or any(dims is None for dims in reduced.values()):
            raise _Skip("it reduces every element: a batch of rows would be reduced with them")
        signs = {d < 0 for dims in reduced.values() for d in dims}
        if len(signs) != 1:
            raise _Skip("its reduced dims mix negative and non-negative indices: no new dim keeps them meaning the same")
        front = signs == {True}  # negative dims keep their meaning under a new first dim, others under a new last one
        wanted = {name: tuple(sorted(_normal(d, x.dim()) + front for d in dims)) for name, dims in reduced.items()}
        self.detail = f"rows stacked along a {BATCH_FRONT if front else BATCH_BACK}; "
        counts = lengths.row_counts(self.case.device)
        rows = lengths.rows(x, max(counts))
        alone = [calls.leaves(self.call({"input": layouts.apply("contiguous", r)})) for r in rows]
        for leaves_ in alone:
            if not all(isinstance(v, torch.Tensor) for _, v in leaves_):
                raise _Skip("its result is not made of tensors")
        widest = lengths.batched(rows, front=front, rows_inner=False)
        if _reduced_dims(self, {"input": widest}, rank=x.dim() + 1) != wanted:  # the dims depend on the rank alone
            raise _Skip("with a batch dim added the kernel reduces other dims: its rows are not independent")
        # the kernel's dims are not the call's: a composite op (norm 'nuc' over [1, 2] sums
        # singular values over -1) can keep the kernel's meaning while the call's dims shift.
        # A batch of one row must give the row's own result, or the batch is not the call's
        one = calls.leaves(self.call({"input": lengths.batched(rows[:1], front=front, rows_inner=False)}))
        if [tuple(v.shape) for _, v in one] != [tuple(lengths.stack_rows([v], front=front).shape) for _, v in alone[0]] or any(
                cmp.compare_leaf(path, lengths.row_of(v, 0, front=front), e, tolerance=self.tolerance) is not None
                for (path, v), (_, e) in zip(one, alone[0])):
            raise _Skip("a batch of one row does not give the row's own result: the call's dims change meaning with a batch dim")
        widest_judged = calls.Judged(calls.with_tensors(self.prepared, {"input": widest}), self.call({"input": widest}),
                                     override=self.subject.override, function_name=self.function_name, op=self.op)
        verdicts = []
        for k in counts:
            expected = [(path, lengths.stack_rows([a[i][1] for a in alone[:k]], front=front)) for i, (path, _) in enumerate(alone[0])]

            def slack(jumps: bool, k=k) -> dict:
                return {p: v.narrow(0 if front else v.dim() - 1, 0, k) for p, v in self.slack_of(widest_judged, jumps).items()}

            for rows_inner in (False, True):
                batch = lengths.batched(rows[:k], front=front, rows_inner=rows_inner)
                place = _Place("inner" if rows_inner else "outer", k, f"a batch of {k} rows ({'innermost' if rows_inner else 'outermost'} in memory)")
                verdicts.append(self.compare(place, calls.leaves(self.call({"input": batch})), expected, slack, signed_zero=False))
        return self.outcome(verdicts, reference="each row alone")

    # --- judging -------------------------------------------------------------------------------

    def compare(self, place: _Place, actual, expected, slack, *, signed_zero: bool) -> _Verdict:
        """One configuration's leaves against the same values alone (see the policy in the design note)."""
        label = place.label
        if [p for p, _ in actual] != [p for p, _ in expected]:
            raise _Skip(f"at {label} the result has other parts ({[p for p, _ in actual]})")
        differing, hard, ulps, nan_bits = False, None, 0, False
        for (path, a), (_, e) in zip(actual, expected):
            if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
                raise _Skip(f"at {label} {path} is not shaped like the elements alone (not elementwise)")
            if cmp.compare_leaf(path, a, e, tolerance=self.tolerance, bitwise=True) is None:
                continue
            differing = True
            changed = calls.class_change(a, e, signed_zero=signed_zero)
            if bool(changed.any()) and hard is None:
                hard = self._class_mismatch(path, a, e, changed)
            if a.is_floating_point() or a.is_complex():
                ulps = max(ulps, int(calls.ulps(a, e).max()))
                nan_bits |= bool((torch.isnan(a.cpu()) & torch.isnan(e.cpu()) & ~bits_equal(a, e)).any())
        if not differing:
            return _Verdict(place)
        if hard is None:
            found = cmp.compare(actual, expected, tolerance=self.tolerance)
            for jumps in (False, True):  # as the judge does: the jump probe only if needed
                if found:
                    found = cmp.compare(actual, expected, tolerance=self.tolerance, slack=slack(jumps) or None)
            hard = found[0] if found else None
        return _Verdict(place, hard, ulps, nan_bits)

    def _class_mismatch(self, path, a, e, changed) -> Mismatch:
        flat = int(changed.reshape(-1).to(torch.uint8).argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
        tol = self.tolerance(a.dtype)
        return Mismatch(path=path, attribute="values", expected=_fmt(e.reshape(-1)[flat]), actual=_fmt(a.reshape(-1)[flat]),
                        mismatched=int(changed.sum()), numel=a.numel(), worst_index=index, max_abs_err=None,
                        atol=tol.atol if a.is_floating_point() or a.is_complex() else 0.0,
                        rtol=tol.rtol if a.is_floating_point() or a.is_complex() else 0.0, allowed=0.0)

    def outcome(self, verdicts: list[_Verdict], *, reference: str) -> Outcome:
        bad = [v for v in verdicts if v.mismatch is not None]
        if not bad:
            noisy = [v for v in verdicts if v.ulps or v.nan_bits]
            parts = []
            if any(v.ulps for v in noisy):
                worst = max(noisy, key=lambda v: v.ulps)
                parts.append(f"bits differ by up to {worst.ulps} ULP between {worst.place.label} and {reference}")
            nans = [v for v in noisy if v.nan_bits]
            if nans:
                parts.append(f"NaNs differ in sign or payload bits in {nans[0].place.label}" + (f" and {len(nans) - 1} more" if len(nans) > 1 else ""))
            reason = f"{'; '.join(parts)}, within tolerance ({len(noisy)} of {len(verdicts)} configurations)" if parts else ""
            reason = "; ".join(part for part in (reason, *self.notes) if part)
            return Outcome(case=self.case, status="pass", reason=reason)
        m = bad[0].mismatch
        at = f" {list(m.worst_index)}" if m.worst_index else ""
        good = [v for v in verdicts if v.mismatch is None]
        summary = (f"{self.name()} gives an element another value in {bad[0].place.label} than in {reference}: "
                   f"{m.path}{at} is {m.actual} there and {m.expected} alone; wrong {_places(bad)}"
                   + (f"; right {_places(good)}" if good else ""))
        spec = call.call_spec(self.prepared, calls.ran(self.prepared), self.function_name)
        finding = calls.finding(self.case, kind="size_variance", reference="size", op=self.op, summary=summary, mismatch=m,
                                call_spec=spec, detail=self.detail + "wrong in: " + "; ".join(v.place.label for v in bad))
        return Outcome(case=self.case, status="finding", findings=(finding,))


def _form_words(form: str, n: int | str, first: str) -> str:
    """A layout form at length ``n``: "strided length 9 (every other element)"; ``n`` a string: several lengths."""
    before, after = lengths.FORM_WORDS[form]
    many = isinstance(n, str) and "," in n
    return f"{before}length{'s' * many} {n}{after.format(n='n' if many else n, first=first)}"


def _places(verdicts: list[_Verdict]) -> str:
    """The configurations in a few words: "at lengths 8, 9, 16 and at strided lengths 9, 17 (every other element)
    and at storage offset 3", "in batches of 9, 17 rows"."""
    kinds = {v.place.kind for v in verdicts}
    sizes = sorted({v.place.size for v in verdicts if v.place.kind in ("length", "outer", "inner")})
    parts = []
    if "length" in kinds:
        parts.append(f"at length{'s' if len(sizes) > 1 else ''} {', '.join(map(str, sizes))}")
    for form in lengths.FORM_WORDS:
        of_form = [v for v in verdicts if v.place.kind == form]
        if of_form:
            n = ", ".join(map(str, sorted({v.place.size for v in of_form})))
            parts.append("at " + _form_words(form, n, of_form[0].place.argument))
    if kinds & {"outer", "inner"}:
        only = "" if {"outer", "inner"} <= kinds else f" (rows {'innermost' if 'inner' in kinds else 'outermost'} in memory only)"
        parts.append(f"in batches of {', '.join(map(str, sizes))} rows{only}")
    parts += [v.place.label.removeprefix(f"length {v.place.size} ") if v.place.kind == "offset" else f"in {v.place.label}"
              for v in verdicts if v.place.kind in ("offset", "sample")]
    return " and ".join(parts)


def _normal(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


class _ReducedDims(TorchDispatchMode):
    """Records the dims each reduction kernel of a call is handed (None: every dim)."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, tuple[int, ...] | None] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tag = getattr(torch.Tag, "reduction", None)
        if tag is not None and tag in func.tags:
            values = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
            dim = values.get("dim")
            if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
                self.found[str(func)] = None
            else:
                self.found[str(func)] = tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)
        return func(*args, **kwargs)


def _reduced_dims(check: _Check, tensors: dict, *, rank: int | None = None) -> dict:
    """Reduction kernel -> the dims it was handed (as given; normalised to ``rank`` and sorted when given)."""
    mode = _ReducedDims()
    with mode:
        check.call(tensors)
    if rank is None:
        return mode.found
    return {name: (None if dims is None else tuple(sorted(_normal(d, rank) for d in dims))) for name, dims in mode.found.items()}


def _fmt(x: torch.Tensor) -> str:
    value = x.item()
    if isinstance(value, float):
        return "-0.0" if value == 0 and str(value).startswith("-") else f"{value:.9g}"
    if isinstance(value, complex):
        return f"({value.real:.9g}{value.imag:+.9g}j)"
    return str(value)


def repro(finding, torch_version: str) -> str | None:
    from .sizes_repro import script

    return script(finding, torch_version)
