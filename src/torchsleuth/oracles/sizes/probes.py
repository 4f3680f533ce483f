"""The configurations of a ``sizes`` case: a pointwise op's lengths, offset and layout forms; a reduction's batches.

Design note. Each function makes the configurations of sizes.oracle's design
note from the sample's own values (run.lengths), computes the reference
(every value, or every row, alone) and hands each configuration to the
case's ``Check`` (sizes.judging) to judge; the check's ``outcome`` has the
last word. A configuration the oracle cannot make meaningfully raises
``Skip`` with the reason.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ...cases import layouts
from ...judge import calls
from ...judge import compare as cmp
from ...judge.verdict import one_line
from ...judge.records import Outcome
from ...run import lengths
from .detail import Detail
from .judging import Check, Place, Skip, form_words


def pointwise(check: Check) -> Outcome:
    """Every length, the offset, the layout forms and the sample's own shape, against each value alone."""
    sizes = lengths.lengths(check.case.device)
    tiles = lengths.tiling(check.prepared.tensors, max(sizes))
    if isinstance(tiles, str):
        raise Skip(tiles)
    sample_result = check.call(check.prepared.tensors)
    sample_leaves = calls.leaves(sample_result)
    for path, value in sample_leaves:
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tiles.shape:
            raise Skip(f"its result {path} does not have its arguments' broadcast shape: not elementwise")
    alone = [calls.leaves(check.call(tiles.alone(j))) for j in range(tiles.distinct)]
    reference = [(path, torch.cat([a[i][1].reshape(-1) for a in alone])) for i, (path, _) in enumerate(alone[0])]
    # the slack of each value, from the sample's own call: the same for the value wherever it sits
    sample = calls.Judged(check.prepared, sample_result, override=check.subject.override, function_name=check.function_name, op=check.op)

    def judged_at(n: int):
        at = tiles.positions(n)
        expected = [(path, values[at.to(values.device)]) for path, values in reference]

        def slack(jumps: bool) -> dict:
            return {p: v.reshape(-1)[:tiles.distinct][at] for p, v in check.slack_of(sample, jumps).items()}

        return expected, slack

    longest = tiles.longest
    configurations = [(Place("length", n, f"length {n}"), n, tiles.length(n)) for n in sizes]
    configurations.append((Place("offset", longest, f"length {longest} at storage offset {layouts.OFFSET}"),
                           longest, tiles.length(longest, "offset")))
    first = next(iter(tiles.tiled))
    configurations += [(Place(form, n, form_words(form, n, first), first), tiles.count(n, form), tiles.form(n, form))
                       for form in tiles.forms() for n in sizes if n > 1]
    verdicts, raised = [], {}
    for place, count, tensors in configurations:
        if place.kind in lengths.FORM_WORDS:
            try:  # a form that raises is loud, not this oracle's class: noted, and the form dropped
                actual = calls.leaves(calls.run(check.prepared, tensors))
            except Exception as e:
                raised.setdefault(place.kind, f"{place.label} raised: {one_line(e)}")
                continue
            grid = (place.size, lengths.COLUMNS)
            actual = [(p, v.reshape(-1) if isinstance(v, torch.Tensor) and tuple(v.shape) == grid else v) for p, v in actual]
        else:
            actual = calls.leaves(check.call(tensors))
        expected, slack = judged_at(count)
        verdicts.append(check.compare(place, actual, expected, slack, signed_zero=check.signed_zero))
    check.notes += raised.values()
    if torch.Size(tiles.shape).numel() == tiles.distinct:  # every element of the sample has its value alone
        expected, slack = judged_at(tiles.distinct)
        flat = [(p, v.reshape(-1)) for p, v in sample_leaves]
        place = Place("sample", tiles.distinct, f"the sample's shape {list(tiles.shape)}")
        verdicts.append(check.compare(place, flat, expected, slack, signed_zero=check.signed_zero))
    return check.outcome(verdicts, reference="length 1 (the element alone)", detail=Detail(reduction=False, sizes=sizes, signed_zero=check.signed_zero))


def reduction(check: Check) -> Outcome:
    """Batches of independent rows, both memory orders, against each row alone."""
    others = [p for p in check.prepared.tensors if p != "input"]
    if "input" not in check.prepared.tensors or others:
        raise Skip("only a reduction of one input tensor is batched" + (f" (it also takes {', '.join(others)})" if others else ""))
    x = check.prepared.tensors["input"]
    if x.dim() == 0 or x.numel() == 0:
        raise Skip("its input is a scalar or empty: there is no row to batch")
    reduced = _reduced_dims(check, {"input": x})
    if not reduced or any(dims is None for dims in reduced.values()):
        raise Skip("it reduces every element: a batch of rows would be reduced with them")
    signs = {d < 0 for dims in reduced.values() for d in dims}
    if len(signs) != 1:
        raise Skip("its reduced dims mix negative and non-negative indices: no new dim keeps them meaning the same")
    front = signs == {True}  # negative dims keep their meaning under a new first dim, others under a new last one
    wanted = {name: tuple(sorted(_normal(d, x.dim()) + front for d in dims)) for name, dims in reduced.items()}
    counts = lengths.row_counts(check.case.device)
    rows = lengths.rows(x, max(counts))
    alone = [calls.leaves(check.call({"input": layouts.apply("contiguous", r)})) for r in rows]
    for leaves_ in alone:
        if not all(isinstance(v, torch.Tensor) for _, v in leaves_):
            raise Skip("its result is not made of tensors")
    widest = lengths.batched(rows, front=front, rows_inner=False)
    if _reduced_dims(check, {"input": widest}, rank=x.dim() + 1) != wanted:  # the dims depend on the rank alone
        raise Skip("with a batch dim added the kernel reduces other dims: its rows are not independent")
    # the kernel's dims are not the call's: a composite op (norm 'nuc' over [1, 2] sums
    # singular values over -1) can keep the kernel's meaning while the call's dims shift.
    # A batch of one row must give the row's own result, or the batch is not the call's
    one = calls.leaves(check.call({"input": lengths.batched(rows[:1], front=front, rows_inner=False)}))
    if [tuple(v.shape) for _, v in one] != [tuple(lengths.stack_rows([v], front=front).shape) for _, v in alone[0]] or any(
            cmp.compare_leaf(path, lengths.row_of(v, 0, front=front), e, tolerance=check.tolerance) is not None
            for (path, v), (_, e) in zip(one, alone[0])):
        raise Skip("a batch of one row does not give the row's own result: the call's dims change meaning with a batch dim")
    widest_judged = calls.Judged(calls.with_tensors(check.prepared, {"input": widest}), check.call({"input": widest}),
                                 override=check.subject.override, function_name=check.function_name, op=check.op)
    verdicts = []
    for k in counts:
        expected = [(path, lengths.stack_rows([a[i][1] for a in alone[:k]], front=front)) for i, (path, _) in enumerate(alone[0])]

        def slack(jumps: bool, k=k) -> dict:
            return {p: v.narrow(0 if front else v.dim() - 1, 0, k) for p, v in check.slack_of(widest_judged, jumps).items()}

        for rows_inner in (False, True):
            batch = lengths.batched(rows[:k], front=front, rows_inner=rows_inner)
            order = "innermost" if rows_inner else "outermost"
            place = Place("inner" if rows_inner else "outer", k, f"a batch of {k} rows ({order} in memory)")
            verdicts.append(check.compare(place, calls.leaves(check.call({"input": batch})), expected, slack, signed_zero=False))
    return check.outcome(verdicts, reference="each row alone", detail=Detail(reduction=True, sizes=counts, front=front))


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


def _reduced_dims(check: Check, tensors: dict, *, rank: int | None = None) -> dict:
    """Reduction kernel -> the dims it was handed (as given; normalised to ``rank`` and sorted when given)."""
    mode = _ReducedDims()
    with mode:
        check.call(tensors)
    if rank is None:
        return mode.found
    return {name: (None if dims is None else tuple(sorted(_normal(d, rank) for d in dims))) for name, dims in mode.found.items()}
