"""Choosing what to sweep: op names and globs, dtypes, layouts, variants, and the units they make.

Op names are the OpInfo catalog's ("add", "nn.functional.relu"), and op overloads swept from their schema
(``cases.schema``): a pattern starting with ``aten.`` or naming an op namespace (``myns::op``, ``myns.*``) resolves
over those. A bare packet (``aten.add``) takes every overload of it; a glob over aten (``aten.*``, ``aten.native_*``)
only the overloads of packets no OpInfo entry sweeps, so the catalog is not swept twice.
"""

from __future__ import annotations

import fnmatch
import functools

import torch

from .. import dtypes as dtype_names
from ..errors import UsageError
from ..names import close_ops, resolve_names, unknown_op
from . import layouts, opinfo, reach, schema
from .records import VARIANTS, OpSpec, Unit


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def resolve_ops(patterns: str | None, *, names: tuple[str, ...] | None = None, command: str = "ops") -> tuple[str, ...]:
    """Catalog names (or ``names``) matching ``patterns`` ("add*,softmax"); all of them for None or "all".

    Without ``names``, also op overloads by their schema (see the design note): "aten.add" -> "aten.add.Tensor", ...

    ``command`` is the one whose ``--list`` a hint for an unknown name points to.
    """
    swept = names is None  # the ops sweep's: the catalog, and op overloads by their schema
    names = sorted(opinfo.catalog() if names is None else names)
    if patterns is None or patterns.strip() in ("", "all"):
        return tuple(names)
    chosen: list[str] = []
    for pattern in _split(patterns):
        overloads = _overloads(pattern) if swept and _names_overloads(pattern, names) else None
        if overloads is not None:
            hits = _overload_hits(pattern, overloads)
        elif any(c in pattern for c in "*?["):
            hits = fnmatch.filter(names, pattern)
        else:
            # a bare name takes its variants too: "normal" is "normal" and "normal.in_place"
            hits = [n for n in names if n == pattern or n.startswith(pattern + ".")]
        if not hits:
            raise UsageError(_unknown(pattern, names if overloads is None else overloads, command, overloads is not None))
        chosen.extend(h for h in hits if h not in chosen)
    return tuple(chosen)


def _unknown(pattern: str, known, command: str, overload: bool) -> str:
    """The one line for a pattern that selects nothing: why its overloads are not swept, or the closest names."""
    if not overload:
        return unknown_op(pattern, known, command)
    glob = any(c in pattern for c in "*?[")
    if glob and fnmatch.filter(known, _spelled(pattern)):
        return f"every overload {pattern!r} matches has an OpInfo entry, which a glob over aten leaves out; name its packet (aten.NAME)"
    why = schema.why_not(_spelled(pattern)) if not glob else ""
    if why:
        return f"op {pattern!r} is not swept: {why}"
    close = close_ops(_spelled(pattern), known)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; `torchsleuth {command} --list` shows every op"
    namespace = _spelled(pattern).partition(".")[0]
    if not close and namespace not in schema.namespaces():
        hint = f"; no op of namespace {namespace} is registered (--import the module that registers it)"
    return f"unknown op {pattern!r}{hint}"


def _names_overloads(pattern: str, catalog_names: list[str]) -> bool:
    """Whether ``pattern`` names op overloads (``aten.add``, ``myns::op``, ``myns.*``) rather than catalog ops."""
    if pattern.startswith("aten.") or "::" in pattern:
        return True
    namespace = pattern.partition(".")[0]
    return "." in pattern and namespace in schema.namespaces() and not any(n.startswith(namespace + ".") for n in catalog_names)


def _spelled(pattern: str) -> str:
    """``ns::name`` as the dotted ``ns.name`` overload names are written in."""
    namespace, _, rest = pattern.partition("::")
    return f"{namespace}.{rest}" if rest else pattern


def _overloads(pattern: str) -> tuple[str, ...]:
    """The overloads of the pattern's namespace that are entries (``cases.schema``)."""
    namespace = _spelled(pattern).partition(".")[0]
    return schema.aten_names() if namespace == "aten" else schema.namespace_names(namespace)


def _overload_hits(pattern: str, overloads: tuple[str, ...]) -> list[str]:
    """A glob's overloads (over aten, only those of packets no OpInfo entry sweeps); a bare packet's every overload."""
    pattern = _spelled(pattern)
    if any(c in pattern for c in "*?["):
        hits = [n for n in fnmatch.filter(overloads, pattern) if not covered_by_opinfo(n)]
    else:
        hits = [n for n in overloads if n == pattern or n.startswith(pattern + ".")]
    for name in hits:
        schema.for_name(name)  # made now: their samples are probed together, when first asked for
    return hits


def covered_by_opinfo(name: str) -> bool:
    """Whether an OpInfo entry sweeps the packet of overload ``name`` ("aten.add.Scalar"): as its op, its in-place
    sibling or its declared backward (``reach.packets``)."""
    namespace, _, rest = name.partition(".")
    return namespace == "aten" and rest.partition(".")[0] in _covered_packets()


@functools.cache
def _covered_packets() -> frozenset[str]:
    return frozenset(packet for entry in opinfo.catalog().values() for packet in reach.packets(entry))


def resolve_layouts(text: str | None) -> tuple[str, ...]:
    known = tuple(layout.name for layout in layouts.ALL)  # the table as it is now, not records.LAYOUTS's copy
    chosen = resolve_names(text, known, "layout", known)
    return chosen if layouts.CONTIGUOUS in chosen else (layouts.CONTIGUOUS, *chosen)


def resolve_variants(text: str | None) -> tuple[str, ...]:
    return resolve_names(text, VARIANTS, "variant", VARIANTS)


def resolve_oracles(text: str | None, oracles) -> tuple[str, ...]:
    """The oracle plug-ins named, of the registry ``oracles`` (judge.plugin.Registry); ``all`` is every one but
    those of cost ``large``, which move gigabytes a probe (``--large``); ``none`` is none, not even a sample of the
    sampled ones (``Oracle.sampled``) in a whole-catalog run."""
    known = oracles.names()
    if text is not None and text.strip() == "none":
        return ()
    if text is not None and text.strip() == "all":
        return tuple(name for name in known if oracles.get(name).cost != "large")
    return resolve_names(text, known, "oracle", ())


def resolve_dtypes(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if text is None or not text.strip():
        return default
    if text.strip() == "all":
        return dtype_names.NAMES
    return tuple(dict.fromkeys(dtype_names.name(dtype_names.parse(n)) for n in _split(text)))


def spec(name: str, device_type: str) -> OpSpec:
    entry = opinfo.get(name)
    functions = opinfo.functions(entry)
    return OpSpec(
        name=name,
        variants=tuple(v for v in VARIANTS if v in functions),
        dtypes=tuple(sorted(dtype_names.name(d) for d in opinfo.dtypes(entry, device_type))),
        backward_dtypes=tuple(sorted(dtype_names.name(d) for d in opinfo.dtypes(entry, device_type, backward=True))),
        source=opinfo.source(entry),
    )


def units(ops: tuple[str, ...], dtypes: tuple[str, ...], device: str, probe: bool = False) -> list[Unit]:
    """One unit per op and dtype the op supports on the device; with ``probe``, per dtype OpInfo makes samples in too.

    A unit in a dtype the op does not declare is probed by the worker (run.probe): swept if the kernel takes it.
    Raises UsageError when there is none and an op swept from its schema makes no samples, saying why.
    """
    device_type = torch.device(device).type
    found = []
    for name in ops:
        supported = set(spec(name, device_type).dtypes)
        found.extend(Unit(op=name, dtype=d, device=device) for d in dtypes if d in supported or (probe and _makes_samples(name, d)))
    if not found:  # an op swept from its schema whose calls all failed says why
        unmade = [f"{name} makes no samples ({entry.reason})" for name in ops
                  if isinstance(entry := opinfo.get(name), schema.SchemaOp) and entry.reason]
        if unmade:
            raise UsageError(f"nothing to sweep: {'; '.join(unmade[:3])}{'; ...' if len(unmade) > 3 else ''}")
    return found


@functools.lru_cache(maxsize=None)
def _makes_samples(name: str, dtype: str) -> bool:
    """Whether OpInfo makes samples of ``name`` in ``dtype``: its sample functions may raise in a dtype they were not written
    for (``torch.randn`` of an integer dtype, a float bound for bool)."""
    try:
        return bool(opinfo.samples(opinfo.get(name), getattr(torch, dtype)))
    except Exception:
        return False
