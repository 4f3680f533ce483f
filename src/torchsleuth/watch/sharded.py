"""Shadow replay of DTensor calls: each distinct sharded op call of a watched program, judged against the plain op.

Design note. On a rank of a sharded program (``watch --nproc N``, or under
torchrun) the shadow replay's dispatch mode is this subclass of
watch.shadow's. A ``TorchDispatchMode`` runs before DTensor's own dispatch,
so it sees each DTensor-level call as the program made it: the aten op with
DTensor arguments, each with its placements, global shape and mesh (the
local ops DTensor then runs are made with the mode popped, and not seen).
Calls with no DTensor argument go to the single-device replay as before;
collectives (``c10d``, ``_c10d_functional``) are never judged.

A DTensor call whose signature is new (the op, each DTensor argument's
placements, global shape and dtype, the mesh's shape, and the other
arguments as watch.shadow keys them: ``signature``) is judged, once:

* before the call, each DTensor argument is gathered (``full_tensor()``)
  and copied, as each plain tensor argument is;
* the program's own call runs, untouched;
* each DTensor result is gathered through the placements its rule claimed
  (``full_tensor()`` again), a Python number (``item()``) kept as read;
* the plain op on the gathered copies is the expected answer, and every
  result must equal it within shard.tolerance's allowance for the
  reduction order (the one ``torchsleuth shard`` allows). A rule whose
  claimed placement does not reconstruct the plain result is wrong.

The gathers are collectives. The program is SPMD, so every rank makes the
same DTensor calls in the same order with the same signatures: the
decision to judge (the signature's novelty, ``every``, ``sample`` from a
generator seeded alike on every rank) is the same everywhere and every rank
gathers the same tensors in the same order. The comparison is each rank's
own, with no collective: a rank that differs reports a finding, and the
findings of all ranks are merged afterwards (watch.ranks), so the finding
says which ranks differ. ``full_tensor()`` of a result whose local shapes
cannot be gathered raises (the claim does not even fit the local values):
a finding too.

A finding (``sharding_mismatch``, reference ``sharding``) names the op, the
placements in and out, the rule's claim, the mesh (its shape, and its
``mesh_dim_names`` where it has them: a 2-D ``(dp, tp)`` mesh's parameters
and its tp submesh's activations are told apart), the module whose forward
issued it (watch's forward-hook stack; for a call in backward or in the
optimizer's step, the module whose parameters it takes, by their FQN), the
parameters among its arguments (by FQN), the step, and the program's stack;
its ``data`` carries what the repro script (watch.sharded_repro) needs: the
op, the gathered inputs, the placements and the mesh. torchsleuth's own
gathers of a 2-D DTensor make DTensor log that they take two all_gathers;
that warning is the watch's, not the program's, and is held back
(``quiet``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import logging
import random
import zlib

import torch

from ..cases.records import Case
from ..judge import compare as cmp
from ..judge.records import Finding, Mismatch
from ..judge.tolerance import table
from ..run import live, tree
from ..shard import placements as placing, support, tolerance
from ..shard.results import is_number, number, number_dtype
from . import names as naming
from .shadow import Context, ShadowMode, _key, _user_frames

# Namespaces of ops the program does not compute with: the parallelism's own plumbing, collectives and FSDP2's
# buffers (whose fsdp::all_gather_copy_in writes an argument its schema says it only reads: bench/watch-sharded.md).
NOT_JUDGED = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor", "fsdp", "profiler"})
# Ops on DTensors not judged: they compute nothing, or draw random numbers (each shard from its own stream).
PLUMBING = frozenset({"detach", "alias", "lift_fresh", "_to_copy", "clone", "copy_", "empty_like", "zeros_like", "ones_like",
                      "new_empty", "new_empty_strided", "empty_strided", "_local_scalar_dense_if_replicated"})
# A repro script carries the gathered inputs up to this many elements; past it, it draws values of the same shapes.
SCRIPT_ELEMENTS = 1 << 16


def dtensor_class():
    return support.dtensor().DTensor


class ShardedShadow(ShadowMode):
    """watch.shadow's mode, plus the judging of DTensor calls (see the design note)."""

    def __init__(self, context: Context, *, rank: int = 0, world: int = 1, **kwargs):
        super().__init__(context, **kwargs)
        self.rank, self.world = rank, world
        self.dtensor_signatures: set[tuple] = set()
        self.dtensor_random = random.Random(1)  # alike on every rank: every rank judges the same calls
        self.dtensor_judged = 0
        self._DTensor = dtensor_class()
        self._param_names: dict[int, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace in NOT_JUDGED:
            return func(*args, **kwargs)
        leaves = tree.call_leaves(args, kwargs)
        if not any(isinstance(t, self._DTensor) for t in leaves.values()):
            return super().__torch_dispatch__(func, types, args, kwargs)
        if not self._wanted_dtensor(func, args, kwargs):
            return func(*args, **kwargs)
        return self._judge_dtensor(func, args, kwargs, leaves)

    def _wanted_dtensor(self, func, args, kwargs) -> bool:
        if self.context.paused or self.context.step % self.every:
            return False
        if self.sample < 1.0 and self.dtensor_random.random() >= self.sample:
            return False
        name = func._schema.name.split("::")[-1]
        if name in PLUMBING or torch.Tag.nondeterministic_seeded in func.tags or live.variant_of(func) == "out":
            return False
        if self.repeats:
            return True
        key = signature(func, args, kwargs)
        if key in self.dtensor_signatures:
            return False
        self.dtensor_signatures.add(key)
        return True

    def _judge_dtensor(self, func, args, kwargs, leaves: dict):
        """The call made, its inputs and results gathered on every rank alike, and judged on this rank."""
        self.dtensor_judged += 1
        DTensor = self._DTensor
        placed = {p: t for p, t in leaves.items() if isinstance(t, DTensor)}
        with torch.no_grad(), quiet():
            full = {p: (t.full_tensor() if p in placed else t).detach().clone() for p, t in leaves.items()}  # collectives
        result = func(*args, **kwargs)
        outputs = dict(tree.output_leaves(result))
        gathered, unreconstructed = {}, {}
        for path, value in outputs.items():
            if isinstance(value, DTensor):
                try:
                    with torch.no_grad(), quiet():
                        gathered[path] = value.full_tensor().detach().cpu()
                except Exception as e:  # the claim does not fit the local values: on every rank alike
                    unreconstructed[path] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            elif isinstance(value, torch.Tensor):
                gathered[path] = value.detach().cpu()
            elif is_number(value):
                gathered[path] = value
        try:
            finding = self._verdict(func, args, kwargs, placed, full, outputs, gathered, unreconstructed)
        except Exception as e:  # torchsleuth could not judge the call: counted, never a finding
            self.errors[f"{func}: {type(e).__name__}: {e}"[:200]] += 1
            finding = None
        if finding is not None and finding.id not in self._seen:
            self._seen.add(finding.id)
            self.findings.append(finding)
        return result

    def _verdict(self, func, args, kwargs, placed, full, outputs, gathered, unreconstructed) -> Finding | None:
        like = number_dtype({p: t for p, t in full.items() if isinstance(t, torch.Tensor)})

        def compute(tensors: dict) -> dict:
            call_args, call_kwargs = tree.replace_call(args, kwargs, {p: t.clone() for p, t in tensors.items()})
            with torch.no_grad():
                out = func(*call_args, **call_kwargs)
            return {p: number(v, like) if is_number(v) else v.detach().cpu() for p, v in tree.output_leaves(out)
                    if isinstance(v, torch.Tensor) or is_number(v)}

        with torch.random.fork_rng(devices=[]):
            expected = compute(full)
        actual = {p: number(v, like) if is_number(v) else v for p, v in gathered.items()}
        wrong: list[Mismatch] = [Mismatch(path=p, attribute="placement", expected="local values the claimed placements describe",
                                          actual=why) for p, why in unreconstructed.items()]
        allowance = None
        for path, e in expected.items():
            if path in unreconstructed or path not in actual:
                continue
            a = actual[path]
            found = cmp.compare_leaf(path, a, e, tolerance=table)
            if found is not None and found.attribute == "values":
                if allowance is None:
                    allowance = tolerance.allowance(compute, full, expected, e.dtype, reduction=_reduction(full, e),
                                                    partial=_partial_any(placed),
                                                    partial_ranks=self.world)
                found = cmp.compare_leaf(path, a, e, tolerance=table, slack=allowance.get(path))
            if found is not None:
                wrong.append(found)
        if not wrong:
            return None
        worst = max(wrong, key=lambda m: float("inf") if m.max_abs_err is None else m.max_abs_err)
        return self._finding(func, args, kwargs, placed, full, outputs, worst)

    def _finding(self, func, args, kwargs, placed, full, outputs, worst: Mismatch) -> Finding:
        DTensor = self._DTensor
        op = str(func)  # aten._softmax.default
        mesh = next(iter(placed.values())).device_mesh
        mesh_name = "x".join(str(s) for s in mesh.shape)
        dim_names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        mesh_words = f"{mesh_name} mesh ({', '.join(dim_names)})" if dim_names else f"{mesh_name} mesh"
        ins = {p: placing.text(t.placements) for p, t in placed.items()}
        claimed = {p: placing.text(v.placements) for p, v in outputs.items() if isinstance(v, DTensor)}
        shapes = {p: list(t.shape) for p, t in full.items() if isinstance(t, torch.Tensor)}
        some = next(iter(placed.values()))
        dtype = str(some.dtype).removeprefix("torch.")
        step, module, where = self.context.step, (self.context.modules[-1] if self.context.modules else ""), self.context.where()
        names = self._names(placed)
        if not module and names:  # a backward's or optimizer's call: the module whose parameters it takes
            module = owner(next(iter(names.values())))
            where = f"{where} of {module or 'the model'}" if where.startswith("backward") else where
        words_in = ", ".join(f"{p} {placing.words(t)} of shape {shapes[p]}" for p, t in ins.items())
        claim = ", ".join(f"{p} {placing.words(t)}" for p, t in claimed.items()) or "no DTensor result"
        what = worst.path
        number = next((v for p, v in outputs.items() if p == worst.path and is_number(v)), None)
        if number is not None:  # item(), float(), bool(): a Python number, read on each rank
            how = (f"rank {self.rank} reads {number!r}, not the plain op's on the gathered input, {worst.expected} "
                   "(each rank returns its own share)" if _partial_any(placed) else
                   f"rank {self.rank} reads {number!r}, not the plain op's on the gathered input, {worst.expected}")
        elif worst.attribute == "placement":
            how = f"full_tensor() through the claimed placements raises ({worst.actual})"
        elif worst.attribute == "values":
            how = (f"full_tensor() of {what} differs from the plain op on the gathered inputs: {worst.mismatched} of "
                   f"{worst.numel} elements beyond tolerance, off by up to {worst.max_abs_err:.3g} (allowed {worst.allowed:.3g})")
        else:
            how = f"{what}: {worst.attribute} expected {worst.expected}, got {worst.actual}"
        at = where if where.startswith("outside") else f"in {where}"
        summary = f"{op} on a {mesh_words} with {words_in}: the rule claims {claim}, and {how}. Step {step}, {at}."
        stack = "; ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in _user_frames())
        detail = "; ".join(x for x in (f"step {step}, {at}", ", ".join(f"{p} is {n}" for p, n in names.items()),
                                       f"stack: {stack}" if stack else "") if x)
        key = json.dumps([op, ins, shapes, claimed, worst.path, worst.attribute])
        fid = "f-" + hashlib.sha256(f"{key}|sharding_mismatch|watch".encode()).hexdigest()[:10]
        case = Case(op=op, variant=live.variant_of(func), dtype=dtype, device=str(some.device_mesh.device_type), sample=step,
                    layouts=tuple(sorted(ins.items())), oracle="sharded",
                    edits=(f"mesh:{mesh_name}", *(f"shape:{p}={'x'.join(map(str, shape)) or '0d'}" for p, shape in shapes.items())))
        data = {"function": f"torch.ops.{op}", "mesh": list(mesh.shape), "mesh_dims": list(dim_names), "placements": ins, "claimed": claimed, "module": module,
                "step": step, "ranks": [self.rank], "world": self.world, "names": names, "stack": stack,
                "call": _call_source(args, kwargs), "tensors": _blob(full), "shapes": shapes,
                "dtypes": {p: str(t.dtype).removeprefix("torch.") for p, t in full.items() if isinstance(t, torch.Tensor)}}
        return Finding(id=fid, kind="sharding_mismatch", op=op, opinfo=func._schema.name.split("::")[-1], variant=case.variant,
                       dtype=dtype, device=case.device, reference="sharding", case_id=case.id, layouts=case.layouts,
                       summary=summary, mismatch=worst, detail=detail, data=json.dumps(data))

    def _names(self, placed: dict) -> dict[str, str]:
        """The parameters (by FQN) among the call's DTensor arguments."""
        found = {}
        for path, t in placed.items():
            if id(t) not in self._param_names:
                self._param_names.update(naming.parameter_names())
            name = self._param_names.get(id(t))
            if name:
                found[path] = name
        return found


def owner(fqn: str) -> str:
    """The module a parameter's FQN belongs to: ``block.up.weight`` -> ``block.up`` ("" for the model's own)."""
    return fqn.rpartition(".")[0]


@contextlib.contextmanager
def quiet():
    """torchsleuth's own gathers without DTensor's warning that a 2-D gather takes two all_gathers (the program made
    no such gather: the warning would be torchsleuth's noise in its output)."""
    logger = logging.getLogger("torch.distributed.tensor._redistribute")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def signature(func, args, kwargs) -> tuple:
    """What a DTensor call's rule decides by: the op, each DTensor's placements, global shape and dtype, the mesh's shape,
    and the other arguments as watch.shadow keys them (the same on every rank of an SPMD program)."""
    return (func, _dkey(args), _dkey(kwargs))


def _dkey(value):
    DTensor = dtensor_class()
    if isinstance(value, DTensor):
        return ("D", placing.text(value.placements), tuple(value.shape), value.dtype, tuple(value.device_mesh.shape))
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_dkey(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _dkey(v)) for k, v in value.items()))
    return _key(value, [0])


def _partial_any(placed: dict) -> bool:
    return any(_partial(t) for t in placed.values())


def _partial(t) -> bool:
    return any(type(p).__name__.endswith("Partial") for p in t.placements)


def _reduction(full: dict, expected: torch.Tensor) -> int:
    """Input elements per output element: the reduction length the allowance scales with."""
    largest = max((t.numel() for t in full.values() if isinstance(t, torch.Tensor)), default=1)
    return max(1, largest // max(1, expected.numel()))


def _call_source(args, kwargs) -> list[str]:
    try:
        return list(tree.call_source(args, kwargs))
    except tree.Unrepresentable as e:
        return ["", "", str(e)]


def _blob(full: dict) -> str:
    """The gathered inputs, compressed, for the repro script; "" past SCRIPT_ELEMENTS (it draws values instead)."""
    tensors = {p: t.detach().cpu().contiguous() for p, t in full.items() if isinstance(t, torch.Tensor)}
    if sum(t.numel() for t in tensors.values()) > SCRIPT_ELEMENTS:
        return ""
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return base64.b85encode(zlib.compress(buffer.getvalue(), 9)).decode()
