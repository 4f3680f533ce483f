"""Running one shard case: the plain call, the same call on DTensors, and what each rank sees.

Design note. A case is run twice, in the same world (world.py):

1. plain: the op on the sample's full tensors, on the device, in the dtype
   (the single-device answer). For the ``backward`` variant the gradients
   of the op's differentiable outputs with seeded output gradients are the
   answer too. A plain call that raises makes the case a skip (the sample
   says nothing about sharding), as does an op that draws random numbers
   (tagged ``nondeterministic_seeded``: DTensor's RNG gives each shard its
   own stream, so values differ from the plain op's by design).
2. sharded: each tensor argument distributed with its placements (Partial
   ones split by split.py), then, before the op is judged on them, checked:
   distribute -> ``full_tensor()`` must give each argument back on every
   rank (the round trip; a simulator or redistribute that fails it is no
   ground to blame the op on). Then the op on the DTensors; each output (and
   each gradient, with the output gradients replicated) is gathered with
   ``full_tensor()`` and kept per rank, with the placements the sharding
   rule claimed for it.

If the op runs but ``full_tensor()`` of a result raises, the placement the
rule claimed does not describe the local values (a claimed Shard whose
local tensors are whole Partial ones): status ``claim``, judged wrong.
Nor is a result judged by its values alone: its spec must describe it
(``spec_words``: the global shape the plain op gives, the wrapper's shape
and strides, each rank's local shape under its placements), or the case is
judged wrong where its values are right (``facts["spec"]``): an in-place op that changes shape or strides
(``squeeze_``) and leaves the old spec gathers right values today and goes
wrong at the next redistribution.

Python numbers read from a DTensor (``item()``, ``float()``, ``bool()``)
are judged as 0-d tensors (a float in the case's dtype). Where simulated
ranks read different numbers (world.reads), each rank's is the result when
the result is those numbers (``x.sum().item()`` of a Partial ``x``: each
rank returns its own share); where a later result depends on them, the
simulator cannot follow each rank, and the case is a skip it says is the
simulator's (``simulator_failure``), which a sweep reruns on real gloo ranks.

What DTensor raises is classified from its own words: a rule that does not
exist or refuses (``NotImplementedError``, "not supported", "does not have
a sharding strategy") is ``unsupported``: a skip with the reason, never a
finding. Anything else is ``raised``: loud, so not a silent bug.

``trace`` records every aten op dispatched on DTensors, with the placements
in and out (``aten.sum.dim_IntList(SS0x2) -> S0``). With ``blame`` each of
those ops is also checked on its own, against the same op on the full
values of its inputs: the first one that is wrong is the rule to blame, and
the finding names it.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..cases.records import Case
from ..judge import compare as cmp
from ..judge.tolerance import table
from ..run import tree
from . import cases as shard_cases, composites, placements as placing, split, support, surface
from .results import PerRank, is_number, number, number_dtype, rank_numbers, spec_words, spec_wrong

UNSUPPORTED = re.compile(
    r"sharding strategy|sharding propagation|not supported|not implemented|does not support|doesn't support|"
    r"unsupported|no sharding|only support|cannot be sharded|not yet supported",
    re.IGNORECASE,
)
GRAD_SEED = 1234
# Ops whose result's values are whatever memory held: only its metadata is comparable.
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One aten op dispatched on DTensors, and what its sharding rule claimed."""

    op: str  # "aten.sum.dim_IntList"
    inputs: tuple[str, ...]  # placements of its DTensor arguments, in order
    outputs: tuple[str, ...]
    wrong: str = ""  # with blame: how its own output was wrong ("" when right or not checked)

    def words(self) -> str:
        return f"{self.op}({', '.join(self.inputs)}) -> {', '.join(self.outputs) or '-'}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Ran:
    """What a case gave: status "ran", "skip", "unsupported", "raised", "roundtrip" or "claim".

    "claim": the op ran, but gathering one of its results through the
    placements its rule claimed raised; on real process groups the same
    gather may not raise but silently give a wrong tensor, so it is judged
    as a wrong result (judge.py). ``facts["spec"]``: how a result's spec
    fails to describe it (``spec_words``), judged wrong where its values are right.
    """

    status: str
    reason: str = ""
    expected: dict = field(default_factory=dict)  # path -> the plain value (CPU)
    actual: dict = field(default_factory=dict)  # path -> list of every visible rank's value (CPU)
    claimed: dict = field(default_factory=dict)  # path -> the output placements the rule claimed
    steps: tuple[Step, ...] = ()
    roundtrip: tuple = ()  # (path, placement, Mismatch) of the argument that did not round-trip
    facts: dict = field(default_factory=dict)  # what the judge needs: reduction length, partial inputs, aten ops


def run(case: Case, world, *, blame: bool = False) -> Ran:
    sample = shard_cases.sample_of(case)
    function = shard_cases.function(case.op)
    backward = case.variant == "backward"
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    tensors = {p: t.to(world.device) for p, t in tree.call_leaves(args, kwargs).items()}
    grad_paths = [p for p, t in tensors.items() if _differentiable(t)] if backward else []
    if backward and not grad_paths:
        return Ran(status="skip", reason="backward: no floating argument to differentiate")

    ops = _Ops()
    try:
        expected = _compute(function, sample, args, kwargs, tensors, grad_paths, world.device, watch=ops)
    except Exception as e:
        return Ran(status="skip", reason=f"the plain call raises {line(e)}")
    if ops.random and not surface.is_random(case.op):  # surface's random chains seed themselves: randomness.py judges them
        return Ran(status="skip", reason=f"random op ({ops.random}): DTensor draws each shard's values from its own stream")
    if backward and not any(p.startswith("grad[") for p in expected):
        return Ran(status="skip", reason="backward: no output depends differentiably on the arguments")
    inputs = max((t.numel() for t in tensors.values()), default=1)
    outputs = max((v.numel() for v in expected.values() if isinstance(v, torch.Tensor)), default=1)
    facts = {"reduction": max(1, inputs // max(outputs, 1)), "ops": tuple(sorted(ops.names)),
             "uninitialized": bool(ops.names & UNINITIALIZED),
             "partial": any("P" in pl for _, pl in case.layouts)}

    mesh = shard_cases.mesh_of(case)
    placed = dict(case.layouts)
    steps: list[Step] = []
    try:
        with world.context():
            dtensors = {}
            for path, t in tensors.items():
                placement = placed.get(path, ".".join("R" * len(mesh.shape)))
                try:
                    dt = place(t, placement, world, plain=case.op == composites.SELF_CHECK)
                except Exception as e:
                    return Ran(status="skip", reason=f"DTensor cannot place {path} {placing.words(placement)} on mesh "
                               f"{mesh.name} ({line(e)})", facts=facts)
                wrong = roundtrip(dt, t, placement, world, path)
                if wrong is not None:
                    return Ran(status="roundtrip", reason=f"{path} placed {placing.words(placement)} on mesh {mesh.name} "
                               f"does not come back from full_tensor(): {wrong.describe()}",
                               roundtrip=(path, placement, wrong), facts=facts)
                dtensors[path] = dt.detach().requires_grad_(path in grad_paths)
            sharded_args, sharded_kwargs = tree.replace_call(args, kwargs, dtensors)
            trace = _Trace(world, blame)
            try:
                with trace, world.reads() as differing:
                    out = function(*sharded_args, **sharded_kwargs)
                results = _leaves(out)
                if backward:
                    results.update(_gradients(sample, out, dtensors, grad_paths, world))
            except Exception as e:
                steps = list(trace.steps)
                if simulator_failure(e, world):
                    return Ran(status="skip", reason=f"LocalTensorMode refuses to go on: {line(e)} (a simulator limitation, "
                               "not judged here)", facts={**facts, "simulator_failure": True})
                status = "unsupported" if isinstance(e, NotImplementedError) or UNSUPPORTED.search(str(e)) else "raised"
                return Ran(status=status, reason=line(e), steps=tuple(steps), facts=facts)
            steps = list(trace.steps)
            if differing:  # ranks read different numbers: judged here only where the result is those numbers
                read = rank_numbers(results, differing, mesh.ranks, number_dtype(tensors))
                if read is None:
                    first = ", ".join(f"rank {r} {v!r}" for r, v in list(differing[0].items())[:4])
                    return Ran(status="skip", reason=f"ranks read different Python numbers from a DTensor ({first}) and go "
                               "on with them; LocalTensorMode goes on with one rank's (a simulator limitation, not judged "
                               "here)", facts={**facts, "simulator_failure": True})
                results = {**results, **read}
            facts["numbers"] = tuple(p for p, v in results.items() if is_number(v) or isinstance(v, PerRank))
            facts["spec"] = spec_wrong(results, expected, world)  # judged where the values are right (judge.py)
            actual, claimed = {}, {}
            for path, value in results.items():
                if isinstance(value, PerRank):
                    actual[path] = value.values
                    continue
                if is_number(value):
                    with world.disabled():
                        value = number(value, number_dtype(tensors))
                if _is_dtensor(value):
                    claimed[path] = placing.text(value.placements)
                    try:
                        value = value.full_tensor()
                    except Exception as e:  # the op ran; its result cannot be gathered through the placement claimed
                        if simulator_failure(e, world):
                            return Ran(status="skip", reason=f"LocalTensorMode cannot gather {path} through "
                                       f"{placing.words(claimed[path])}: {line(e)} (a simulator limitation, "
                                       "not judged here)", facts={**facts, "simulator_failure": True})
                        return Ran(status="claim", reason=f"{path}: full_tensor() through the claimed placements raises {line(e)}",
                                   expected=expected, claimed=claimed, steps=tuple(steps), facts=facts)
                actual[path] = value
            actual = {p: v if isinstance(results[p], PerRank) else _visible(v, world) for p, v in actual.items()}
    except Exception as e:  # redistributing the result raised: loud
        return Ran(status="raised", reason=line(e), steps=tuple(steps), facts=facts)
    return Ran(status="ran", expected=expected, actual=actual, claimed=claimed, steps=tuple(steps), facts=facts)


def place(t: torch.Tensor, placement: str, world, *, plain: bool = False):
    """``t`` as a DTensor on the world's mesh with ``placement`` (Partial ones split: split.py).

    Simulated, ``t`` is first made a replicated LocalTensor, as PyTorch's own
    LocalTensor tests make their inputs: torch 2.13's LocalTensorMode gives
    every rank rank 0's shard when it distributes a plain tensor with
    ``_StridedShard`` (bench/shard.md). ``plain`` distributes the plain tensor
    itself: the self-check case (composites.SELF_CHECK) that keeps that bug
    in sight.
    """
    api = support.dtensor()
    DTensor, Partial, Replicate, distribute_tensor = api.DTensor, api.Partial, api.Replicate, api.distribute_tensor

    wanted = placing.parse(placement)
    replicated = [Replicate() if isinstance(p, Partial) else p for p in wanted]
    source = t.detach() if plain or world.real else world.replicated(t.detach())
    dt = distribute_tensor(source, world.device_mesh, replicated)
    partial = [(dim, p.reduce_op) for dim, p in enumerate(wanted) if isinstance(p, Partial)]
    if not partial:
        return dt
    shape = world.mesh.shape

    def change(coordinate, value):
        for dim, reduce in partial:
            value = split.share(value, reduce, coordinate[dim], shape[dim])
        return value

    local = world.adjust(dt.to_local(), change)
    return DTensor.from_local(local, world.device_mesh, wanted, run_check=False, shape=t.shape, stride=t.stride())


def roundtrip(dt, t: torch.Tensor, placement: str, world, path: str):
    """The Mismatch of the worst rank when ``full_tensor()`` does not give ``t`` back; None when it does."""
    full = world.values(dt.full_tensor())
    sizes = [world.mesh.shape[i] for i, p in enumerate(placement.split(".")) if p in ("Psum", "Pavg")]
    slack = split.share_error(t.cpu(), math.prod(sizes)) if sizes else None
    with world.disabled():
        for rank, value in enumerate(full):
            wrong = cmp.compare_leaf(f"{path}@rank{rank}" if len(full) > 1 else path, value.detach().cpu(), t.detach().cpu(),
                                     tolerance=table, slack=slack)
            if wrong is not None:
                return wrong
    return None


def simulator_failure(e: BaseException, world) -> bool:
    """Whether ``e`` is LocalTensorMode's own failure, not DTensor's: its per-rank symbolic ints missing a method.

    Simulated, sizes that differ between ranks are ``LocalIntNode``s behind
    SymInts; code that asks them what a real int or a SymNode of a trace
    would answer (torch 2.13: ``_MaskPartial``'s reduction, embedding's
    result, raises ``'LocalIntNode' object has no attribute 'guard_int'``)
    fails in the simulator only. On real process groups there are no such
    ints, and the same gather is right (bench/shard.md). Nor can it go on
    where ranks compute different Python values ("Non Tensor or int rank
    results must be equal for all ranks"): on real ranks each goes on with
    its own, which is for the judge to see there.
    """
    if world.real:
        return False
    return ((isinstance(e, AttributeError) and bool(re.search(r"LocalIntNode|SymNode", str(e))))
            or (isinstance(e, AssertionError) and "rank results must be equal for all ranks" in str(e)))


def _compute(function, sample, args, kwargs, tensors, grad_paths, device, watch=None) -> dict:
    """The plain answer: each output leaf, and with ``grad_paths`` each gradient (CPU, detached)."""
    leaves = {p: t.detach().clone().requires_grad_(p in grad_paths) for p, t in tensors.items()}
    call_args, call_kwargs = tree.replace_call(args, kwargs, leaves)
    with watch if watch is not None else contextlib.nullcontext():
        out = function(*call_args, **call_kwargs)
    like = number_dtype(tensors)
    found = {p: number(v, like) if is_number(v) else _cpu(v) for p, v in _leaves(out).items()}
    if grad_paths:
        outs = [v for _, v in tree.output_leaves(sample.output_process_fn_grad(out)) if isinstance(v, torch.Tensor) and v.requires_grad]
        if outs:
            grads = _output_gradients(outs)
            found.update({f"grad[{p}]": _cpu(g) for p, g in zip(grad_paths, torch.autograd.grad(
                outs, [leaves[p] for p in grad_paths], [g.to(o.device) for o, g in zip(outs, grads)], allow_unused=True)) if g is not None})
    return found


def _gradients(sample, out, dtensors, grad_paths, world) -> dict:
    api = support.dtensor()
    Replicate, distribute_tensor = api.Replicate, api.distribute_tensor

    outs = [v for _, v in tree.output_leaves(sample.output_process_fn_grad(out)) if isinstance(v, torch.Tensor) and v.requires_grad]
    if not outs:
        return {}
    grads = []
    with world.disabled():  # plain CPU draws, as for the plain call: under the mode each rank would draw its own
        drawn = _output_gradients(outs)
    for o, g in zip(outs, drawn):
        g = g.to(world.device)
        if _is_dtensor(o):  # replicated, from a LocalTensor when simulated (see place)
            g = distribute_tensor(g if world.real else world.replicated(g), world.device_mesh, [Replicate()] * world.device_mesh.ndim)
        grads.append(g)
    found = torch.autograd.grad(outs, [dtensors[p] for p in grad_paths], grads, allow_unused=True)
    return {f"grad[{p}]": g for p, g in zip(grad_paths, found) if g is not None}


def _output_gradients(outs) -> list[torch.Tensor]:
    """Seeded output gradients, the same for the plain and the sharded call (made on the CPU, outside any mode)."""
    generator = torch.Generator().manual_seed(GRAD_SEED)
    found = []
    for o in outs:
        shape = tuple(int(s) for s in o.shape)
        found.append(torch.randn(shape, generator=generator, dtype=torch.float64).to(o.dtype))
    return found


def _leaves(out) -> dict:
    return dict(tree.output_leaves(out))


def _visible(value, world) -> list:
    if isinstance(value, torch.Tensor):
        with world.disabled():
            return [v.detach().cpu().clone() for v in world.values(value)]
    return [value]


def _cpu(value):
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _is_dtensor(value) -> bool:
    return isinstance(value, support.dtensor().DTensor)


def _differentiable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def line(e: BaseException) -> str:
    """An exception as one line of a reason: its type and its first 300 characters, whitespace folded."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


class _Ops(TorchDispatchMode):
    """The aten ops the plain call dispatches to; notes a random one."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()
        self.random = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func.overloadpacket.__name__))
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.random = self.random or str(func)
        return func(*args, **(kwargs or {}))


class _Trace(TorchDispatchMode):
    """Every aten op dispatched on DTensors, with placements; with ``blame``, each checked on its own."""

    def __init__(self, world, blame: bool):
        super().__init__()
        self.world = world
        self.blame = blame
        self.steps: list[Step] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        DTensor = support.dtensor().DTensor

        kwargs = kwargs or {}
        flat = torch.utils._pytree.tree_leaves((args, kwargs))
        if not any(isinstance(a, DTensor) for a in flat):
            return func(*args, **kwargs)
        before = [placing.text(a.placements) for a in flat if isinstance(a, DTensor)]
        reference = self._reference(func, args, kwargs) if self.blame else None
        out = func(*args, **kwargs)
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, DTensor)]
        wrong = self._check(outs, reference) if reference is not None else ""
        if not wrong and outs and torch.Tag.inplace_view in getattr(func, "tags", ()):
            # an in-place view (squeeze_, t_, ...) changes self's shape or strides: its spec must follow
            wrong = spec_words(outs[0], self.world)
            wrong = f"self's spec left stale: {wrong}" if wrong else ""
        self.steps.append(Step(op=str(func), inputs=tuple(before), outputs=tuple(placing.text(o.placements) for o in outs), wrong=wrong))
        return out

    def _reference(self, func, args, kwargs):
        """``func`` on the full values of its DTensor arguments (every rank's); None when that is not possible."""
        DTensor = support.dtensor().DTensor

        if func._schema.is_mutable:
            return None  # in place: its inputs are gone once it ran; checked through the ops that use the result
        try:
            full = torch.utils._pytree.tree_map(lambda a: a.full_tensor() if isinstance(a, DTensor) else a, (args, kwargs))
            return [o for o in torch.utils._pytree.tree_leaves(func(*full[0], **full[1])) if isinstance(o, torch.Tensor)]
        except Exception:
            return None

    def _check(self, outs, reference) -> str:
        if len(outs) != len(reference):
            return ""
        for i, (o, e) in enumerate(zip(outs, reference)):
            try:
                got = self.world.values(o.full_tensor())
                want = self.world.values(e)
            except Exception as err:
                return f"output {i} cannot be gathered: {line(err)}"
            with self.world.disabled():
                for rank, (g, w) in enumerate(zip(got, want if len(want) == len(got) else want * len(got))):
                    wrong = cmp.compare_leaf(f"out[{i}]", g.detach().cpu(), w.detach().cpu(), tolerance=lambda d: _loose(d))
                    if wrong is not None:
                        return f"rank {rank}: {wrong.describe()}"
        return ""


def _loose(dtype: torch.dtype):
    """A step's own check is only to name the rule: generous, a few units of roundoff of the values."""
    from ..judge.tolerance import Tolerance

    base = table(dtype)
    if not (dtype.is_floating_point or dtype.is_complex):
        return base
    eps = torch.finfo(dtype).eps
    return Tolerance(atol=max(base.atol, 64 * eps), rtol=max(base.rtol, 64 * eps * math.sqrt(1024)))
