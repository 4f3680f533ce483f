"""Turning a case into a call, and making the call with everything around it recorded.

Design note. ``prepare`` rebuilds a case's tensors: each tensor of the sample
is put through its layout transform and moved to the device (every tensor,
the contiguous ones too, gets a fresh poisoned storage with guard values;
off the CPU the storage is made on the host and moved in one copy,
run.transfer.placed, and kept as ``Prepared.host``).
The variant decides the call around them:

* functional, method: ``f(input, *args, **kwargs)``;
* inplace: the in-place variant; ``input`` (and its items, for a tensor
  list) is written;
* out: the functional variant with ``out=`` tensors shaped like the
  reference result, filled with poison so that an element it does not write
  shows, and laid out by the case;
* backward: the functional variant, then ``torch.autograd.grad`` of its
  differentiable outputs against seeded output gradients (``grad_output``,
  laid out by the case too); the result is the input gradients.

``execute`` makes the call under a ``Tracer`` and snapshots every storage
before and after it, so the judge can see writes that were not declared and
writes outside a view. References (run.references) make the same call on
other tensors through ``compute``.

Waiting for the device. Several workers on one GPU take turns on it, so each
time a case waits for the device it waits for the other processes' turns too:
a case costs about as many turns as it waits, and each op it queues there is
paid in the others' turns too (bench/cuda-sweep.md). Tensors therefore move
as run.transfer moves them (laid out on the host, queued through pinned
memory, back in batches), the storages a case's tensors were copied from are
its first snapshot, and a call is waited for once, after its snapshots are
queued.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..cases import layouts
from ..cases.opinfo import Sample
from ..cases.records import Case
from ..errors import one_line
from . import tree
from .records import CallSpec, TensorSpec
from .trace import Trace, Tracer
from .transfer import placed, storage_of, to_device
from .transfer import rebuilt as rebuilt_tensor

# Every call (test and references alike) starts from this seed, so random ops
# draw the same numbers wherever PyTorch promises they do.
CALL_SEED = 20260405
# Storages up to this many bytes travel inline in findings and repro scripts.
INLINE_BYTES = 1 << 20
# What a random in-place op's written tensors are filled with before each of
# its two runs (the engine's, and a coverage repro script's): an element that
# keeps its fill in both runs was never drawn.
PREFILLS = {"inexact": (float("nan"), 1234.5), "integer": (7, 11), "bool": (False, True)}


def prefills(dtype: torch.dtype) -> tuple:
    """The two fills for a tensor of ``dtype`` (``PREFILLS`` by its family)."""
    if dtype == torch.bool:
        return PREFILLS["bool"]
    return PREFILLS["inexact" if dtype.is_floating_point or dtype.is_complex else "integer"]


@dataclass
class Prepared:
    """A case's tensors and call, ready to run (live tensors; stays in the worker)."""

    case: Case
    function: Callable
    args: tuple
    kwargs: dict
    tensors: tree.Tensors  # every tensor argument by path, as laid out
    written: frozenset[str]  # paths the variant writes by contract
    process: Callable[[Any], Any]  # OpInfo's output_process_fn_grad
    grad_paths: tuple[str, ...] = ()  # backward: inputs differentiated
    processed: bool = False  # backward: the gradient is taken of process(result), not the result
    # path -> (the flat host storage a tensor was copied from, the device storage's address): run.transfer.placed,
    # off the CPU only. Read through ``host_storage``. Whoever writes a tensor before ``execute`` drops its path.
    host: dict = field(default_factory=dict)


@dataclass
class Ran:
    result: Any = None
    error: BaseException | None = None
    before: dict | None = None  # path -> flat copy of the storage
    after: dict | None = None
    # path -> (shape, stride, storage_offset) before the call
    meta: dict | None = None
    # path -> why its storage could not be read after the call (the call wrote over the tensor's own memory); its
    # ``after`` is then its ``before``, and nothing else of the call is judged
    unreadable: dict | None = None


def _call_of(sample: Sample, device: str) -> tuple[tuple, dict]:
    """The sample as ``(args, kwargs)``, its tensors where they are and a ``device`` argument set to ``device``."""
    kwargs = dict(sample.kwargs)
    if "device" in kwargs and kwargs["device"] is not None:
        kwargs["device"] = device
    return (sample.input, *sample.args), kwargs


def sample_call(sample: Sample, device: str) -> tuple[tuple, dict]:
    """The sample as ``(args, kwargs)`` with tensors on ``device``."""
    args, kwargs = _call_of(sample, device)
    moved = {path: to_device(t, device) for path, t in tree.call_leaves(args, kwargs).items()}
    return tree.replace_call(args, kwargs, moved)


def _lay_out(tensors: tree.Tensors, case: Case, host: dict) -> tree.Tensors:
    """Each tensor laid out by the case on its device; the host storages they were copied from go into ``host``."""
    found = {}
    for path, t in tensors.items():
        found[path], storage = placed(case.layout_of(path), t, case.device)
        if storage is not None:
            host[path] = (storage, found[path].untyped_storage().data_ptr())
    return found


def host_storage(prepared: Prepared, path: str) -> torch.Tensor | None:
    """The flat host storage ``path``'s tensor was copied from, while that tensor is still the one copied to (a
    Prepared remade with other tensors keeps the record, not the storage); None otherwise."""
    entry, t = prepared.host.get(path), prepared.tensors.get(path)
    if entry is None or t is None or t.untyped_storage().data_ptr() != entry[1]:
        return None
    return entry[0]


def prepare(case: Case, function: Callable, sample: Sample, *, reference_result: Any = None, grad_seed: int = 0) -> Prepared:
    args, kwargs = _call_of(sample, case.device)
    host: dict = {}
    inputs = _lay_out(tree.call_leaves(args, kwargs), case, host)
    args, kwargs = tree.replace_call(args, kwargs, inputs)
    written = frozenset()
    if case.variant == "inplace":
        written = frozenset(p for p in inputs if p == "input" or p.startswith("input["))
    if case.variant == "out":
        out = _lay_out(_out_templates(reference_result), case, host)
        kwargs = dict(kwargs, out=tree.replace(_plain(reference_result), "out", out))
        inputs = {**inputs, **out}
        written = frozenset(out)
    if case.variant == "backward":
        return _prepare_backward(case, function, sample, args, kwargs, inputs, reference_result, grad_seed, host)
    return Prepared(
        case=case, function=function, args=args, kwargs=kwargs, tensors=inputs, written=written,
        process=sample.output_process_fn_grad, host=host,
    )


def _plain(value: Any) -> Any:
    """``value`` with every tuple subclass (torch.return_types) made a plain tuple."""
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return tuple(_plain(v) for v in value)
    return value


def _out_templates(reference_result: Any) -> tree.Tensors:
    """Poison shaped like each output of the reference result, on the host (contiguous; ``prepare`` lays them out)."""
    found = {}
    for path, value in tree.output_leaves(reference_result):
        if value.layout == torch.strided:
            found[path] = torch.full(tuple(value.shape), layouts.poison(value.dtype), dtype=value.dtype)
        else:
            found[path] = torch.full_like(value, layouts.poison(value.dtype))
    return found


def differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)


def grad_outputs(reference_result: Any, process: Callable, seed: int) -> tree.Tensors:
    """Seeded output gradients, one per differentiable output, by path ``grad_output[i]`` (on the host: ``prepare``
    lays them out and moves them)."""
    outputs = [t for _, t in tree.output_leaves(process(reference_result)) if differentiable(t)]
    found = {}
    generator = torch.Generator().manual_seed(seed)
    for i, t in enumerate(outputs):
        values = torch.randn(t.shape, dtype=t.dtype if t.dtype.is_complex else torch.float64, generator=generator)
        found[f"grad_output[{i}]"] = values.to(t.dtype)  # rounded on the CPU, as a blocking copy rounds
    return found


def _prepare_backward(case, function, sample, args, kwargs, inputs, reference_result, grad_seed, host) -> Prepared:
    grad_paths = tuple(p for p, t in inputs.items() if differentiable(t))
    for p in grad_paths:
        inputs[p].requires_grad_(True)
    args, kwargs = tree.replace_call(args, kwargs, inputs)
    seeds = _lay_out(grad_outputs(reference_result, sample.output_process_fn_grad, grad_seed), case, host)
    return Prepared(
        case=case, function=function, args=args, kwargs=kwargs, tensors={**inputs, **seeds},
        written=frozenset(), process=sample.output_process_fn_grad, grad_paths=grad_paths,
        processed=sample.output_process_fn_grad(reference_result) is not reference_result, host=host,
    )


def synchronize(device: str) -> None:
    kind = torch.device(device).type
    if kind != "cpu":
        getattr(torch, kind).synchronize()


def seed(device: str) -> None:
    """Seed the generators a call on ``device`` draws from, and only those.

    ``torch.manual_seed`` also queues a seeding for every accelerator module
    that is not initialized, recording a stack trace each time: half the
    cost of a CPU sweep went there.
    """
    torch.default_generator.manual_seed(CALL_SEED)
    kind = torch.device(device).type
    if kind != "cpu":
        getattr(torch, kind).manual_seed(CALL_SEED)


def compute(prepared: Prepared, tensors: tree.Tensors | None = None) -> Any:
    """Make the call, on ``prepared``'s own tensors or on replacements for them."""
    tensors = prepared.tensors if tensors is None else tensors
    args, kwargs = tree.replace_call(prepared.args, prepared.kwargs, tensors)
    if "out" in prepared.kwargs:
        kwargs["out"] = tree.replace(prepared.kwargs["out"], "out", tensors)
    seed(prepared.case.device)
    if prepared.case.variant != "backward":
        return prepared.function(*args, **kwargs)
    inputs = [tensors[p] for p in prepared.grad_paths]
    outputs = [t for _, t in tree.output_leaves(prepared.process(prepared.function(*args, **kwargs))) if differentiable(t)]
    pairs = [(t, tensors[f"grad_output[{i}]"]) for i, t in enumerate(outputs) if t.requires_grad]
    if not pairs or not inputs:
        return {}
    outputs, seeds = [t for t, _ in pairs], [g for _, g in pairs]
    grads = torch.autograd.grad(outputs, inputs, seeds, allow_unused=True)
    return {f"grad[{p}]": g for p, g in zip(prepared.grad_paths, grads)}


def snapshot(tensors: tree.Tensors) -> dict:
    with torch.no_grad():
        return {path: storage_of(t).clone() for path, t in tensors.items()}


def metadata(t: torch.Tensor) -> tuple:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def host_snapshot(tensors: tree.Tensors, known: dict | None = None) -> dict:
    """``snapshot`` on the CPU: each storage copied to host memory once, where the judge reads it; a path of ``known``
    (host storages that hold what the tensor's does, ``Prepared.host``) is taken from there without a copy.

    Off the CPU the copies are asynchronous (into pinned memory, queued on the
    stream before whatever comes next): read them after a ``synchronize``. A
    device-side clone that the judge later copied to the host cost a kernel and
    a synchronizing copy per tensor, twice per case (bench/cuda-sweep.md).
    """
    known = known or {}
    with torch.no_grad():
        return {path: known[path] if path in known
                else storage_of(t).clone() if t.device.type == "cpu" else storage_of(t).to("cpu", non_blocking=t.device.type == "cuda")
                for path, t in tensors.items()}


def _readable_snapshot(tensors: tree.Tensors, before: dict) -> tuple[dict, dict]:
    """``host_snapshot`` path by path: the paths whose storage cannot be read stand in with their ``before`` copies,
    and are returned with the error reading them raised."""
    after, unreadable = {}, {}
    for path, t in tensors.items():
        try:
            after.update(host_snapshot({path: t}))
        except Exception as e:
            after[path] = before[path]
            unreadable[path] = one_line(e)
    return after, unreadable


def execute(prepared: Prepared) -> Ran:
    """The case's call, between snapshots of every storage it was given (on the CPU, whatever the device)."""
    known = {p: s for p in prepared.host if (s := host_storage(prepared, p)) is not None}
    ran = Ran(before=host_snapshot(prepared.tensors, known), meta={p: metadata(t) for p, t in prepared.tensors.items()})
    try:
        ran.result = compute(prepared)
    except Exception as e:  # the op refused the call: loud, so not a silent bug
        ran.error = e
    try:
        ran.after = host_snapshot(prepared.tensors)  # queued behind the call's kernels
    except Exception:  # a storage the call corrupted (tril's out= on a permuted out, now and then): whose, and why
        ran.after, ran.unreadable = _readable_snapshot(prepared.tensors, ran.before)
    try:
        synchronize(prepared.case.device)  # the copies have landed, and an asynchronous kernel error belongs to this call
    except Exception as e:
        ran.error = ran.error or e
    return ran


def rebuilt(ran: Ran, prepared: Prepared, *, device: str | None = None) -> tree.Tensors:
    """Fresh tensors with the storage contents and metadata the call started from."""
    found = {}
    for path, t in prepared.tensors.items():
        fresh = rebuilt_tensor(ran.before[path], ran.meta[path], t.device if device is None else device)
        found[path] = fresh.requires_grad_(True) if t.requires_grad else fresh
    return found


def traced(prepared: Prepared, tensors: tree.Tensors) -> tuple[Trace, frozenset[str]]:
    """The ops the call dispatches to, and the paths whose storage a schema says is written."""
    tracer = Tracer(tensors)
    try:
        with tracer:
            compute(prepared, tensors)
    except Exception:
        pass
    ptrs = {t.untyped_storage().data_ptr(): path for path, t in tensors.items()}
    return tracer.trace, frozenset(ptrs[p] for p in tracer.trace.written if p in ptrs)


# --- describing the call for findings and repro scripts --------------------------


def tensor_spec(path: str, t: torch.Tensor, layout: str, storage: torch.Tensor, meta: tuple) -> TensorSpec:
    """``t`` as it was before the call: ``storage`` and ``meta`` are the snapshots taken then."""
    import zlib

    shape, stride, offset = meta
    data, tiled = None, ()
    if storage.numel() * storage.element_size() <= INLINE_BYTES:
        try:
            raw = storage.cpu().contiguous().view(torch.uint8).numpy().tobytes() if storage.numel() else b""
            data = zlib.compress(raw)
        except RuntimeError:  # the snapshot left unreadable by a call that wrote over memory (judge.contracts): no values
            pass
    elif (found := tiling(storage, shape, stride, offset)) is not None:
        tiled, kept = found
        data = zlib.compress(kept.cpu().view(torch.uint8).numpy().tobytes())
    return TensorSpec(
        path=path, shape=shape, stride=stride, storage_offset=offset,
        storage_numel=storage.numel(), dtype=str(t.dtype).removeprefix("torch."), device=str(t.device),
        layout=layout, requires_grad=t.requires_grad, data=data, tiled=tiled,
    )


# The longest period tiling() looks for: an OpInfo sample's dim (the large oracle tiles samples' dims).
MAX_PERIOD = 64


def tiling(storage: torch.Tensor, shape, stride, offset: int) -> tuple[tuple[int, int], torch.Tensor] | None:
    """((dim, period), what to carry) when the tensor lies contiguously at the start of ``storage`` (then at most the
    layout's guard values) and is its first ``period`` entries along its longest dim tiled, bit for bit; what to carry
    is those entries, then the storage's elements past the tensor, flat, when they fit inline; else None."""
    numel = math.prod(shape)
    if not shape or offset or storage.numel() - numel not in range(layouts.GUARD + 1) \
            or tuple(stride) != tuple(torch.empty(shape, device="meta").stride()):
        return None
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(storage.element_size())
    if bits is None:
        return None
    t = storage.view(bits)[:numel].view(shape)
    dim = max(range(len(shape)), key=lambda d: shape[d])
    n = shape[dim]
    for period in range(1, min(MAX_PERIOD, n // 2) + 1):
        head = min(n - period, 4096)  # a short prefix first: most periods fail there
        if not torch.equal(t.narrow(dim, period, head), t.narrow(dim, 0, head)):
            continue
        if torch.equal(t.narrow(dim, period, n - period), t.narrow(dim, 0, n - period)):
            kept = torch.cat([storage[:numel].view(shape).narrow(dim, 0, period).reshape(-1), storage[numel:]])
            return ((dim, period), kept) if kept.numel() * kept.element_size() <= INLINE_BYTES else None
    return None


def call_spec(prepared: Prepared, ran: Ran, function_name: str) -> CallSpec:
    case = prepared.case
    specs = tuple(
        tensor_spec(p, t, case.layout_of(p), ran.before[p], ran.meta[p])
        for p, t in sorted(prepared.tensors.items(), key=lambda item: item[0].startswith("grad_output"))
    )
    try:
        args_src, kwargs_src = tree.call_source(prepared.args, prepared.kwargs)
        why_not = "" if function_name else "the op has no public name to call it by"
        if prepared.processed:
            why_not = "the gradient is taken through OpInfo's output_process_fn_grad, which has no source to write out"
    except tree.Unrepresentable as e:
        args_src = kwargs_src = ""
        why_not = f"an argument has no Python source: {e}"
    return CallSpec(
        function=function_name, args_src=args_src, kwargs_src=kwargs_src, tensors=specs,
        variant=case.variant, grad_paths=prepared.grad_paths, why_not=why_not,
    )
