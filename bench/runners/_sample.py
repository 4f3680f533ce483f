"""What the catalog runners sweep: the config `torchsleuth ops --depth D --no-shrink` makes, a sample of the catalog's
ops, its units in a seeded shuffled order."""

from __future__ import annotations

import random

SEED = 0


def catalog_config(device: str, ops: tuple[str, ...], *, workers: int, depth: str):
    """The config ``torchsleuth ops --device D --ops ... --no-shrink`` makes at ``depth`` (cli/ops.py's defaults)."""
    from torchsleuth.config import SweepConfig
    from torchsleuth.search import names as search_names
    from torchsleuth.sweep import depth as at_depth

    config = SweepConfig(command="ops", device=device, ops=ops, workers=workers, shrink=False, search=search_names())
    return at_depth(config, deep=depth == "deep")


def op_sample(spec: str | None, every: int, exclude: str = "") -> tuple[str, ...]:
    """The ops ``spec`` names, or every ``every``-th op of the default selection; less those with a word of ``exclude``
    (comma-separated) in their name (``laguerre,legendre``: the polynomials whose searched degrees hang for days)."""
    from torchsleuth.cases import select

    ops = select.resolve_ops(spec) if spec else select.resolve_ops(None)[::every]
    words = [w for w in exclude.split(",") if w]
    return tuple(op for op in ops if not any(w in op for w in words))


def shuffled_units(config) -> list:
    from torchsleuth.cases import select

    units = select.units(config.ops, config.dtypes, config.device, probe=config.probe_dtypes)
    random.Random(SEED).shuffle(units)
    return units


def case_kind(case) -> str:
    if case.oracle:
        return f"oracle {case.oracle.split(':', 1)[0]}"
    if case.edits:
        return "searched"
    return f"{case.variant}, {'laid out' if case.layouts else 'contiguous'}"


def expand_classes(spec: str) -> str:
    """An ops spec whose ``class:NAME`` words stand for every catalog entry whose OpInfo class is NAME or derives from it
    (``UnaryUfuncInfo``, ``BinaryUfuncInfo``, ``ReductionOpInfo``: the ufuncs and reductions several pages sweep)."""
    if "class:" not in spec:
        return spec
    from torchsleuth.cases import opinfo

    catalog, names = opinfo.catalog(), []
    for part in spec.split(","):
        if part.startswith("class:"):
            wanted = part[len("class:"):]
            names += [n for n, e in catalog.items() if wanted in {c.__name__ for c in type(e).__mro__}]
        else:
            names.append(part)
    return ",".join(dict.fromkeys(names))
