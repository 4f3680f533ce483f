"""Shadow replay: every aten op of a watched step, judged by the ops engine's oracles as it happens.

Design note. A ``TorchDispatchMode`` sees each aten call of the forward,
the backward and the optimizer, as its kernel receives it. For a call that
computes something (not a view, not a factory, not a random draw), the
program's own call runs first and untouched; then the same call is made on
copies of its tensors (same shape, strides and offset: run.live) and judged
exactly as ``torchsleuth ops`` judges a case (judge.verdict): against the
same call on contiguous tensors (layout), on the CPU when the program runs
elsewhere (device), in float64 (precision, for all-contiguous calls), and
the contracts (an in-place op's result reaches self, nothing is written
outside a view, inputs stay unchanged). The random state is saved and
restored around the judging, so the program draws the same numbers as it
would unwatched.

A finding is kept with where it was issued: the optimizer step, the
backward node, or the module whose forward ran the op, the names of the
parameters or optimizer state its tensors are, and the program's own stack.
The same failure (op, variant, kind, layouts) is kept once.

Cost control. A training loop makes the same calls step after step: the
same op on tensors of the same shapes, strides, dtypes and devices, with
the same kind of other arguments. By default (``repeats=False``) a call is
judged the first time its signature is seen (``signature``: the op, every
tensor's shape, stride, storage offset, dtype and device, and every other
argument, floats reduced to their sign and whether they are 0 or 1, which
kernels special-case). That is what layout-, dtype- and path-dependent bugs
(the seed story's) depend on; a bug that needs particular values needs
``repeats=True`` (``--judge every``), which judges every call. Also
``every`` (judge the ops of every N-th step only) and ``sample`` (judge that
fraction of the ops, drawn from a seeded generator). Every call of the
program is asked whether it is judged, so that question is cheap: what the
overload is (a view, a random op) is kept per overload, and the signature
and the element count are one walk of the arguments, no pytree.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import random
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..judge.verdict import judge
from ..judge.records import Finding
from ..run import call, live, tree
from ..run.evidence import Evidence
from ..run.facts import STORAGE_DEFINED
from ..run.facts import facts as read_facts
from ..run.references import Reference, References
from ..run.trace import PLUMBING, Trace
from . import names as naming

# Calls with more tensor elements than this are left alone: judging copies them several times.
MAX_ELEMENTS = 1 << 22


class Context:
    """Where the program is: the module whose forward runs, the optimizer that steps, the step."""

    def __init__(self):
        self.modules: list[str] = []
        self.optimizer: str = ""
        self.step = 0
        # storage address -> what the program calls it ("encoder.weight", "exp_avg_sq of encoder.weight")
        self.tensor_names: dict[int, str] = {}
        # called to learn names made since (optimizer state created inside a step)
        self.refresh_names = lambda: None
        self.paused = False  # watch's own work (the invariants) is not the program's: not judged

    def name_of(self, t: torch.Tensor) -> str:
        address = naming.address(t)
        if address not in self.tensor_names:
            self.refresh_names()
        return self.tensor_names.get(address, "")

    def where(self) -> str:
        if self.optimizer:
            return f"{self.optimizer}.step()"
        node = torch._C._current_autograd_node()
        if node is not None:
            return f"backward ({node.name()})"
        if self.modules:
            return f"forward of {self.modules[-1] or 'the model'}"
        return "outside any module"


class ShadowMode(TorchDispatchMode):
    def __init__(self, context: Context, *, every: int = 1, sample: float = 1.0, seed: int = 0, repeats: bool = False):
        super().__init__()
        self.context = context
        self.every, self.sample, self.repeats = max(1, every), sample, repeats
        self.signatures: set[tuple] = set()  # of the calls judged (when not ``repeats``)
        self.random = random.Random(seed)
        self.findings: list[Finding] = []
        self.judged = 0
        self.errors: collections.Counter = collections.Counter()  # why torchsleuth could not judge a call
        self._seen: set[tuple] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._wanted(func, args, kwargs):
            return func(*args, **kwargs)
        try:
            prepared = live.prepare(func, args, kwargs, step=self.context.step)
        except Exception as e:  # a layout that cannot be copied as it is: not judged
            self.errors[f"{func}: {type(e).__name__}: {e}"[:200]] += 1
            prepared = None
        result = func(*args, **kwargs)
        if prepared is not None and prepared.case.variant != "out":  # out=: the reference would need the functional overload
            self._judge(prepared, tree.call_leaves(args, kwargs))
        return result

    def _wanted(self, func, args, kwargs) -> bool:
        if self.context.paused or self.context.step % self.every:
            return False
        if self.sample < 1.0 and self.random.random() >= self.sample:
            return False
        if not _judgeable(func):
            return False
        key, elements = _signed(func, args, kwargs)
        if not 0 < elements <= MAX_ELEMENTS:
            return False
        if self.repeats:
            return True
        if key in self.signatures:
            return False
        self.signatures.add(key)
        return True

    def _judge(self, prepared: call.Prepared, originals: dict) -> None:
        self.judged += 1
        try:
            with torch.random.fork_rng(devices=_devices(prepared.case.device)), torch.no_grad():
                outcome = _judged(prepared)
        except Exception as e:  # torchsleuth could not judge this call: counted, never a finding
            self.errors[f"{prepared.case.op}: {type(e).__name__}: {e}"[:200]] += 1
            return
        for finding in outcome.findings:
            key = (finding.op, finding.variant, finding.kind, finding.layouts)
            if key in self._seen:
                continue
            self._seen.add(key)
            self.findings.append(dataclasses.replace(finding, detail=self._detail(originals)))

    def _detail(self, originals: dict) -> str:
        """Where the call was issued, what its tensors are in the program, and the program's stack."""
        names = [f"{path} is {name}" for path, t in originals.items() if (name := self.context.name_of(t))]
        stack = "; ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in _user_frames())
        parts = [f"step {self.context.step}, in {self.context.where()}"]
        if names:
            parts.append(", ".join(names))
        if stack:
            parts.append(f"stack: {stack}")
        return "; ".join(parts)


@functools.cache
def _judgeable(func) -> bool:
    """Whether calls of this overload are judged at all (asked of every call the program makes: kept per overload)."""
    if torch.Tag.nondeterministic_seeded in func.tags or torch.Tag.dynamic_output_shape in func.tags:
        return False  # draws from the program's generator; a data-dependent shape
    if any(r.alias_info is not None for r in func._schema.returns) and live.variant_of(func) == "functional":
        return False  # a view: nothing computed
    return func._schema.name.split("::")[-1] not in _PLUMBING


def signature(func, args, kwargs) -> tuple:
    """What decides which kernel path a call takes, short of its values (see the design note)."""
    return _signed(func, args, kwargs)[0]


def _signed(func, args, kwargs) -> tuple[tuple, int]:
    """The call's ``signature`` and its tensors' elements, from one walk of the arguments."""
    count = [0]
    return (func, _key(args, count), _key(kwargs, count)), count[0]


def _key(value, count: list):
    """``value``'s structure, with each tensor's metadata and each float's class, adding its tensors' elements to
    ``count[0]`` (asked of every call the program makes: one pass, no pytree)."""
    if isinstance(value, torch.Tensor):
        count[0] += value.numel()
        return (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype, value.device, value.requires_grad)
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_key(v, count) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _key(v, count)) for k, v in value.items()))
    if isinstance(value, float):
        return ("float", value == 0, value == 1, value < 0, math.isfinite(value))
    if isinstance(value, complex):
        return ("complex", value == 0, value == 1)
    return value


def _judged(prepared: call.Prepared):
    """``prepared`` judged as the ops engine judges a case, less what a live call makes redundant.

    The op is the one aten overload seen, so its trace is known without a
    traced rerun; and when every tensor is contiguous the layout reference
    would be the same call again (a determinism check, which is not watch's
    business), so the call's own result stands in for it and the precision
    reference does the judging.
    """
    refs = References(live.base(prepared), getattr(torch, prepared.case.dtype), seed=0)  # copies the inputs: before the call
    ran = call.execute(prepared)
    trace = Trace(ops=[prepared.function])
    refs.__dict__["trace"] = trace  # the cached property, filled
    if not prepared.case.layouts:
        refs.__dict__["contiguous"] = Reference(value=ran.result, error=ran.error)
    facts = read_facts(trace, refs.base.tensors, ran.result, fallback=prepared.case.op)
    facts = dataclasses.replace(facts, storage_defined=prepared.case.op.split(".")[1] in STORAGE_DEFINED)
    evidence = Evidence(prepared, ran, refs, facts, function_name=f"torch.ops.{prepared.case.op}")
    return judge(evidence)


def _devices(device: str) -> list:
    return [] if device == "cpu" else [torch.device(device).index or 0]


def _user_frames(limit: int = 4) -> list:
    frames = [f for f in traceback.extract_stack()
              if "/torch/" not in f.filename and "/torchsleuth/" not in f.filename and not f.filename.startswith("<frozen")]
    return frames[-limit:]


# Ops not judged: run.trace's PLUMBING (they move or describe data) but for
# those that write data a kernel can get wrong, and the metadata calls a live
# program makes that a traced OpInfo call does not.
_PLUMBING = (PLUMBING - {"copy_", "clone", "contiguous", "fill_", "zero_", "zeros_like", "lift_fresh_copy", "resolve_conj", "resolve_neg"}) | {
    "set_", "detach_", "_has_compatible_shallow_copy_type", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
}
