"""Choosing what to sweep: op names and globs, dtypes, layouts, variants, and the units they make."""

from __future__ import annotations

import difflib
import fnmatch
import functools

import torch

from .. import dtypes as dtype_names
from ..errors import UsageError
from . import layouts, opinfo
from .records import VARIANTS, OpSpec, Unit


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def resolve_ops(patterns: str | None, *, names: tuple[str, ...] | None = None, command: str = "ops") -> tuple[str, ...]:
    """Catalog names (or ``names``) matching ``patterns`` ("add*,softmax"); all of them for None or "all".

    ``command`` is the one whose ``--list`` a hint for an unknown name points to.
    """
    names = sorted(opinfo.catalog() if names is None else names)
    if patterns is None or patterns.strip() in ("", "all"):
        return tuple(names)
    chosen: list[str] = []
    for pattern in _split(patterns):
        if any(c in pattern for c in "*?["):
            hits = fnmatch.filter(names, pattern)
        else:
            # a bare name takes its variants too: "normal" is "normal" and "normal.in_place"
            hits = [n for n in names if n == pattern or n.startswith(pattern + ".")]
        if not hits:
            close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; `torchsleuth {command} --list` shows every op"
            raise UsageError(f"unknown op {pattern!r}{hint}")
        chosen.extend(h for h in hits if h not in chosen)
    return tuple(chosen)


def resolve_names(text: str | None, allowed: tuple[str, ...], what: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if text is None or not text.strip():
        return default
    if text.strip() == "all":
        return allowed
    chosen = []
    for name in _split(text):
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"unknown {what} {name!r}{hint}; allowed: {', '.join(allowed)}")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


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
    """
    device_type = torch.device(device).type
    found = []
    for name in ops:
        supported = set(spec(name, device_type).dtypes)
        found.extend(Unit(op=name, dtype=d, device=device) for d in dtypes if d in supported or (probe and _makes_samples(name, d)))
    return found


@functools.lru_cache(maxsize=None)
def _makes_samples(name: str, dtype: str) -> bool:
    """Whether OpInfo makes samples of ``name`` in ``dtype``: its sample functions may raise in a dtype they were not written
    for (``torch.randn`` of an integer dtype, a float bound for bool)."""
    try:
        return bool(opinfo.samples(opinfo.get(name), getattr(torch, dtype)))
    except Exception:
        return False
