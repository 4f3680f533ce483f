"""Contracts: what must hold of a call whatever its values are.

* readable: every tensor of the result has a storage that can be read (a
  kernel that corrupts its out= tensor can leave it invalid), and so has
  every snapshot the judge took of the call's storages, before and after it
  (host copies the call was never given: one left invalid means the call
  wrote over memory outside its tensors, torch's own bookkeeping of a
  storage among it);
* storage: nothing outside a view changes (``out_of_view_write``), and a
  tensor the call may only read keeps its values (``input_mutated``) unless
  an op's schema declares it written;
* in-place: the result lands in ``self`` (``dropped_write`` when elements of
  self keep their old value where the functional result says otherwise);
* out=: the result lands in ``out`` and ``out`` keeps its strides
  (``out_ignored``);
* storage-defined ops (``as_strided``, ``resize_``, ``set_``): the same call
  on a fresh copy of the same storage gives the same bits;
* random fills (``normal_``, ``uniform_``, ...): every element of self is
  drawn, whatever it held before, and holds a value the distribution can
  produce (``random_coverage``);
* draws: every element a random op draws is one its own parameters allow
  (``judge.draws``: ``mean`` exactly where ``std`` is 0, never a category of
  probability 0; ``random_coverage``), in every variant, layout and device.
"""

from __future__ import annotations

import torch

from ..cases import layouts, reach
from ..dtypes import is_inexact
from ..run.transfer import to_host
from . import compare as cmp
from . import draws as draw_rules
from . import random as random_oracle
from .context import Context, bits_equal, changed, renamed, same_bytes
from .records import Mismatch
from .tolerance import Tolerance

_EXACT = Tolerance(atol=0.0, rtol=0.0)


def unreadable(ctx: Context) -> bool:
    """A result or written tensor whose storage cannot be read (a kernel corrupted it); nothing else can be judged then."""
    written = [(path, ctx.ev.prepared.tensors[path]) for path in sorted(ctx.ev.prepared.written)]
    seen = set()
    for path, t in cmp.flatten(ctx.ev.ran.result) + written:
        if isinstance(t, torch.Tensor) and id(t) not in seen and not cmp.readable(t):
            seen.add(id(t))
            kind = "out_ignored" if ctx.case.variant == "out" else "mismatch"
            ctx.report(
                kind, "contract", f"{ctx.name()} returns {path} with a storage whose data pointer is invalid",
                Mismatch(path=path, attribute="storage", expected="a readable storage", actual="an invalid storage"),
            )
    for path, why in sorted((ctx.ev.ran.unreadable or {}).items()):
        ctx.report(
            "out_of_view_write", "contract",
            f"{ctx.name()} on {ctx.describe(path)} {path} writes over memory outside its tensors: {path}'s storage cannot be "
            f"read after the call ({why})",
            Mismatch(path=path, attribute="storage", expected="a readable storage after the call", actual="unreadable: " + why),
        )
    for path in sorted(ctx.ev.prepared.tensors):
        snapshots = [(when, taken.get(path)) for when, taken in (("before", ctx.ev.ran.before), ("after", ctx.ev.ran.after)) if taken]
        when = next((when for when, t in snapshots if isinstance(t, torch.Tensor) and not cmp.readable(t)), None)
        if when is not None:
            ctx.report(
                "out_of_view_write", "contract",
                f"{ctx.name()} on {ctx.describe(path)} {path} writes over memory outside its tensors: the copy of {path}'s storage "
                f"taken {when} the call, which the call was never given, has an invalid data pointer after it",
                Mismatch(path=path, attribute="storage", expected="the host copies of its storages untouched", actual="a copy left invalid"),
            )
    return bool(ctx.findings)


def storage(ctx: Context) -> None:
    ev = ctx.ev
    for path in ev.prepared.tensors:
        before, after = ev.ran.before[path], ev.ran.after[path]
        if before.numel() != after.numel():
            continue  # the storage was swapped (set_, resize_): judged by values
        if same_bytes(before, after):
            continue  # most storages: the inputs the call only read
        moved = changed(before, after)
        if not bool(moved.any()):
            continue
        inside = ev.view_mask(path)
        outside = moved & ~inside
        if bool(outside.any()):
            where = int(outside.nonzero()[0])
            ctx.report(
                "out_of_view_write", "contract",
                f"{ctx.name()} writes outside the view of {path} ({ctx.describe(path)}): "
                f"{int(outside.sum())} storage element(s) changed, first at storage index {where}",
                Mismatch(path=path, attribute="storage", expected="unchanged guard values", actual=f"{int(outside.sum())} changed",
                         mismatched=int(outside.sum()), numel=int((~inside).sum())),
            )
        if path not in ev.prepared.written and bool((moved & inside).any()) and not ev.written_by_schema(path):
            count = int((moved & inside).sum())
            ctx.report(
                "input_mutated", "contract",
                f"{ctx.name()} changes the argument {path} ({ctx.describe(path)}), which it should only read",
                Mismatch(path=path, attribute="values", expected="unchanged", actual=f"{count} element(s) changed", mismatched=count, numel=int(inside.sum())),
            )


def _wholesale(missed: torch.Tensor) -> bool:
    """Whether at least half of self's elements (and two or more) kept their old bits where the reference wrote new ones."""
    count = int(missed.sum())
    return count >= 2 and 2 * count >= missed.numel()


def same_layout(ctx: Context) -> None:
    """Storage-defined ops: the call again on the same storage layout, bit for bit."""
    reference = ctx.ev.same_layout
    if not reference.ok:
        return
    result = ctx.ev.ran.result
    if _grew(ctx, result):
        ctx.notes.append("the call grew the storage; the new elements are uninitialized, so only metadata is compared")
        found = [m for m in cmp.compare(cmp.flatten(result), cmp.flatten(reference.value), tolerance=ctx.tolerance) if m.attribute != "values"]
    else:
        found = cmp.compare(cmp.flatten(result), cmp.flatten(reference.value), tolerance=ctx.tolerance, bitwise=True)
    if found and ctx.ev.compiled:  # the reference is eager's call: compiled and eager disagree on the same storage
        ctx.report("mismatch", "determinism", f"{ctx.name()} on {ctx.placed()} differs from eager on a copy of the same storage", found[0])
    elif found:
        ctx.report("nondeterministic", "determinism", f"{ctx.name()} on {ctx.placed()} gives a different result on a copy of the same storage", found[0])


def _grew(ctx: Context, result) -> bool:
    before = max((s.numel() * s.element_size() for s in ctx.ev.ran.before.values()), default=0)
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() > before for _, t in cmp.flatten(result))


def inplace(ctx: Context) -> None:
    ev = ctx.ev
    targets = [p for p in ev.prepared.tensors if p in ev.prepared.written]
    expected_leaves = cmp.flatten(ev.refs.contiguous.value)
    if len(expected_leaves) != len(targets):
        ctx.notes.append("the functional result does not have self's structure")
        return
    if ctx.facts.random_fill:
        return _random_fill(ctx, targets)
    if ctx.facts.random or ctx.facts.uninitialized or (ctx.facts.repeated_writes and ctx.case.layouts):
        return  # values not comparable; the storage contracts still held
    if ctx.facts.storage_defined:
        return same_layout(ctx)
    for path, (_, expected) in zip(targets, expected_leaves):
        t = ev.prepared.tensors[path]
        if not isinstance(expected, torch.Tensor):
            continue
        if expected.shape != t.shape or tuple(t.shape) != ev.ran.meta[path][0]:
            ctx.notes.append(f"in-place result shape {list(expected.shape)} is not self's {list(t.shape)}")
            continue
        found = ctx.differs(t.detach(), expected.detach().to(t.dtype), scale=2.0, check_dtype=False)
        before = ev.before_view(path)
        written, wanted = to_host([t.detach(), expected.detach()])
        missed = bits_equal(written, before) & ~bits_equal(wanted.to(t.dtype), before)
        if bool(missed.any()):
            missed &= ~_fixed_points(ctx, targets.index(path), before)
        if not found and _wholesale(missed):
            # every write dropped, of values too small for the tolerance to see (Adam's
            # exp_avg_sq gains (1 - beta2) * grad**2, far below atol): the bits say it
            found = [cmp.compare_leaf(path, t.detach(), expected.detach().to(t.dtype), tolerance=lambda dtype: _EXACT, bitwise=True)]
        if not found or found[0] is None:
            continue
        mismatch = renamed(found[0], path)
        if bool(missed.any()):
            ctx.report(
                "dropped_write", "layout",
                f"in-place {ctx.short()} on {ctx.describe(path)} self leaves {int(missed.sum())} of {t.numel()} element(s) of self unchanged",
                mismatch,
            )
        else:
            ctx.report("mismatch", "layout", f"in-place {ctx.short()} writes wrong values into {ctx.describe(path)} self", mismatch)
    returned_is(ctx, targets, "in-place", "mismatch")


def _fixed_points(ctx: Context, leaf: int, before: torch.Tensor) -> torch.Tensor:
    """Where self's old value is what the op gives there exactly (float64, rounded to self's dtype; gelu(inf) = inf): an
    element left as it was there is written right, not dropped, whatever the contiguous call wrote."""
    reference = ctx.ev.refs.float64
    leaves = cmp.flatten(reference.value) if reference.ok else []
    exact = cmp.dense(leaves[leaf][1]) if leaf < len(leaves) else None
    if not isinstance(exact, torch.Tensor) or exact.shape != before.shape:
        return torch.zeros(before.shape, dtype=torch.bool)
    exact = exact.detach().cpu().to(before.dtype)
    fixed = bits_equal(exact, before)
    if before.is_floating_point() or before.is_complex():
        fixed |= (exact == before) | (torch.isnan(exact) & torch.isnan(before))
    return fixed


def _random_fill(ctx: Context, targets: list[str]) -> None:
    ev = ctx.ev
    for path in targets:
        values = ev.prepared.tensors[path].detach().cpu()
        if ev.second is not None:
            other = ev.second.after[path].cpu().as_strided(*ev.second.meta[path])
            first_fill, second_fill = ev.prefill
            unwritten = bits_equal(values, torch.full_like(values, first_fill)) & bits_equal(other, torch.full_like(other, second_fill))
            if bool(unwritten.any()):
                count = int(unwritten.sum())
                ctx.report(
                    "random_coverage", "contract",
                    f"random in-place {ctx.short()} on {ctx.describe(path)} self leaves {count} of {values.numel()} element(s) unwritten",
                    Mismatch(path=path, attribute="values", expected="every element drawn", actual=f"{count} kept their old value",
                             mismatched=count, numel=values.numel()),
                )
                continue
            if not bool(bits_equal(values, other).all()):
                mismatch = cmp.compare_leaf(path, values, other, tolerance=ctx.tolerance, bitwise=True)
                ctx.report("nondeterministic", "determinism",
                           f"{ctx.name()} draws different values from the same seed on {ctx.describe(path)} {path}", mismatch)
                continue
        problem = random_oracle.implausible(ctx.facts.op, values, ev.prepared.args, ev.prepared.kwargs)
        if problem:
            ctx.report("random_coverage", "contract", f"random in-place {ctx.short()} on {ctx.describe(path)} self draws {problem}")


def draws(ctx: Context) -> None:
    """The result of a random op's kernel against what its parameters allow (judge.draws), when that op is the call's
    last computing one (the call returns its draw) and nothing else found the case wrong."""
    ev = ctx.ev
    recorded = ev.refs.trace.draws
    if ctx.findings or ctx.case.variant == "backward" or not recorded or recorded[-1][0] != ctx.facts.op:
        return
    op, params, sources = recorded[-1]
    if ctx.case.variant in ("inplace", "out"):
        targets = [p for p in ev.prepared.tensors if p in ev.prepared.written]
        drawn = [(p, ev.prepared.tensors[p]) for p in targets[:1]]
        # the repro calls the overload this variant reaches, with the written tensor as its self or out
        called = op if op.split(".")[1].endswith("_") else reach.sibling(op, ctx.case.variant)
        if called is None or not drawn:
            return
        sources = {**sources, ("self" if ctx.case.variant == "inplace" else "out"): drawn[0][0]}
    else:
        called = op
        drawn = [(p, t) for p, t in cmp.flatten(ev.ran.result) if isinstance(t, torch.Tensor)][:1]
    for path, t in drawn:
        wrong = draw_rules.ruled_out(op, params, t)
        if wrong:
            what, count, numel = wrong
            ctx.report("random_coverage", "contract", f"{ctx.name()} on {ctx.placed()} draws {what}: {count} of {numel} element(s)",
                       Mismatch(path=path, attribute="draws", expected="draws its parameters allow", actual=what,
                                mismatched=count, numel=numel),
                       data=draw_rules.encode(called, params, sources, rule=op))


def out(ctx: Context) -> None:
    ev = ctx.ev
    out_paths = [p for p in ev.prepared.tensors if p in ev.prepared.written]
    for path in out_paths:
        t = ev.prepared.tensors[path]
        shape, stride, offset = ev.ran.meta[path]
        if tuple(t.shape) != shape or t.storage_offset() != offset or not _same_strides(shape, stride, t.stride()):
            ctx.report(
                "out_ignored", "contract",
                f"{ctx.short()}(out=) restrides {ctx.describe(path)} {path}: strides {list(stride)} became {list(t.stride())}",
                Mismatch(path=path, attribute="stride", expected=str(list(stride)), actual=str(list(t.stride()))),
            )
            return
    if ctx.facts.uninitialized or ctx.facts.random or (ctx.facts.repeated_writes and ctx.case.layouts):
        return
    expected = cmp.flatten(ev.refs.contiguous.value)
    actual = [(p, ev.prepared.tensors[p].detach()) for p, _ in expected if p in ev.prepared.tensors]
    if len(actual) != len(expected):
        return
    found = ctx.differs(dict(actual), dict(expected), scale=2.0)
    for mismatch in found:
        t = ev.prepared.tensors[mismatch.path].detach().cpu()
        unwritten = torch.isnan(t) if is_inexact(t.dtype) else t == layouts.poison(t.dtype)
        where = f"{ctx.describe(mismatch.path)} {mismatch.path}"
        if mismatch.attribute == "values" and bool(unwritten.any()):
            ctx.report("out_ignored", "layout", f"{ctx.short()}(out=) leaves {int(unwritten.sum())} of {t.numel()} element(s) of {where} unwritten", mismatch)
        else:
            ctx.report("mismatch", "layout", f"{ctx.short()}(out=) writes wrong values into {where}", mismatch)
    if not found:
        returned_is(ctx, out_paths, "out=", "out_ignored")


def _same_strides(shape, before, after) -> bool:
    """Strides agree where they mean something: dims of size 1, and empty tensors, may have any."""
    return 0 in shape or all(size == 1 or b == a for size, b, a in zip(shape, before, after))


def returned_is(ctx: Context, paths: list[str], what: str, kind: str) -> None:
    """The call returns the very tensors it wrote (in-place self, out=)."""
    values = [v for _, v in cmp.flatten(ctx.ev.ran.result) if isinstance(v, torch.Tensor)]
    if len(values) != len(paths):
        return
    for path, returned in zip(paths, values):
        t = ctx.ev.prepared.tensors[path]
        if returned.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():
            ctx.report(kind, "contract", f"{what} {ctx.short()} returns a new tensor instead of {path}",
                       Mismatch(path=path, attribute="identity", expected=f"the tensor passed as {path}", actual="a different tensor"))
