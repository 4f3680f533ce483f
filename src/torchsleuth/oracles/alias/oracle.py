"""The ``alias`` oracle: a call whose arguments alias must raise or give the unaliased answer.

Design note. The references and contracts give every tensor a storage of its
own. Users do not: ``x += x.T``, ``torch.mm(a, b, out=a)``,
``torch.sort(x, out=(t, t))``. This oracle makes the aliased call on the
sample's values and judges what came back. Forms, each planned only where it
is possible (``applicable``), one case per form and argument:

* ``shared-out``: one tensor passed for two outputs of a multi-output op
  (the first pair of outputs with the same shape and dtype);
* ``out-is-input``: ``out=`` the very tensor passed as an input (same shape
  and dtype): for a pointwise op this is a legitimate in-place computation;
* ``out-overlaps-input``: ``out=`` starts at the second element of an input
  of its dtype, in the input's storage (partial overlap);
* ``inplace-other-is-self``: an in-place op's other argument is self itself;
* ``inplace-other-views-self``: the other argument is a view of self's
  storage starting one element before self (partial overlap);
* ``inplace-other-transposes-self``: the other argument is self's transpose
  (``x.add_(x.mT)``; self square in its last two dims).

In each partial form the written tensor starts one element after the read
one, so a kernel that streams forward clobbers an element before it reads
it. The oracle name carries the form and the two paths,
``alias:<form>:<written>=<read>`` (``alias:out-overlaps-input:out=args[0]``),
so a case replays from its id.

What is right. Raising is always right (PyTorch refuses partial overlap with
"unsupported operation: some elements of the input tensor and the written-to
tensor refer to a single memory location"). If the call returns, every
written tensor must equal the op's functional result on unaliased copies of
the values the arguments held before the call (arguments are read before
anything is written: ``x.add_(y) == x + y`` with ``y`` as it was), within the
judge's tolerance rule (judge.tolerance: the table, widened by the op's
measured sensitivity only where the table fails), and no storage element the
written views do not cover may change (in a shared storage that is the
read argument's uncovered elements and the guards after the views).

Two outputs in one tensor. PyTorch's policy is to raise when two outputs
share memory. If the op returns anyway, that is a finding unless its two
results are equal (within the tolerance rule), since the tensor then
silently holds one of them for both; when they are equal the tensor must
hold that result entirely. The
out= contract is that each result is written to its tensor; written one after
the other, each whole, the tensor ends up holding whichever came last, and
the order is the kernel's business. Anything else (some elements of each
result, or values neither has) means the kernel interleaved the two writes
or read back its own half-written output: the user's tensor holds a value
that no result has, silently.

Blame. A wrong answer is charged to aliasing only if the same call on
unaliased copies (same variant: in-place on a clone, out= into fresh tensors)
gives the functional result; otherwise the case is skipped with that reason,
since the in-place and out= contracts already report that bug. Ops whose
values cannot be compared (random, uninitialized, storage-defined: see
run.facts) are skipped.

One finding per case, kind ``alias_mismatch`` against the ``alias``
reference: wrong values first, else writes outside the written views. Its
``Detail`` record (detail.py: the form, the worker's threads, the --import
modules) is what the repro script (script.py) reads back; the script
rebuilds the aliased storage exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import torch

from ...cases import opinfo
from ...cases.records import VARIANT_WORDS, Case, Unit
from ...judge import compare as cmp
from ...judge.context import Context, changed
from ...judge.verdict import one_line
from ...judge.plugin import Oracle, encode_detail
from ...judge.records import Finding, Mismatch, Outcome
from ...run import call, tree
from ...run.facts import STORAGE_DEFINED, Facts
from ...run.facts import facts as read_facts
from ...run.imports import loaded
from ...run.references import References
from ...run.samples import samples_of
from .detail import Detail
from .forms import Aliased, Form, Meta, aliased, applicable, metas, plain, unaliased
from .script import script

DESCRIPTION = ("aliased arguments (two outputs in one out= tensor, out= on or overlapping an input, "
               "in-place with another argument viewing self) must raise or give the unaliased result")

KIND, REFERENCE = "alias_mismatch", "alias"


def plan(unit: Unit, variant: str, sample: int, option: str = "") -> list[str]:
    if variant not in ("inplace", "out"):
        return []
    s = samples_of(unit.op, unit.dtype)[sample]
    inputs = metas(tree.call_leaves(*call.sample_call(s, "cpu")))
    outputs = _outputmetas(unit.op, unit.dtype, sample) if variant == "out" else {}
    if inputs is None or outputs is None:
        return []
    return [form.oracle for form in applicable(variant, inputs, outputs)]


@functools.lru_cache(maxsize=64)
def _outputmetas(op: str, dtype: str, sample: int) -> dict[str, Meta] | None:
    """Shapes and dtypes of the functional result, from one call on the CPU (None: not all tensors)."""
    s = samples_of(op, dtype)[sample]
    args, kwargs = call.sample_call(s, "cpu")
    args, kwargs = tree.replace_call(args, kwargs, {p: t.detach().clone() for p, t in tree.call_leaves(args, kwargs).items()})
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            call.seed("cpu")
            result = opinfo.functions(opinfo.get(op))["functional"](*args, **kwargs)
    except Exception:
        return None
    return metas(dict(tree.output_leaves(result)))


# --- judging ------------------------------------------------------------------------------


class _Seen:
    """What judge.context.Context reads of a case, for an aliased call (Context's evidence)."""

    def __init__(self, case: Case, refs: References, facts: Facts, spec, op: str):
        self.case, self.refs, self.facts = case, refs, facts
        self.prepared = refs.base  # the unaliased values: what tie-breaking canonicalisers look at
        self.op = op
        self._spec = spec

    def call_spec(self):
        return self._spec


def run(subject) -> Outcome:
    case = subject.case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resize warnings of a shared out=, deprecations: not findings
        return _judge(subject, Form.parse(case.oracle))


def _skip(case: Case, reason: str, status: str = "skip") -> Outcome:
    return Outcome(case=case, status=status, reason=reason)


def _judge(subject, form: Form) -> Outcome:
    case = subject.case
    if case.layouts:  # a neighbour the diagnosis tries: aliasing decides the layout here
        return _skip(case, "the alias oracle lays its tensors out itself (contiguous, sharing memory); layouts are not applied")
    base = subject.base()  # the functional call on the sample's values, contiguous
    if not base.contiguous.ok:
        return _skip(case, "the contiguous reference raised: " + one_line(base.contiguous.error), "raised")
    facts = read_facts(base.trace, base.base.tensors, base.contiguous.value, fallback=case.op)
    if facts.random or facts.uninitialized or case.op.split(".")[0] in STORAGE_DEFINED:
        what = "random" if facts.random else "uninitialized" if facts.uninitialized else "defined by storage"
        return _skip(case, f"values {what}: an aliased call cannot be compared with an unaliased one")
    inputs = metas(tree.call_leaves(*call.sample_call(subject.sample, case.device)))
    outputs = metas(dict(tree.output_leaves(base.contiguous.value))) if case.variant == "out" else {}
    if inputs is None or outputs is None or form not in applicable(case.variant, inputs, outputs):
        return _skip(case, f"{form.words()} is not possible for this sample")

    made = aliased(form, subject, base.contiguous.value)
    prepared = made.prepared
    before = call.snapshot(prepared.tensors)
    meta = {p: call.metadata(t) for p, t in prepared.tensors.items()}
    inputs_only = {k: v for k, v in prepared.kwargs.items() if k != "out"}
    values = {p: prepared.tensors[p].detach().clone() for p in tree.call_leaves(prepared.args, inputs_only)}
    refs = base if case.variant == "out" else _references(subject, prepared, values)
    if not refs.contiguous.ok:
        return _skip(case, "the functional call on the aliased values raised: " + one_line(refs.contiguous.error), "raised")
    try:
        call.compute(prepared)
        call.synchronize(case.device)
    except Exception as e:  # PyTorch refused the aliasing: always right
        return _skip(case, one_line(e), "raised")

    expected = refs.contiguous.value
    actual = _actual(case, made, expected)
    if actual is None:
        return _skip(case, "the functional result does not have self's structure")
    shared = (form.written, form.read) if form.name == "shared-out" else ()
    spec = call.call_spec(prepared, call.Ran(before=before, meta=meta), opinfo.public_name(subject.entry, case.variant))
    spec = dataclasses.replace(spec, tensors=tuple(dataclasses.replace(t, layout=made.layouts.get(t.path, t.layout)) for t in spec.tensors))
    seen = _Seen(case, refs, facts, spec, op="")
    ctx = Context(seen, subject.override)
    wrong = _wrong_values(ctx, actual, expected, shared)
    outside = _outside_writes(prepared, made.written, before, meta)
    if not wrong and outside is None:
        return Outcome(case=case, status="pass")

    # blame: the same call without aliasing must be right, or this is not aliasing's bug
    try:
        plain, plain_before, plain_meta, writes = unaliased(made, values)
    except Exception as e:
        return _skip(case, f"the same call on unaliased copies raised ({one_line(e)}): aliasing cannot be blamed")
    if form.read in writes:  # two writes to one memory, both by contract: no single right answer
        return _skip(case, f"the call writes {form.read} itself (unaliased too), "
                           "so aliasing it with a written tensor has no single right answer")
    plain_wrong = _wrong_values(ctx, _actual(case, plain, expected), expected, ())
    if wrong and plain_wrong:
        return _skip(case, f"the same call on unaliased copies is wrong too ({plain_wrong[0].describe()}): "
                           "the in-place and out= contracts report that, not aliasing")
    if outside is not None and _outside_writes(plain.prepared, plain.written, plain_before, plain_meta) is not None:
        outside = None  # it writes outside its views unaliased too: the storage contract reports that
    if not wrong and outside is None:
        return Outcome(case=case, status="pass", reason="writes outside the written views, aliased or not: not aliasing's bug")
    seen.op = _traced_op(form, subject, base.contiguous.value) or facts.op
    detail = _detail(form)
    ctx.report(KIND, REFERENCE, _summary(ctx, form, wrong, outside, shared), wrong[0] if wrong else outside,
               detail=detail.words(), data=encode_detail(detail))
    return Outcome(case=case, status="finding", findings=tuple(ctx.findings))


def _references(subject, prepared: call.Prepared, values: dict[str, torch.Tensor]) -> References:
    """The functional call on unaliased copies of the aliased call's input values (in-place forms)."""
    functional = dataclasses.replace(subject.case, variant="functional", oracle="")
    args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, values)
    base = call.Prepared(case=functional, function=opinfo.functions(subject.entry)["functional"], args=args, kwargs=kwargs,
                         tensors=values, written=frozenset(), process=prepared.process)
    return References(base, getattr(torch, subject.case.dtype), seed=subject.case.sample)


def _actual(case: Case, made: Aliased, expected: Any) -> Any:
    """The written tensors, shaped like the functional result (None: self cannot hold it)."""
    tensors = made.prepared.tensors
    if case.variant == "inplace":
        leaves = cmp.flatten(expected)
        if len(leaves) != 1 or not isinstance(leaves[0][1], torch.Tensor):
            return None
        return tensors["input"]
    return tree.replace(plain(expected), "out", {p: tensors[p] for p in made.written})


def _wrong_values(ctx: Context, actual: Any, expected: Any, shared: tuple[str, ...]) -> list[Mismatch]:
    """Mismatches of the written tensors against the functional result (the table first, then the rule).

    A tensor shared by two outputs is right if it equals either output's result.
    """
    inplace = ctx.case.variant == "inplace"
    if inplace:  # self keeps its dtype, whatever the functional result's (one tensor: _actual saw to it)
        actual, expected = actual.detach(), cmp.flatten(expected)[0][1].to(actual.dtype)
    found = cmp.compare(cmp.flatten(actual), cmp.flatten(expected), tolerance=ctx.tolerance, check_dtype=False)
    if found:
        found = ctx.differs(actual, expected, scale=2.0, check_dtype=False)
    if inplace:
        found = [dataclasses.replace(m, path="input") for m in found]
    if shared and not (shared[0] in {m.path for m in found} and shared[1] in {m.path for m in found}):
        found = [m for m in found if m.path not in shared]  # it holds one of the two results entirely
        if _results_differ(ctx, expected, shared):
            # PyTorch's policy for outputs that share memory is to raise: returning one result for both is silent
            found.insert(0, Mismatch(path=shared[1], attribute="aliasing", expected="an error (the two results differ)",
                                     actual=f"returned, one result in the tensor given for {shared[0]} and {shared[1]}"))
    elif shared:
        first, second = (next(m for m in found if m.path == p) for p in shared)
        both = dataclasses.replace(first, expected=f"{first.expected} ({shared[0]}'s result) or {second.expected} ({shared[1]}'s)")
        found = [both] + [m for m in found if m.path not in shared]
    return found


def _results_differ(ctx: Context, expected: Any, shared: tuple[str, ...]) -> bool:
    """Whether the two outputs a tensor was shared by have different results (beyond the tolerance rule)."""
    results = dict(cmp.flatten(expected))
    first, second = results.get(shared[0]), results.get(shared[1])
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor):
        return False
    if first.shape != second.shape or first.dtype != second.dtype:
        return True
    return bool(cmp.compare([(shared[0], first)], [(shared[0], second)], tolerance=ctx.tolerance, check_dtype=False))


def _outside_writes(prepared: call.Prepared, written: tuple[str, ...], before: dict, meta: dict) -> Mismatch | None:
    """Storage elements no written view covers that changed, in the storages the call writes."""
    storages: dict[int, list[str]] = {}
    for path in written:
        storages.setdefault(prepared.tensors[path].untyped_storage().data_ptr(), []).append(path)
    for paths in storages.values():
        first = paths[0]
        after = call.storage_of(prepared.tensors[first])
        if after.numel() != before[first].numel():
            continue  # the storage was replaced (a resize): the values say what went wrong
        covered = torch.zeros(after.numel(), dtype=torch.bool)
        for path in paths:
            shape, stride, offset = meta[path]
            if all(s > 0 for s in shape):
                covered[torch.arange(after.numel()).as_strided(shape, stride, offset).reshape(-1)] = True
        moved = changed(before[first], after.detach().cpu()) & ~covered
        if bool(moved.any()):
            pointer = prepared.tensors[first].untyped_storage().data_ptr()
            owners = [p for p, t in prepared.tensors.items() if p not in written and t.untyped_storage().data_ptr() == pointer]
            where = f"{owners[0]}'s storage" if owners else f"{first}'s storage"
            count = int(moved.sum())
            return Mismatch(path=owners[0] if owners else first, attribute="storage",
                            expected=f"{where} unchanged outside {', '.join(paths)}",
                            actual=f"{count} element(s) changed, first at storage index {int(moved.nonzero()[0])}",
                            mismatched=count, numel=int((~covered).sum()))
    return None


def _traced_op(form: Form, subject, expected: Any) -> str:
    """The aten op the aliased call computes with (traced on a rebuilt copy: never the judged call)."""
    again = aliased(form, subject, expected)
    try:
        return call.traced(again.prepared, again.prepared.tensors)[0].primary()
    except Exception:
        return ""


def _named(ctx: Context) -> str:
    """The op as a person names it: the aten op, with the catalog name when the call is a composite's."""
    probe = Finding(id="", kind=KIND, op=ctx.ev.op or ctx.case.op, opinfo=ctx.case.op, variant=ctx.case.variant,
                    dtype=ctx.case.dtype, device=ctx.case.device, reference=REFERENCE, case_id=ctx.case.id, layouts=(), summary="")
    return probe.name


def _summary(ctx: Context, form: Form, wrong: list[Mismatch], outside: Mismatch | None, shared: tuple[str, ...]) -> str:
    name, _, inner = _named(ctx).partition(" (")
    through = f" (through {inner.removesuffix(')')})" if inner else ""
    head = f"{name}{VARIANT_WORDS[ctx.case.variant]} [{ctx.case.dtype}]{through} with {form.words()} returns instead of raising"
    path = ("self" if ctx.case.variant == "inplace" else wrong[0].path) if wrong else ""
    if wrong and wrong[0].attribute == "aliasing":
        what = (f"although the results of {shared[0]} and {shared[1]} differ "
                "(outputs that share memory must raise: the tensor silently holds one of them)")
    elif wrong and shared and wrong[0].path == shared[0] and wrong[0].attribute == "values":
        what = (f"but the tensor holds neither result entirely "
                f"({wrong[0].mismatched} of {wrong[0].numel} elements differ from {shared[0]}'s)")
    elif wrong and wrong[0].attribute == "values":
        what = f"but {path} is wrong in {wrong[0].mismatched} of {wrong[0].numel} elements"
    elif wrong:
        what = f"but {path} has the wrong {wrong[0].attribute} ({wrong[0].actual}, expected {wrong[0].expected})"
    else:
        what = ""
    if outside is not None:
        writes = f"writes {outside.mismatched} storage element(s) of {outside.path} outside the written view"
        what = f"{what} and {writes}" if what else f"but {writes}"
    return f"{head} {what}"


def _detail(form: Form) -> Detail:
    """What the repro script needs of this case: the aliasing, and the worker's threads and --import modules."""
    return Detail(form=form, threads=torch.get_num_threads(), imports=loaded())


ORACLE = Oracle(name="alias", description=DESCRIPTION, cost="cheap", plan=plan, run=run, script=script)
