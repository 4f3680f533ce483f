"""The ``large`` oracle's stretched forms: a reduction's longest dim tiled to 32767..65537, and 65535..65537 rows.

Design note (the whole of it is large/oracle.py's, "Reductions" and "Rows").
A stretched case is the case's own call with one dim of some of its
tensors tiled (search.edits' ``dim:PATH@D>L``), at most ``MAX_STRETCHED``
elements, and judged as the ops engine judges any case; its findings are
that stretched case's, replayed, shrunk and scripted as such. The rows form
first asks two small calls whether dim 0 is a batch of independent rows
(``_rows_differ``), and keeps a finding only where some row differs from
the same row of the sample's own call.
"""

from __future__ import annotations

import dataclasses

import torch

from ...judge import calls
from ...judge import compare as cmp
from ...judge.verdict import one_line
from ...judge.records import Outcome
from ...judge.tolerance import table
from ...run import call
from ...search import edits
from ...run.facts import of_references
from ...run.opclass import computation
from ...run.samples import samples_of

# Lengths a reduction's largest dim is stretched to, and the most elements that may make.
REDUCTION_LENGTHS = (32767, 32768, 32769, 65535, 65536, 65537)
MAX_STRETCHED = 1 << 22
# Rows a tensor's dim 0 is tiled to (CUDA's grid y and z stop at 65535).
ROW_COUNTS = (65535, 65536, 65537)


def rows(case, subject, rows: int) -> Outcome:
    """The case with ``rows`` rows, for an op the trace says is neither pointwise, random nor views only."""
    return passed_over_for(case, subject, "rows") or stretched(case, subject, rows, rows=True)


def passed_over_for(case, subject, what: str) -> Outcome | None:
    """Why the case's call gets no ``what`` (rows, a span): its contiguous call raises, or computes pointwise, randomly or
    nothing (views), or states its contract in storage (resize_as_ to 65536 rows makes uninitialized ones); else None."""
    refs, raised = calls.base(subject)
    if raised is not None:
        return raised
    kind = computation(refs.trace, subject.entry)
    if kind == "pointwise":
        return Outcome(case=case, status="skip", reason="pointwise: the element probes (large:2^31, ...) take pointwise ops")
    if kind != "reduction" and not kind.startswith("neither"):
        return Outcome(case=case, status="skip", reason=kind)
    if of_references(refs, case.op).storage_defined:
        return Outcome(case=case, status="skip", reason=f"its contract is stated in storage (as_strided, resize_): it has no {what}")
    return None


def stretched(case, subject, length: int, *, rows: bool = False) -> Outcome:
    """The case with a dim tiled to ``length``, judged as the engine judges any case.

    A reduction's input has its longest dim tiled; with ``rows``, dim 0 of
    the first tensors (of the case's sample, then the op's others) where
    that dim is a batch of rows (see the design note).
    """
    run_case = subject.replay
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
            stretch = tuple(edits.stretch(p, dim, length) for p in paths)
            longer = dataclasses.replace(case, sample=index, oracle="", edits=case.edits + stretch)
            judged = run_case(longer)
            reason = f"{longer.id}: {judged.reason}" if judged.reason else f"judged as {longer.id}"
            if rows and judged.findings and not _rows_differ(case, subject, sample, paths, x, length):
                # every row gets what the sample's own call gives it: whatever the judge saw there (the sample's
                # own error, or its randomly drawn slack's tail on one of 65536 copies), the row count did not cause it
                f = judged.findings[0]
                why = (f"{longer.id}: every one of the {length} rows equals the same row of the sample's own call; the {f.kind} "
                       f"against the {f.reference} reference there ({' '.join(f.summary.split())}) does not come from the row count")
                return Outcome(case=case, status="pass", reason=why)
            return Outcome(case=case, status=judged.status, reason=reason, findings=judged.findings)
    if not rows:
        return Outcome(case=case, status="skip", reason="no sample of the op has an input with a dim to stretch")
    if not passed_over:
        return Outcome(case=case, status="skip", reason="no sample of the op has a tensor of two dims or more")
    more = f"; {len(passed_over) - 2} more" if len(passed_over) > 2 else ""
    return Outcome(case=case, status="skip", reason=f"no sample of the op has a dim 0 of rows: {'; '.join(passed_over[:2])}{more}")


def _samples(case, subject):
    """(index, sample): the case's own (its edits applied), then, unless it has edits, the op's others."""
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
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)) or e.layout != torch.strided \
                or e.dim() == 0 or e.shape[0] == 0 or a.shape[1:] != e.shape[1:] or a.shape[0] * x.shape[0] != e.shape[0] * rows \
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
