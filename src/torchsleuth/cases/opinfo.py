"""The one adapter over PyTorch's OpInfo database (``torch.testing._internal``).

Design note. The OpInfo database is the only source of sample inputs for ~700
ops, but it is private API that moves between releases. Every access to it
lives here, behind a handful of functions that take and return plain values
(names, ``torch.dtype``, lists of samples as ``Sample`` tuples), so a change in
a future release is mended in one place. Everything here works on torch 2.4
through 2.14: it uses only ``op_db``, ``OpInfo.{name, variant_test_name, op,
method_variant, inplace_variant, supports_out, supports_autograd,
supported_dtypes, supported_backward_dtypes, sample_inputs, decorators}``,
``SampleInput.{input, args, kwargs, output_process_fn_grad}``,
``ReductionOpInfo.generate_args_kwargs`` and ``toleranceOverride.d``; each read
of an attribute that a release might lack goes through ``getattr`` with a
default.

An op the catalog lacks is found, by ``get``, among the entries registered in
this process (``register``) and then as an op overload whose samples are made
from its schema (``cases.schema``); they answer the same attributes.

Samples are always made on the CPU, from a seed fixed by op and dtype, so that
the same case gets the same values in every process and on every run, and the
device reference sees exactly the values the device saw.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..errors import UsageError
from . import extra_ops, reach, schema

# A reduction gets one extra sample whose reduced dim is this long: the
# OpInfo samples reduce over at most a few dozen elements, too few for
# low-precision accumulation error to show. Its values are positive, so that
# partial sums grow and an accumulation in the low-precision type stalls.
LONG_REDUCTION = 1024


@dataclass(frozen=True, slots=True)
class Sample:
    """One OpInfo sample, as plain values: ``op(input, *args, **kwargs)``."""

    input: Any
    args: tuple
    kwargs: dict
    # maps the op's output to what is differentiated (OpInfo's convention)
    output_process_fn_grad: Callable[[Any], Any]


@functools.cache
def _op_db() -> tuple:
    try:
        # some releases print to stdout on import ("Fail to import hypothesis ...", torch 2.4)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as e:  # a module it needs missing (torchsleuth declares numpy, expecttest, packaging)
        missing = getattr(e, "name", None) or "numpy expecttest packaging"
        raise UsageError(
            f"cannot load PyTorch's OpInfo database ({e}); install what it needs (pip install {missing.split('.')[0]})"
        ) from None
    return tuple(op_db) + extra_ops.ops()


def _full_name(opinfo) -> str:
    variant = getattr(opinfo, "variant_test_name", "")
    return f"{opinfo.name}.{variant}" if variant else opinfo.name


@functools.cache
def catalog() -> dict[str, Any]:
    """Every op by its catalog name ("addcmul", "normal.in_place")."""
    return {_full_name(o): o for o in _op_db()}


# Entries registered in this process by name (the Python API's user ops and callables), after the catalog's.
_REGISTERED: dict[str, Any] = {}


def register(name: str, entry) -> None:
    """Make ``entry`` (an OpInfo-like entry) the op ``name`` in this process, where the catalog has no such name."""
    _REGISTERED[name] = entry


def get(name: str):
    """The entry named ``name``: the catalog's, else one registered here, else an op overload's (``cases.schema``).

    Raises KeyError for a name none of them knows.
    """
    found = catalog().get(name) or _REGISTERED.get(name) or schema.for_name(name)
    if found is None:
        raise KeyError(name)
    return found


def source(opinfo) -> str:
    """Where the entry comes from: "opinfo", "torchsleuth" (``cases.extra_ops``), "schema" (``cases.schema``)."""
    if isinstance(opinfo, schema.SchemaOp):
        return "schema"
    return "torchsleuth" if isinstance(opinfo, extra_ops.ExtraOp) else "opinfo"


def dtypes(opinfo, device_type: str, *, backward: bool = False) -> set[torch.dtype]:
    try:
        if backward:
            if not getattr(opinfo, "supports_autograd", False):
                return set()
            return set(opinfo.supported_backward_dtypes(device_type))
        return set(opinfo.supported_dtypes(device_type))
    except Exception:  # a device type the op table does not know
        return set(opinfo.supported_dtypes("cpu")) if not backward else set()


def functions(opinfo) -> dict[str, Callable]:
    """The callable for each variant the op has ("backward" calls the functional one).

    Beyond the variants OpInfo declares, the in-place and out= siblings aten
    has for the op (``undeclared``).
    """
    found = {"functional": opinfo.op}
    if getattr(opinfo, "method_variant", None) is not None:
        found["method"] = opinfo.method_variant
    if getattr(opinfo, "inplace_variant", None) is not None:
        found["inplace"] = opinfo.inplace_variant
    if getattr(opinfo, "supports_out", False):
        found["out"] = getattr(opinfo, "out_variant", None) or opinfo.op  # an op swept from its schema: its out= overload
    if getattr(opinfo, "supports_autograd", False):
        found["backward"] = opinfo.op
    return {**found, **_siblings(opinfo)}


def undeclared(opinfo) -> tuple[str, ...]:
    """The variants ``functions`` offers that OpInfo does not declare ("inplace", "out")."""
    return tuple(_siblings(opinfo))


# The samples a sibling is probed with, and the dtypes tried first.
SIBLING_PROBES = 3
_PROBE_DTYPES = (torch.float32, torch.float64, torch.int64)
_SIBLINGS: dict[int, tuple[Any, dict[str, Callable]]] = {}


def _siblings(opinfo) -> dict[str, Callable]:
    """The in-place and out= siblings aten has where OpInfo declares none, that a probe does not prove invalid.

    In-place: ``torch.Tensor.NAME_`` (or ``torch.nn.functional.NAME_``) where
    aten has ``NAME_``, not a view's. Out: the op itself with ``out=``, where
    the op is the public ``torch.NAME`` and aten's packet has an out overload.
    Never for random ops, whose siblings draw differently. The probe calls
    each on a few samples: a sibling that raises on every one, or whose result
    has another shape or dtype than the functional call's, is not the op's.
    Values are not compared: a wrong value is what the sweep is for.
    """
    held = _SIBLINGS.get(id(opinfo))
    if held is None:
        held = _SIBLINGS[id(opinfo)] = (opinfo, _probed_siblings(opinfo))
    return held[1]


def _probed_siblings(opinfo) -> dict[str, Callable]:
    if isinstance(opinfo, extra_ops.ExtraOp) or not _public_index().get(id(opinfo.op)) or reach.random(opinfo):
        return {}
    name = reach.aten_name(opinfo)
    candidates = {}
    if getattr(opinfo, "inplace_variant", None) is None and reach.overloads(name + "_"):
        views = any(torch.Tag.inplace_view in reach.overload(o).tags for o in reach.overloads(name + "_"))
        plain = opinfo.name.split(".")[-1] if opinfo.name.startswith("nn.functional.") else ""
        function = getattr(torch.nn.functional, plain + "_", None) if plain else None
        function = function or getattr(torch.Tensor, name + "_", None)
        if function is not None and not views:
            candidates["inplace"] = function
    if not getattr(opinfo, "supports_out", False) and reach.direct(opinfo) and any(map(reach.is_out, reach.overloads(name))):
        candidates["out"] = opinfo.op
    return {variant: function for variant, function in candidates.items() if _probe(opinfo, variant, function)}


def probe_dtype(opinfo) -> torch.dtype | None:
    """The dtype a few of the op's samples are tried in to learn what its calls do: the first of ``_PROBE_DTYPES`` it
    supports on the CPU, else any it supports; None for none."""
    supported = dtypes(opinfo, "cpu")
    return next((d for d in _PROBE_DTYPES if d in supported), next(iter(sorted(supported, key=str)), None))


def _probe(opinfo, variant: str, function: Callable) -> bool:
    """Whether ``function`` works as the op's ``variant`` on one of a few samples, and never gives another shape or dtype."""
    dtype = probe_dtype(opinfo)
    if dtype is None:
        return False
    worked = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            probes = samples(opinfo, dtype)[:SIBLING_PROBES]
        except Exception:
            return False
        for sample in probes:
            try:
                expected = opinfo.op(sample.input, *sample.args, **sample.kwargs)
                if variant == "inplace":
                    got = function(sample.input.clone(), *sample.args, **sample.kwargs)
                else:
                    out = _like(expected)
                    function(sample.input, *sample.args, **sample.kwargs, out=out)
                    got = out
            except Exception:  # a sample this sibling refuses: in the sweep it raises, which is loud
                continue
            if _meta(got) != _meta(expected):
                return False
            worked = True
    return worked


def _like(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value, memory_format=torch.contiguous_format)
    if isinstance(value, (list, tuple)):
        return tuple(_like(v) for v in value)
    raise TypeError("the result is not made of tensors")


def _meta(value):
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.dtype
    if isinstance(value, (list, tuple)):
        return tuple(_meta(v) for v in value)
    return type(value)


def samples(opinfo, dtype: torch.dtype) -> list[Sample]:
    """The op's samples for ``dtype``, on the CPU, the same in every process."""
    seed = int.from_bytes(hashlib.sha256(f"{_full_name(opinfo)}|{dtype}".encode()).digest()[:4], "little")
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]), _outside_any_test():
        warnings.simplefilter("ignore")
        torch.default_generator.manual_seed(seed)  # samples are made on the CPU
        found = [_plain(s) for s in opinfo.sample_inputs("cpu", dtype, requires_grad=False)]
        found.extend(_long_reductions(opinfo, dtype))
    return found


@contextlib.contextmanager
def _outside_any_test():
    """Samples made as outside any unittest test, which they are. OpInfo's iterators look for the test they run in
    (``extract_test_fn``, in common_utils and as opinfo.core imported it) to seed each sample by its name: a walk of
    ``inspect.stack()`` that scans ``sys.modules`` for most frames, a tenth of a CPU sweep's time
    (bench/sweep-profile.md), and under a user's own unittest test the samples would have been seeded by its name.
    Before each sample they seed every generator (``set_rng_seed``); the samples are made on the CPU, so the CPU's
    generator, ``random`` and numpy are seeded, not every GPU's as well."""
    names = ("torch.testing._internal.common_utils", "torch.testing._internal.opinfo.core")
    kept = [(m, name, getattr(m, name)) for m in map(sys.modules.get, names) for name in ("extract_test_fn", "set_rng_seed")
            if hasattr(m, name)]
    for module, name, _ in kept:
        setattr(module, name, _seed_the_host if name == "set_rng_seed" else _no_test)
    try:
        yield
    finally:
        for module, name, original in kept:
            setattr(module, name, original)


def _no_test():
    return None


def _seed_the_host(seed):
    import random

    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)


def _plain(sample) -> Sample:
    process = getattr(sample, "output_process_fn_grad", None) or (lambda x: x)
    return Sample(
        input=sample.input,
        args=tuple(sample.args),
        kwargs=dict(sample.kwargs),
        output_process_fn_grad=process,
    )


def _long_reductions(opinfo, dtype: torch.dtype) -> list[Sample]:
    generate = getattr(opinfo, "generate_args_kwargs", None)
    if generate is None or not _is_reduction(opinfo) or not (dtype.is_floating_point or dtype.is_complex):
        return []
    from torch.testing import make_tensor

    t = make_tensor((3, LONG_REDUCTION), dtype=dtype, device="cpu", low=0.5, high=9)
    found = []
    for args, kwargs in generate(t, dim=-1, keepdim=False):
        kwargs = dict(kwargs, dim=-1, keepdim=False)
        found.append(Sample(input=t, args=tuple(args), kwargs=kwargs, output_process_fn_grad=lambda x: x))
    return found


def _is_reduction(opinfo) -> bool:
    from torch.testing._internal.opinfo.core import ReductionOpInfo

    return isinstance(opinfo, ReductionOpInfo)


def tolerance_override(opinfo, device_type: str, dtype: torch.dtype) -> tuple[float, float] | None:
    """The widest (atol, rtol) that PyTorch's own tests allow this op and dtype.

    OpInfo entries carry ``toleranceOverride`` decorators for the tests that
    compare results; the widest of them, for this device type and dtype, is
    what PyTorch's maintainers have declared this op's numerics to need.
    """
    atol = rtol = None
    for info in getattr(opinfo, "decorators", ()) or ():
        wanted_device = getattr(info, "device_type", None)
        if wanted_device is not None and wanted_device != device_type:
            continue
        if getattr(info, "active_if", True) is False:
            continue
        for decorator in getattr(info, "decorators", ()) or ():
            table = getattr(decorator, "d", None)
            if type(decorator).__name__ != "toleranceOverride" or not isinstance(table, dict):
                continue
            tol = table.get(dtype)
            if tol is None:
                continue
            atol = max(atol or 0.0, float(tol.atol))
            rtol = max(rtol or 0.0, float(tol.rtol))
    if atol is None:
        return None
    return atol, rtol


# --- public names, for repro scripts -----------------------------------------------

_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft", "torch.masked")


@functools.cache
def _public_index() -> dict[int, str]:
    """``id`` of every callable in the namespaces above, to its dotted name (``torch._foo`` too)."""
    import importlib

    found: dict[int, str] = {}
    for space in _NAMESPACES:
        obj = torch.Tensor if space == "torch.Tensor" else importlib.import_module(space)
        for name in sorted(dir(obj), key=lambda n: n.startswith("_")):  # public names win
            if name.startswith("__"):
                continue
            value = getattr(obj, name, None)
            if callable(value):
                found.setdefault(id(value), f"{space}.{name}")
    return found


def public_name(opinfo, variant: str) -> str:
    """An importable name for the variant's callable, or "" when it has none (a lambda).

    An op overload's entry: ``torch.ops.aten.NAME.OVERLOAD`` (a lambda of it where the functional variant clones what
    an in-place overload writes).
    """
    if isinstance(opinfo, schema.SchemaOp):
        return opinfo.public_name("functional" if variant == "backward" else variant)
    if getattr(opinfo, "public", ""):  # a registered entry that names its own callable
        return opinfo.public
    function = functions(opinfo).get("functional" if variant == "backward" else variant)
    if function is None:
        return ""
    return _public_index().get(id(function), "")
