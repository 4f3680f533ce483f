"""How a ``vmap`` case is judged: its batch, the in_dims it tries, and the verdict.

Design note. ``Batch`` is one case's state. It holds the call as a function
of its tensors by path (the call itself, or its vjp against the seeded
cotangents the backward variant uses), the tensors vmap maps over, the
batch's samples (vmap.batch), and each sample's result alone. A
configuration that leaves a tensor unmapped (in_dims None) gives every
sample the call's own tensor there, so its samples alone are made once per
such set. Each sample alone gets one ``calls.Judged``: its context is the
judge's tolerance rule for that sample's values (its float64 runs made only
when bits differ).

``configurations`` lists the in_dims tried: every tensor at dim 0; each of
the first ``MOST`` tensors with its batch dim last (where a batching rule
must move it: another path through the rule); and, with several tensors,
each of them not mapped over. ``verdict`` compares every sample of every
configuration with the sample alone: bits first; where they differ, the
judge's rule (two rounded results, as the layout reference compares:
batched kernels may sum in another order), then its canonicalisers (ties,
phases); a difference float64 lays on the op's own kernel (vmap.float64:
a structural zero, or a batch as near float64 as rounding allows) is noted,
not reported. The first configuration that differs beyond all that is the
finding; differences within it are counted in the pass reason.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ...cases import opinfo
from ...judge import calls, conditioning
from ...judge import compare as cmp
from ...judge import nearer
from ...judge.context import Context
from ...judge.plugin import encode_detail
from ...judge.records import Finding, Mismatch, Outcome
from ...judge.tolerance import table
from ...judge.verdict import one_line
from ...run import call, probe, tree
from ...run.facts import of_references as facts_of
from ...run.opclass import computation
from ...run.imports import loaded
from .batch import gradients, leaves, members, sample_of, unmapped, vmapped
from .detail import BATCH, FILLS, FORWARD, GRAD, RANDOM, SEED_BASE, Detail, in_dims_source
from . import orders
from .float64 import near_float64, no_further_off, structural_zeros

# At most this many tensors of a call get configurations of their own (batch dim last; not mapped over).
MOST = 3


class Skip(Exception):
    """The case is not this oracle's to judge: the outcome is ``status`` with the message as its reason."""

    def __init__(self, reason: str, status: str = "skip"):
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Config:
    """One way of batching the call: each tensor's batch dim (None: not mapped over), and that in words."""

    in_dims: tuple[int | None, ...]
    words: str  # "over a batch at dim 2 (the last) of input, the others at dim 0 (in_dims=(2, 0))"


def configurations(T: dict, paths: tuple[str, ...]) -> list[Config]:
    """The in_dims a case tries, every tensor at dim 0 first."""
    front = (0,) * len(paths)
    found = [Config(front, words(paths, front))]
    for i, path in enumerate(paths[:MOST]):
        if T[path].dim() > 0:  # a 0-dim tensor's last dim is its first
            dims = front[:i] + (T[path].dim(),) + front[i + 1:]
            found.append(Config(dims, words(paths, dims)))
    if len(paths) > 1:
        for i in range(min(len(paths), MOST)):
            dims = front[:i] + (None,) + front[i + 1:]
            found.append(Config(dims, words(paths, dims)))
    return found


def words(paths: tuple[str, ...], in_dims: tuple[int | None, ...]) -> str:
    """A configuration as a summary says it."""
    shown = f"in_dims={in_dims_source(in_dims)}"
    moved = [(p, d) for p, d in zip(paths, in_dims) if d != 0]
    others = ", the others at dim 0" if len(paths) > 1 else ""
    if not moved:
        return f"over a batch at dim 0 of {paths[0] if len(paths) == 1 else 'every argument'} ({shown})"
    path, dim = moved[0]
    if dim is None:
        return f"with {path} not batched{others} ({shown})"
    return f"over a batch at dim {dim} (the last) of {path}{others} ({shown})"


class Batch:
    """One case's call, batch and samples alone (see the design note)."""

    def __init__(self, subject, mode: str):
        self.subject, self.case, self.mode = subject, subject.case, mode
        refs, failed = calls.base(subject)
        if failed is not None:
            raise Skip(failed.reason, failed.status)
        facts = facts_of(refs, self.case.op)
        if facts.random:
            raise Skip("a random op: vmap draws for the whole batch at once, so no sample draws what it draws alone")
        if facts.uninitialized:
            raise Skip("the result is uninitialized memory: no values to compare")
        if facts.storage_defined:
            raise Skip("the op is defined by its storage (as_strided and kin): a batch lays the storage out otherwise")
        if facts.repeated_writes:
            raise Skip("the call writes through repeated indices, whose order PyTorch leaves unspecified: a batch may order them otherwise")
        self.op = facts.op
        self.pointwise = computation(refs.trace, subject.entry) == "pointwise"
        self.function_name = opinfo.public_name(subject.entry, "functional")
        try:
            forward = call.prepare(calls.plain(self.case), subject.function, subject.sample)
            self.prepared = forward if mode == FORWARD else self._backward(refs.contiguous.value)
        except Skip:
            raise
        except Exception as e:  # the sample's tensors cannot even be made (a sparse layout, say)
            raise Skip("the call could not be made: " + one_line(getattr(e, "error", e)), "raised") from None
        self.differentiated = self.prepared.grad_paths
        self.T = {p: t.detach() for p, t in self.prepared.tensors.items()}
        cotangents = tuple(p for p in self.T if p.startswith("grad_output"))
        self.paths = tuple(p for p in self.T if p not in cotangents)
        if not self.paths:
            raise Skip("the call takes no tensor: there is nothing to map over")
        self.notes: list[str] = []
        self.function = _as_function(forward)
        if mode == GRAD:  # of what the backward variant differentiates: OpInfo's output_process_fn_grad of the result
            process = self.prepared.process
            self.function = self._gradient(lambda T, forward=self.function: process(forward(T)), [self.T[p] for p in cotangents])
        self.seed = SEED_BASE + self.case.sample
        self.fill, self.samples, alone = self._samples()
        self._alone = {(): alone}
        self._judged: dict[tuple, calls.Judged] = {}

    def _backward(self, functional_result) -> call.Prepared:
        dtype = getattr(torch, self.case.dtype)
        entry = self.subject.entry
        if not dtype.is_floating_point or not getattr(entry, "supports_autograd", False):
            raise Skip(f"{self.case.op} has no gradient to judge in {self.case.dtype}")
        if not probe.backward_allowed(entry, torch.device(self.case.device).type, dtype):
            raise Skip(f"{self.case.op} has no backward in {self.case.dtype}")
        case = dataclasses.replace(calls.plain(self.case), variant="backward")
        prepared = call.prepare(case, self.subject.function, self.subject.sample, reference_result=functional_result,
                                grad_seed=self.case.sample)
        if not prepared.grad_paths:
            raise Skip("no floating input to differentiate")
        if not any(p.startswith("grad_output") for p in prepared.tensors):
            raise Skip("no floating output to differentiate")
        return prepared

    def _gradient(self, forward, cotangents: list):
        """The call's vjp against every floating input; against the input alone where another one has no
        derivative (a loss's class weights, a target)."""
        every = gradients(forward, self.differentiated, cotangents)
        inputs = tuple(p for p in self.differentiated if p == "input" or p.startswith("input["))
        if not inputs or inputs == tuple(self.differentiated):
            return every
        try:
            every(self.T)
            return every
        except Exception as e:
            why = one_line(e)
        fewer = gradients(forward, inputs, cotangents)
        try:
            fewer(self.T)
        except Exception:
            return every  # the input's own gradient raises too: the sample alone raises (_samples)
        self.prepared = dataclasses.replace(self.prepared, grad_paths=inputs)
        self.differentiated = inputs
        self.notes.append(f"differentiated against {', '.join(inputs)} only: against every floating input, {why}")
        return fewer

    def what(self) -> str:
        return "the call" if self.mode == FORWARD else "its gradient (vjp)"

    def _samples(self) -> tuple[str, list[dict], list]:
        """The batch's fill, samples and their results alone: redrawn values, or copies where redrawn ones raise."""
        try:
            own = self.function(self.T)
        except Exception as e:
            raise Skip(f"{self.what()} alone raises: {one_line(e)}", "raised") from None
        for fill in FILLS:
            samples = members(self.T, self.paths, fill, self.seed, BATCH)
            try:
                return fill, samples, [own] + [self.function(s) for s in samples[1:]]
            except Exception as e:
                if fill != RANDOM:
                    raise Skip(f"{self.what()} on a copy of its tensors raises: {one_line(e)}", "raised") from None
                self.redraw_error = one_line(e)
        raise AssertionError("unreachable")

    def alone(self, in_dims) -> tuple[tuple[str, ...], list[dict], list]:
        """The samples of a configuration (its unmapped tensors the call's own), and each one's result alone."""
        key = tuple(p for p, d in zip(self.paths, in_dims) if d is None)
        samples = unmapped(self.samples, self.paths, in_dims)
        if key not in self._alone:
            self._alone[key] = [self._alone[()][0]] + [self.function(s) for s in samples[1:]]
        return key, samples, self._alone[key]

    def judged(self, key: tuple, b: int, sample: dict, result) -> calls.Judged:
        """Sample ``b`` alone as the judge sees a call: its tolerance rule, from float64 runs of that sample."""
        if (key, b) not in self._judged:
            tensors = {p: t.detach().requires_grad_(p in self.differentiated) for p, t in sample.items()}
            self._judged[(key, b)] = calls.Judged(calls.with_tensors(self.prepared, tensors), result, override=self.subject.override,
                                                  function_name=self.function_name, op=self.op)
        return self._judged[(key, b)]

    # --- the verdict ------------------------------------------------------------------------

    def verdict(self) -> Outcome:
        tallies = []
        for i, config in enumerate(configurations(self.T, self.paths)):
            try:
                key, samples, alone = self.alone(config.in_dims)
            except Exception as e:
                self.notes.append(f"{config.words}: a sample alone raises ({one_line(e)}), not judged")
                continue
            try:
                batched = vmapped(self.function, samples, self.paths, config.in_dims)
            except Exception as e:
                if i == 0:  # loud: the op (or its batching rule) refuses vmap
                    return Outcome(case=self.case, status="skip", reason=f"{self.what()} raises under vmap: {one_line(e)}")
                self.notes.append(f"{config.words} raises under vmap: {one_line(e)}")
                continue
            found, tally = self.compare(config, key, samples, alone, batched)
            if found is not None:
                return Outcome(case=self.case, status="finding", findings=(found,))
            if tally:
                tallies.append(tally)
        parts = []
        if tallies:
            parts.append(f"bits differ, within tolerance or as noted, in {len(tallies)} configuration(s): " + "; ".join(tallies[:3]))
        if self.fill != RANDOM:
            parts.append(f"the other samples are copies of the call's own (redrawn values raise: {self.redraw_error})")
        return Outcome(case=self.case, status="pass", reason="; ".join(dict.fromkeys(parts + self.notes)))

    def compare(self, config: Config, key: tuple, samples: list[dict], alone: list, batched) -> tuple[Finding | None, str]:
        """The finding of the first sample that differs beyond the rule; else None and the bits that differ, in words."""
        call.synchronize(self.case.device)  # results are read now: a copy to the host may still be under way
        differ, largest = 0, 0.0
        for b, sample in enumerate(samples):
            expected = dict(leaves(alone[b]))
            actual = sample_of(batched, b)
            pairs = (cmp.flatten(actual), cmp.flatten(expected))
            if not cmp.compare(*pairs, tolerance=table, bitwise=True):
                continue
            ctx = self.judged(key, b, sample, alone[b]).context
            found = self.beyond(ctx, config, b, actual, expected, (key, sample))
            if found:
                return self.finding(config, b, found[0], actual, expected, ctx), ""
            d, g = _bit_differences(*pairs)
            differ, largest = differ + d, max(largest, g)
        if not differ:
            return None, ""
        return None, f"{differ} element(s) {config.words}, " + (f"largest {largest:.3g}" if largest else "in the sign of a zero or a NaN's bits only")

    def beyond(self, ctx: Context, config: Config, b: int, actual: dict, expected: dict, at: tuple) -> list[Mismatch]:
        """Where sample ``b`` of the batch differs from the sample alone beyond the judge's rule, and not as the
        op's own kernel does (vmap.float64) nor as an overflow either side may give (vmap.orders); what is excused is noted.
        A gradient at a conditioned matrix of the case's edits may be off by the second order too (judge.conditioning):
        the batched and the lone backward are two algorithms' rounding of it."""
        extra = conditioning.allowance(self.case.op, self.case.edits, at[1], expected, getattr(torch, self.case.dtype)) \
            if self.mode == GRAD else {}
        found = ctx.differs(actual, expected, scale=2.0, extra=extra)
        if not found:
            return []
        found = self._overflows(ctx, config, b, actual, expected, at, extra)
        if not found:
            return []
        zeros = {p for p in structural_zeros(ctx) if no_further_off(actual.get(p), expected.get(p))}
        if any(m.path in zeros for m in found):
            self.notes.append(f"{', '.join(sorted({m.path for m in found} & zeros))} is zero in float64 (a structural zero): "
                              "its rounding noise is not judged")
            found = [m for m in found if m.path not in zeros]
        if found and all(m.attribute == "values" for m in found) and near_float64(ctx, actual, {m.path for m in found}):
            self.notes.append(f"sample {b} {config.words} differs from the sample alone, but the batch is as near float64 as "
                              "rounding allows: the sample alone is the one further off (the precision reference's question)")
            return []
        if found and ctx.ev.nondeterministic:
            self.notes.append(f"sample {b} differs {config.words}, but {self.what()} alone gives other bits from call to call")
            return []
        return found

    def _overflows(self, ctx: Context, config: Config, b: int, actual: dict, expected: dict, at: tuple, extra: dict) -> list[Mismatch]:
        """``ctx.differs`` once the elements each side may give as an overflow (vmap.orders) stand for float64's value."""
        key, sample = at
        actual, by_formula = orders.documented(ctx, actual)
        expected, by_formula_alone = orders.documented(ctx, expected)
        by_order = 0
        if self.mode == GRAD and self.pointwise:
            actual, expected, by_order = orders.sum_orders(self, key, b, sample, ctx, actual, expected)
        if by_formula + by_formula_alone:
            self.notes.append(f"sample {b} {config.words}: {by_formula + by_formula_alone} element(s) overflow as the op's documented "
                              "formula does, evaluated left to right in the dtype, where float64 is finite: judged as float64's value")
        if by_order:
            self.notes.append(f"sample {b} {config.words}: {by_order} gradient element(s) of a broadcast tensor are a sum whose terms "
                              "add up past the dtype's range: an order of summation may overflow there, judged as float64's value where it is finite")
        return ctx.differs(actual, expected, scale=2.0, extra=extra)

    def finding(self, config: Config, b: int, m: Mismatch, actual: dict, expected: dict, ctx: Context) -> Finding:
        short = Context.short_op(self.op)
        name = f"{short} [{self.case.dtype}]"
        what, alone = ((f"vmap of {name}", f"{short} of each sample alone") if self.mode == FORWARD
                       else (f"vmap of the gradient (vjp) of {name}", "each sample's gradient alone"))
        at = f"{m.path} element {list(m.worst_index)}" if m.worst_index else m.path
        if m.attribute == "values":
            by = "" if m.max_abs_err is None else f" by {m.max_abs_err:.3g}"
            allowed = "" if m.allowed is None else f" (allowed {m.allowed:.3g})"
            closer = nearer.clause(ctx.ev.refs, m, m.path, {"batched": cmp.flatten(actual), "alone": cmp.flatten(expected)})
            summary = (f"{what} {config.words} differs from {alone}{by}{allowed} at sample {b}, {at}: {m.actual} batched, "
                       f"{m.expected} alone{closer}")
        else:
            summary = f"{what} {config.words} gives sample {b} a {m.path} of {m.attribute} {m.actual}, where {alone} gives {m.expected}"
        detail = Detail(mode=self.mode, paths=self.paths, in_dims=config.in_dims, batch=BATCH, seed=self.seed, fill=self.fill,
                        differentiated=tuple(self.differentiated), sample=b, slack=_slack_at(m, expected), imports=loaded())
        made = "redrawn values" if self.fill == RANDOM else "copies of its tensors"
        prose = f"{BATCH} samples (the call's own, then {made}, seed {self.seed}); {config.words}; compared with each sample alone"
        spec = call.call_spec(self.prepared, calls.ran(self.prepared), self.function_name)
        kind = "mismatch" if self.mode == FORWARD else "gradient_mismatch"
        return calls.finding(self.case, kind=kind, reference="vmap", op=self.op, summary=summary,
                             mismatch=dataclasses.replace(m, path=f"{m.path} of sample {b}"), call_spec=spec, detail=prose,
                             data=encode_detail(detail))


def judge(subject, mode: str) -> Outcome:
    """One ``vmap`` case's outcome."""
    try:
        batch = Batch(subject, mode)
    except Skip as e:
        return Outcome(case=subject.case, status=e.status, reason=str(e))
    return batch.verdict()


def _as_function(prepared: call.Prepared):
    """The prepared call as a function of its tensors by path."""
    def function(T):
        args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, T)
        return prepared.function(*args, **kwargs)
    return function


def _bit_differences(actual: cmp.Leaves, expected: cmp.Leaves) -> tuple[int, float]:
    """How many elements differ in their bits, and the largest difference among them (within tolerance: a pass)."""
    count, largest = 0, 0.0
    for (_, a), (_, e) in zip(actual, expected):
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and a.shape == e.shape and a.dtype == e.dtype:
            bad = (cmp.bytes_of(a.detach().cpu()) != cmp.bytes_of(e.detach().cpu())).any(-1)
            count += int(bad.sum())
            if bool(bad.any()) and (a.is_floating_point() or a.is_complex()):
                work = torch.complex128 if a.is_complex() else torch.float64
                gap = torch.nan_to_num((a.detach().cpu().to(work) - e.detach().cpu().to(work)).abs(), nan=0.0)
                largest = max(largest, float(gap.max()))
    return count, largest


def _slack_at(m: Mismatch, expected: dict) -> float:
    """What the rule allowed beyond ATOL + RTOL * |alone| at ``m``'s worst element: the script's one ``SLACK``."""
    if m.allowed is None or not math.isfinite(m.allowed) or m.attribute != "values":
        return 0.0
    value = expected.get(m.path)
    if not isinstance(value, torch.Tensor):
        return 0.0
    e = value.detach().cpu()[m.worst_index].item() if m.worst_index else value.detach().cpu().reshape(-1)[0].item()
    return max(0.0, m.allowed - m.atol - m.rtol * abs(e))
