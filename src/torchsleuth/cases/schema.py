"""Ops beyond OpInfo: an OpInfo-like entry for any op overload with a schema, its samples generated from the schema.

Design note. PyTorch's OpInfo database describes ~700 ops; aten has thousands
of overloads with CPU kernels (backward kernels, internal ``_foo`` ops), and
kernel authors register their own with ``torch.library``. A ``SchemaOp`` is
the entry of one overload (``torch.ops.aten.threshold_backward.default``, a
custom ``torch.ops.myns.myop.default``) with the attributes every stage
reads of an OpInfo entry (``cases.opinfo``), so the pipeline cannot tell it
apart. Its samples are candidate calls made from the schema
(``cases.schema_calls``), each tried on the CPU: a call that raises is loud,
not a finding, and is dropped; the first few that work are the samples
(``MAX_SAMPLES`` per dtype). The dtypes that make a working sample are the
supported ones; those among them whose result has a ``grad_fn`` are the
backward ones. Nothing is probed before a stage asks.

An in-place overload (a schema argument ``Tensor(a!)``) is the entry's
``inplace_variant``; its functional ``op`` calls it on clones of what it
writes, so the functional variant leaves its inputs alone. Out= overloads are
no entries: one that takes the functional overload's arguments and one tensor
``out`` (``norm.out`` of ``norm.ScalarOpt_dim``) is the entry's out variant,
called directly (``out_variant``); one with several out= tensors, or one
named otherwise (``grad_input``), is not swept.

Some overloads are not entries (``excluded``): those that draw random
numbers, that have no CPU kernel, that belong to a backend or tensor kind
this CPU sweep does not make (sparse, quantized, mkldnn, nested, ...), those
whose effect is outside their result (printing, asserting, resizing or
re-pointing storage, syncing), and those whose result is by contract a fact
about memory (strides, storage offsets, contiguity; a view or tensor placed
by ``size`` and ``stride`` arguments) or a dtype: the layouts and the precision reference
change those on purpose.

Names: ``aten.NAME.OVERLOAD`` (``str`` of the overload), custom ops as
``NS.NAME.OVERLOAD`` or ``NS::NAME`` (its default overload).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import dtypes as dtype_names
from . import reach, schema_calls

# Working samples kept per dtype, and candidate calls tried per dtype to find them.
MAX_SAMPLES = 4
MAX_TRIES = 16

_DTYPES = tuple(getattr(torch, name) for name in dtype_names.NAMES)

# --- overloads not called blindly ---------------------------------------------------------------

# Words of a packet's name that say it needs a backend or tensor kind the CPU sweep does not make.
_FAMILIES = frozenset({
    "sparse", "quantized", "dequantize", "mkldnn", "mkl", "nested", "cudnn", "miopen", "vulkan", "mps", "cuda", "cufft",
    "cslt", "nnpack", "xnnpack", "fbgemm", "xla",
})
# Prefixes of packets that make or need quantized tensors, or functorch's batched ones.
_KINDS = ("q_", "quantize_", "int_repr", "qscheme", "_add_batch_dim", "_remove_batch_dim")
# Words (their starts) of a packet's name that say its result describes memory, not values: what the layouts change.
_MEMORY = ("stride", "storage", "contiguous", "overlap")
# Overloads whose effect is outside their result: printing, asserting, constraining, storage and size, syncing.
_EFFECTS = ("_print", "_assert_", "_functional_assert_", "sym_constrain_range", "_functional_sym_constrain_range",
            "set_", "resize", "_resize", "record_stream", "_local_scalar_dense", "_make_dep_token")


OUT = "an out= overload: swept as the out variant of its functional op where it takes one tensor out"


def excluded(op) -> str:
    """Why the overload is no entry (a sentence), or "" when it is one."""
    schema = op._schema
    base = schema.name.split("::")[-1]
    if any(getattr(a, "is_out", False) for a in schema.arguments):
        return OUT
    if torch.Tag.nondeterministic_seeded in op.tags:
        return "it draws random numbers"
    if not _has_kernel(op):
        return "it has no CPU kernel"
    if set(base.split("_")) & _FAMILIES or base.startswith(_KINDS):
        return "it needs a backend or tensor kind (sparse, quantized, batched, mkldnn, nested, cudnn, ...) a CPU sweep does not make"
    if base.startswith(_EFFECTS) or base == "set":
        return "its effect is outside its result (printing, asserting, storage or size, a sync)"
    if any(w.startswith(_MEMORY) for w in base.split("_")) or base == "slice_inverse" or {"size", "stride"} <= {a.name for a in schema.arguments}:
        return "its result is defined by memory (strides, storage offset, contiguity), which the layouts change by design"
    if [str(r.real_type) for r in schema.returns] == ["ScalarType"]:
        return "its result is a dtype, which the precision reference changes by design"
    return ""


def _has_kernel(op) -> bool:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return any(has(reach.qualified(op), key) for key in reach.KERNEL_KEYS)
    except RuntimeError:  # a TorchScript-only operator
        return False


# --- names ---------------------------------------------------------------------------------------


def canonical(name: str) -> str:
    """``NS.NAME.OVERLOAD`` for any spelling (``ns::name`` is its default overload; ``ns::name.ov``); "" if malformed."""
    if "::" in name:
        namespace, _, rest = name.partition("::")
        name = f"{namespace}.{rest}" if "." in rest else f"{namespace}.{rest}.default"
    parts = name.split(".")
    return name if len(parts) == 3 and all(p.replace("_", "a").isalnum() for p in parts) else ""


def overload_of(name: str):
    """The ``OpOverload`` a (canonical) name names, or None."""
    namespace, packet, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except (AttributeError, RuntimeError):
        return None


_ENTRIES: dict[str, SchemaOp] = {}


def for_name(name: str) -> SchemaOp | None:
    """The entry of the overload ``name`` names, the same object each time; None for no overload, or an excluded one.

    Not remembered while None: a custom op may be registered later (``--import``).
    """
    name = canonical(name)
    if name in _ENTRIES or not name:
        return _ENTRIES.get(name)
    op = overload_of(name)
    if op is None or excluded(op):
        return None
    entry = _ENTRIES[name] = SchemaOp(name, op)
    return entry


def why_not(name: str) -> str:
    """Why the overload ``name`` (or, for ``NS.NAME``, its packet) is no entry, a sentence; "" when it is one or names none."""
    full = canonical(name)
    if full:
        op = overload_of(full)
        return excluded(op) if op is not None else ""
    namespace, _, packet = name.partition(".")
    try:
        found = [overload_of(f"{namespace}.{packet}.{o}") for o in getattr(getattr(torch.ops, namespace), packet).overloads()]
    except (AttributeError, RuntimeError):
        return ""
    reasons = [excluded(op) for op in found if op is not None]
    if not reasons or not all(reasons):  # no such packet, or some overload of it is an entry
        return ""
    return next((r for r in reasons if r != OUT), reasons[0])


@functools.cache
def aten_names() -> tuple[str, ...]:
    """Every aten overload that is an entry, as ``aten.NAME.OVERLOAD``, sorted (no call is made)."""
    return namespace_names("aten")


def namespace_names(namespace: str) -> tuple[str, ...]:
    """Every overload of ``namespace`` registered now that is an entry, sorted."""
    found = []
    prefix = namespace + "::"
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        if qualified.startswith(prefix):
            base, _, overload = qualified[len(prefix):].partition(".")
            name = f"{namespace}.{base}.{overload or 'default'}"
            op = overload_of(name) if canonical(name) else None
            if op is not None and not excluded(op):
                found.append(name)
    return tuple(found)


def namespaces() -> frozenset[str]:
    """The namespaces of every op registered now (aten, prims, custom ones)."""
    return frozenset(name.partition("::")[0] for name in torch._C._dispatch_get_all_op_names())


# --- the entry -------------------------------------------------------------------------------------


class SchemaOp:
    """An OpInfo-like entry of one overload, its samples generated from its schema and probed on the CPU."""

    variant_test_name = ""
    method_variant = None
    decorators = ()
    supports_out = False

    def __init__(self, name: str, op):
        self.name = name
        self.overload = op
        namespace, _, base = op._schema.name.partition("::")
        # the aten packet the pipeline reads for tags and sibling overloads; a custom op's names none
        self.aten_name = base if namespace == "aten" else op._schema.name
        schema = op._schema
        written = tuple(i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write)
        self.op = schema_calls.OverloadCall(op, written)
        in_place = written == (0,) and torch.Tag.inplace_view not in op.tags
        self.inplace_variant = schema_calls.OverloadCall(op) if in_place else None
        out = reach.single_out(str(op)) if namespace == "aten" and not written else None
        self.out_variant = schema_calls.OverloadCall(out) if out is not None else None  # the out= overload, called directly
        self.supports_out = out is not None
        first = schema.arguments[:1]
        self.reason = schema_calls.unsupported(schema) or ("" if first and not first[0].kwarg_only else "it takes no positional argument")
        self._working: dict[torch.dtype, tuple[schema_calls.Call, ...]] = {}  # filled by one probe (``_probed``)
        self._backward: frozenset[torch.dtype] = frozenset()
        self._error = ""

    def __repr__(self) -> str:
        return f"SchemaOp({self.name})"

    @property
    def supports_autograd(self) -> bool:
        return bool(self.supported_backward_dtypes("cpu"))

    def supported_dtypes(self, device_type: str) -> set[torch.dtype]:
        """The dtypes in which a generated call works on the CPU."""
        self._probed()
        return {dtype for dtype, calls in self._working.items() if calls}

    def supported_backward_dtypes(self, device_type: str) -> set[torch.dtype]:
        """The floating and complex supported dtypes whose first sample's result has a ``grad_fn`` when its inputs need grad."""
        self._probed()
        return set(self._backward)

    def sample_inputs(self, device, dtype: torch.dtype, requires_grad: bool = False):
        """The working calls in ``dtype`` as samples (OpInfo's ``SampleInput`` shape: the first argument as ``input``,
        the others by position and keyword)."""
        self._probed()
        for call in self._working.get(dtype, ()):
            args, kwargs = self._make(call, dtype, requires_grad)
            if str(device) != "cpu":
                args, kwargs = _moved(args, device), _moved(kwargs, device)
            yield Drawn(args[0], tuple(args[1:]), kwargs)

    def public_name(self, variant: str) -> str:
        """A repro script's expression for the variant's callable ("torch.ops.aten.relu_.default"); "" where it has none."""
        function = {"inplace": self.inplace_variant, "out": self.out_variant}.get(variant, self.op)
        return function.expression() if function is not None else ""

    def _probed(self) -> None:
        """Probe the op once per process: here for a custom op, through the probe processes for aten's (``_shared``)."""
        if self._working or self.reason:
            return
        if self.name.startswith("aten."):
            _shared(self)
        else:
            self._probe_here()

    def _settle(self, reason: str = "") -> None:
        """Say why the op makes no samples, where it makes none."""
        if not any(self._working.values()):
            self.reason = reason or f"no call generated from the schema succeeded: {self._error or 'none was made'}"

    def _probe_here(self) -> None:
        """Try the candidate calls in every dtype in this process, then the backward of those that work."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for dtype in _DTYPES:
                self._working[dtype] = self._try(dtype)
            self._backward = frozenset(d for d, calls in self._working.items() if calls and dtype_names.is_inexact(d) and self._differentiable(d))
        self._settle()

    def _try(self, dtype: torch.dtype) -> tuple[schema_calls.Call, ...]:
        found = []
        for call in schema_calls.calls(self.overload._schema, MAX_TRIES):
            schema_calls.say("try", self.name, _key(dtype, call))
            args, kwargs = self._make(call, dtype)
            try:
                for t in schema_calls.tensors(self.overload(*args, **kwargs)):
                    t.resolve_conj().resolve_neg()  # a result that cannot be read (a lazy negation of bools) does not work
            except Exception as e:  # a call the kernel refuses: loud, not a finding
                self._error = self._error or f"{type(e).__name__}: {schema_calls.first_line(e)}"
                continue
            found.append(call)
            if len(found) == MAX_SAMPLES:
                break
        return tuple(found)

    def _differentiable(self, dtype: torch.dtype) -> bool:
        """Whether the first working call in ``dtype`` differentiates: a result with a ``grad_fn`` whose backward runs."""
        schema_calls.say("try", self.name, _key(dtype, None))
        args, kwargs = self._make(self._working[dtype][0], dtype, requires_grad=True)
        inputs = [t for t in schema_calls.tensors([*args, *kwargs.values()]) if t.requires_grad]
        try:
            with torch.enable_grad():
                outputs = [t for t in schema_calls.tensors(self.op(*args, **kwargs)) if t.grad_fn is not None]
                if outputs:
                    torch.autograd.grad(outputs, inputs, [torch.ones_like(t) for t in outputs], allow_unused=True)
        except Exception:  # no autograd formula, or one that refuses these inputs: no backward
            return False
        return bool(outputs)

    def _make(self, call: schema_calls.Call, dtype: torch.dtype, requires_grad: bool = False) -> tuple[list, dict]:
        args, kwargs = schema_calls.make(self.overload._schema, call, dtype, self.name)
        if requires_grad:
            args, kwargs = schema_calls.requiring_grad(args), dict(zip(kwargs, schema_calls.requiring_grad(list(kwargs.values()))))
        return args, kwargs

    def _record(self) -> dict:
        """What the probe found, as JSON."""
        working = {dtype_names.name(d): [[list(c.shape), list(c.choice)] for c in calls] for d, calls in self._working.items() if calls}
        return {"working": working, "backward": sorted(dtype_names.name(d) for d in self._backward), "error": self._error}

    def _adopt(self, record: dict) -> None:
        """Take a probe's record (``_record``) made in another process."""
        self._working = {getattr(torch, d): tuple(schema_calls.Call(shape=tuple(s), choice=tuple(c)) for s, c in calls)
                         for d, calls in record["working"].items()}
        self._working.update({d: () for d in _DTYPES if d not in self._working})
        self._backward = frozenset(getattr(torch, d) for d in record["backward"])
        self._error = record["error"]
        self._settle(record.get("reason", ""))


@dataclass(frozen=True)
class Drawn:
    """One generated call, read as the OpInfo adapter reads a ``SampleInput``."""

    input: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def _moved(value, device):
    """``value`` with every tensor in it (in lists, tuples and dicts) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def _key(dtype: torch.dtype, call: schema_calls.Call | None) -> str:
    """A probe call's name: its dtype and candidate, or the dtype's backward probe."""
    return f"{dtype_names.name(dtype)}|{call.key() if call is not None else 'backward'}"


# --- probing aten's overloads in processes of their own ---------------------------------------------------
#
# A blind call of an internal kernel can kill the process (``_batch_norm_no_update`` with running stats of
# the wrong size) or never return, so aten's overloads are probed in child processes
# (``schema_calls.probe_elsewhere``), every unprobed aten entry of this process in one go. The records are kept
# in a file that the processes this one starts (the sweep's workers) read instead of probing again; its path is
# in the environment (``PROBES``). A custom op is probed where it is asked for: the user's module that
# registers it is loaded there, not in the children.

PROBES = "TORCHSLEUTH_SCHEMA_PROBES"


def _shared(entry: SchemaOp) -> None:
    """Give ``entry`` its probe record: from the file of probes, else by probing it and every other pending entry."""
    records = _read(os.environ.get(PROBES, ""))
    if entry.name not in records:
        pending = [e for e in _ENTRIES.values() if e.name.startswith("aten.") and not e._working and not e.reason]
        names = [e.name for e in dict.fromkeys([entry, *pending])]
        records.update(schema_calls.probe_elsewhere(names, "from torchsleuth.cases.schema import _serve; _serve()"))
        _write(records)
    for e in [entry, *_ENTRIES.values()]:
        if e.name in records and not e._working and not e.reason:
            e._adopt(records[e.name])


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write(records: dict) -> None:
    """Keep ``records`` in this process's file of probes (made on the first write), named in the environment."""
    path = os.environ.get(PROBES) or ""
    if not path:
        handle, path = tempfile.mkstemp(prefix="torchsleuth-probes-", suffix=".json")
        os.close(handle)
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        os.environ[PROBES] = path
    with open(path + ".part", "w") as f:
        json.dump(records, f)
    os.replace(path + ".part", path)


def _serve() -> None:
    """A probe child (``schema_calls.probe_elsewhere``): probe each op named on stdin, saying each call and each record."""
    for name in schema_calls.serving():
        entry = for_name(name)
        if entry is not None:
            if not entry.reason:
                entry._probe_here()
            schema_calls.say("done", name, entry._record())
