"""The ``internal`` search: the aten kernels a public op dispatches to, called directly, under every layout.

Design note. A public op reaches internal aten kernels (``F.softmax`` ->
``aten._softmax``, ``F.layer_norm`` -> ``native_layer_norm``, ``F.linear`` ->
``mm``, ``F.group_norm`` -> ``native_group_norm``) and often makes their inputs
contiguous on the way, or picks a path, so the sweep never calls them with
the layouts, dtypes and values other callers give them: other ops,
torch.compile's decompositions, user code calling ``torch.ops.aten``. This
search finds them in the dispatch trace of the sample's contiguous functional
call (a ``TorchDispatchMode`` sees each call as the kernel receives it, after
composite ops decomposed) and calls each directly:

``internal:aten.OVERLOAD#K`` replaces the case's call by the K-th call of
``aten.OVERLOAD`` in that trace, with the arguments the trace captured (the
tensors detached, contiguous clones on the CPU, as a sample's are). The
sample becomes that call's (``input`` its first argument, ``args`` the other
positional ones, ``kwargs`` its keyword ones), so the engine's references
(float64 on the CPU), contracts and layouts apply to it; the function
becomes the overload itself (``cases.reach.calls``), and the repro script
calls ``torch.ops.aten.OVERLOAD``. The edit re-traces the sample as the
edits before it left it, seeded, so a case replays from its id alone (the
edit is handed the case's op for that, as every search's ``apply`` is).

Which outputs are judged: those the op's own call uses (read by a later
call, or part of its result), found in the same trace. Where that is not
all of them the edit says which, ``internal:aten.OVERLOAD#K>0``, and the
case calls the overload and keeps those (``cases.reach.Outputs``): the rest
are buffers for a backward that holds nothing the op promises
(``_ctc_loss``'s ``log_alpha`` is partly uninitialized,
``_embedding_bag_forward_only``'s bags are empty on its fast path only).
``native_layer_norm``'s ``mean`` and ``rstd`` go unjudged with them: the
backward sweep judges what they feed. A call none of whose outputs the op
uses is not planned.

Which overloads, from facts, not a list of names (``eligible``): not of the
op's own packets (``cases.reach.packets``, and ``NAME``'s for an
``nn.functional.NAME`` entry with no aten name of its own: the sweep calls
those anyway);
with a kernel of its own on the CPU (a ``CPU`` or ``CompositeExplicit*``
kernel; a ``CompositeImplicitAutograd`` one decomposes and never shows in a
trace); computing a new tensor from tensors: not a view (a return that
aliases an argument, ``Tag.view_copy``), nothing written (in-place, out=,
``resize_``), not a factory (no tensor argument, or a ``device`` argument:
``empty_like``, ``_to_copy``), a tensor returned (not ``_local_scalar_dense``);
not random (``Tag.nondeterministic_seeded``: a direct call draws differently);
not pointwise (``Tag.pointwise``: TensorIterator treats every layout of every
pointwise kernel alike, and each such op is swept with every layout on its
own). ``MEMORY`` names the few pure memory ops no fact tells apart.

The plan (functional variant only), for ``MAX_SAMPLES`` samples spread over
the op's list (``max_pool2d`` has 1440, each call laid out a dozen ways):
for each eligible overload, its calls with distinct argument shapes and
values, at most ``MAX_CALLS`` (an RNN's cell calls ``addmm`` once per step
with the same shapes). A sample is told by its shapes and argument values,
so the choice is the same in every process, whichever object holds it. The
engine tries each under the sweep's layouts (``assignments``): the direct
call's whole point is inputs the public op never passes (transposed,
strided, at an offset), so its tensors take each layout together, one case
a layout (the shrinker then drops the layouts of the arguments that do not
matter). A kernel that refuses a layout raises: loud, not a finding.

The trace is taken on the CPU, where samples are made: on another device the
public op may pick another kernel, and a CPU-only one raises there.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
import zlib
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..cases import opinfo, reach
from ..cases.plan import Assignment, jointly, spread
from ..errors import UsageError
from ..run import call, tree
from ..run.samples import samples_of
from .registry import Search

DESCRIPTION = ("the internal aten kernels an op dispatches to (aten._softmax, native_layer_norm, mm, native_group_norm, ...) "
               "called directly, under the layouts the public op never passes them")
VERB = reach.INTERNAL
FORM = f"{VERB}:aten.OVERLOAD#K[>OUTPUTS]"

MAX_SAMPLES = 16  # samples per op and dtype whose trace is searched, spread over the list
MAX_CALLS = 3  # calls of one overload per sample, each with other shapes or values
# The kernels that count as an overload's own on the CPU (not CompositeImplicitAutograd: it decomposes).
OWN_KERNELS = frozenset({"CPU", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"})
# Pure memory ops that neither alias, write nor carry a tag that says so: a copy under another name.
MEMORY = frozenset({"clone", "copy", "_unsafe_view", "_reshape_copy", "_copy_from", "_copy_from_and_resize"})
# How many traced samples are kept (plan and the layout assignments ask for the same sample in turn).
KEPT_TRACES = 8


def edit(overload: str, k: int, kept: tuple[int, ...] = ()) -> str:
    """The edit calling the ``k``-th call of ``overload`` ("aten._softmax.default") directly, judged on outputs ``kept``
    (all of them for ())."""
    return f"{VERB}:{overload}#{k}" + (f">{','.join(map(str, kept))}" if kept else "")


def plan(op: str, variant: str, dtype: str, sample) -> list[tuple[str, ...]]:
    """One edit for each distinct call of an eligible internal overload in the sample's trace (see the design note)."""
    if variant != "functional":
        return []
    entry = opinfo.get(op)
    if reach.random(entry) or _key(sample) not in _chosen(op, dtype):
        return []
    own = _own(entry)
    planned: list[tuple[str, ...]] = []
    seen: dict[str, list] = {}
    counts: dict[str, int] = {}
    for traced in _traced(op, sample):
        k = counts.get(traced.name, 0)
        counts[traced.name] = k + 1
        if traced.name.split(".")[1] in own or not traced.used:
            continue  # the sweep calls it anyway, or nothing of it reaches the op's result
        signature = _signature(traced.args, traced.kwargs)
        found = seen.setdefault(traced.name, [])
        if signature in found or len(found) >= MAX_CALLS:
            continue
        found.append(signature)
        everything = len(traced.used) == _returns(traced.name)
        planned.append((edit(traced.name, k, () if everything else traced.used),))
    return planned


def _own(entry) -> set[str]:
    """The op's own packets (``cases.reach.packets``), and for an ``nn.functional.NAME`` entry OpInfo gives no aten
    name (``nn.functional.embedding``), ``NAME``'s: the sweep calls those kernels already."""
    own = set(reach.packets(entry))
    parts = entry.name.split(".")
    if parts[:2] == ["nn", "functional"] and len(parts) > 2:
        own |= {name for name in (parts[2], parts[2] + "_") if reach.packet(name) is not None}
    return own


@functools.lru_cache(maxsize=8)
def _chosen(op: str, dtype: str) -> frozenset[str]:
    """The keys of the ``MAX_SAMPLES`` samples, spread over the op's list, whose calls are traced for this search."""
    samples = samples_of(op, dtype)
    return frozenset(_key(samples[i]) for i in spread(len(samples), MAX_SAMPLES))


def _key(sample) -> str:
    """A sample told by its shapes, its other arguments and its values (the same in every process)."""
    return f"{_signature((sample.input, *sample.args), sample.kwargs)}:{zlib.crc32(b''.join(map(_bytes, tree.sample_tensors(sample).values())))}"


def _bytes(t: torch.Tensor) -> bytes:
    try:
        return t.detach().resolve_conj().resolve_neg().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError):  # no plain storage to read (sparse, quantized): its shape tells it apart
        return b""


def assignments(op: str, edits: tuple[str, ...], sample, layouts: tuple[str, ...]) -> list[Assignment] | None:
    """The layouts a searched case with ``edits`` is tried under: every one for a direct call, jointly; None for a case
    of another search."""
    chosen = [e for e in edits if e.startswith(VERB + ":")]
    if not chosen:
        return None
    for e in edits[: edits.index(chosen[-1]) + 1]:
        if e.startswith(VERB + ":"):
            sample = apply(sample, e.partition(":")[2], op=op)
    return jointly(tree.sample_tensors(sample), layouts)  # each layout on every tensor it fits at once


def apply(sample, rest: str, *, op: str = ""):
    """The sample of the ``K``-th call of ``aten.OVERLOAD`` (``rest`` is ``aten.OVERLOAD#K[>OUTPUTS]``) in ``op``'s call
    of ``sample`` (which outputs are judged is ``cases.reach.calls``'s business)."""
    name, _, position = rest.partition("#")
    k, _, kept = position.partition(">")
    if not k.isdigit() or reach.overload(name) is None:
        raise UsageError(f"{VERB}:{rest} names no call of an aten overload; the form is {FORM} (aten._softmax.default#0)")
    if kept and not all(i.isdigit() and int(i) < _returns(name) for i in kept.split(",")):
        raise UsageError(f"{VERB}:{rest} keeps outputs {name} does not have: it has {_returns(name)}, counted from 0")
    if not op:
        raise UsageError(f"{VERB}:{rest} needs the op whose call it re-traces; replay it as part of a case")
    found = [traced for traced in _traced(op, sample) if traced.name == name]
    if int(k) >= len(found):
        raise UsageError(f"{op}'s call of this sample makes {len(found)} call(s) of {name} with a kernel of its own, "
                         f"so {VERB}:{rest} names none; K counts from 0")
    args, kwargs = found[int(k)].args, found[int(k)].kwargs
    args, kwargs = tree.map_values(args, _fresh), {key: tree.map_values(value, _fresh) for key, value in kwargs.items()}
    first, *rest_ = args or (None,)
    return dataclasses.replace(sample, input=first, args=tuple(rest_), kwargs=kwargs, output_process_fn_grad=_same)


# --- which overloads, and the trace --------------------------------------------------------


@functools.cache
def eligible(name: str) -> bool:
    """Whether a direct call of overload ``name`` ("aten._softmax.default") is this search's (see the design note)."""
    op = reach.overload(name)
    if op is None or not OWN_KERNELS & set(reach.kernel_keys(name)) or name.split(".")[1] in MEMORY:
        return False
    if {torch.Tag.view_copy, torch.Tag.pointwise, torch.Tag.nondeterministic_seeded, torch.Tag.inplace_view} & set(op.tags):
        return False
    schema = op._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments) or any(r.alias_info is not None for r in schema.returns):
        return False  # writes an argument (in-place, out=) or returns a view of one
    if any(a.name == "device" for a in schema.arguments):
        return False  # a factory: takes its options, not its values, from any tensor it is given
    takes = any(_holds_tensor(a.type) for a in schema.arguments)
    return takes and any(_holds_tensor(r.type) for r in schema.returns)


def _holds_tensor(kind) -> bool:
    kind = kind.getElementType() if isinstance(kind, torch._C.OptionalType) else kind
    if isinstance(kind, torch._C.ListType):
        kind = kind.getElementType()
        kind = kind.getElementType() if isinstance(kind, torch._C.OptionalType) else kind
    return isinstance(kind, torch._C.TensorType)


@functools.cache
def _returns(name: str) -> int:
    return len(reach.overload(name)._schema.returns)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Traced:
    """One call of an eligible overload in an op's trace: its arguments (tensors cloned as it received them), and which
    of its outputs the op's call went on to use (read by a later call, or part of the op's result)."""

    name: str
    args: tuple
    kwargs: dict
    used: tuple[int, ...]


class _Capture(TorchDispatchMode):
    """Every call of an eligible overload, in order, and where its outputs went (see ``Traced``)."""

    def __init__(self):
        super().__init__()
        self.calls: list[list] = []  # [name, args, kwargs, used (a set)]
        self.outputs: list[tuple[torch.Tensor, int, int]] = []  # (output tensor, call, output position)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.read((args, kwargs))
        name = str(func)
        keep = name.startswith("aten.") and eligible(name)
        if keep:  # the arguments as they were before the call (a kernel may write an argument its schema does not mark)
            captured = (tree.map_values(tuple(args), _fresh), {k: tree.map_values(v, _fresh) for k, v in kwargs.items()})
        result = func(*args, **kwargs)
        if keep:
            self.calls.append([name, *captured, set()])
            outputs = result if _returns(name) > 1 else (result,)
            for position, value in enumerate(outputs):
                self.outputs += [(t, len(self.calls) - 1, position) for _, t in tree.leaves(value, "out")]
        return result

    def read(self, value) -> None:
        """Mark the recorded outputs ``value`` holds, or shares memory with, as used."""
        held = {id(t) for _, t in tree.leaves(value, "")} | {_storage(t) for _, t in tree.leaves(value, "") if t.numel()}
        for t, index, position in self.outputs:
            if id(t) in held or (t.numel() and _storage(t) in held):
                self.calls[index][3].add(position)


def _storage(t: torch.Tensor):
    try:
        return ("storage", t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # no storage (sparse): identity alone
        return ("tensor", id(t))


_TRACES: dict[tuple[str, int], tuple[Any, list]] = {}


def _traced(op: str, sample) -> list[Traced]:
    """The eligible calls the op's functional call of ``sample`` makes, its tensors contiguous (kept for a few samples)."""
    key = (op, id(sample))
    held = _TRACES.get(key)
    if held is not None and held[0] is sample:
        return held[1]
    function = opinfo.functions(opinfo.get(op))["functional"]
    contiguous = tree.map_sample_tensors(sample, lambda path, t: _fresh(t))
    capture = _Capture()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call.seed("cpu")
        try:
            with capture:
                result = function(contiguous.input, *contiguous.args, **contiguous.kwargs)
            capture.read(result)
        except Exception:  # the op refused the sample: the calls before that were made all the same
            pass
    found = [Traced(name=name, args=args, kwargs=kwargs, used=tuple(sorted(used))) for name, args, kwargs, used in capture.calls]
    if len(_TRACES) >= KEPT_TRACES:
        _TRACES.pop(next(iter(_TRACES)))
    _TRACES[key] = (sample, found)  # the sample held, so its id is not reused while the entry lives
    return found


def _fresh(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone(memory_format=torch.contiguous_format)
    return value


def _same(value):
    return value


def _signature(args: tuple, kwargs: dict) -> str:
    """What tells two calls of one overload apart: tensor shapes and dtypes, and every other argument's value."""
    def describe(value):
        if isinstance(value, torch.Tensor):
            return f"T{tuple(value.shape)}:{value.dtype}"
        return repr(value)

    return repr([tree.map_values(args, describe), {k: tree.map_values(v, describe) for k, v in kwargs.items()}])


SEARCH = Search(name="internal", description=DESCRIPTION, edits="the call: an internal kernel of the op's trace called directly", order=50,
                plan=plan, verb=VERB, form=FORM, apply=apply, layouts=assignments)
