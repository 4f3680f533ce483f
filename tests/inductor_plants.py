"""Inductor bugs planted for the compiled variant (oracles/compile/variant.py) and its chains (chains.py), eager untouched.

Each wraps one entry of inductor's lowering table (``torch._inductor.lowering.lowerings``, where
``GraphLowering.call_function`` looks an aten overload up):

* ``sum``: every reduced dim whose size is not a power of two loses its tail (a tiled reduction's last tile);
* ``sinh``: its input is read as if it were contiguous, whatever its strides (a transposed input read row-major);
* ``index`` (where inductor lowers ``take``): a negative index ``i`` reads ``-i - 1`` instead of ``i + size``.

``CHAIN_PLANTS`` are two more, which show only where two ops fuse (below); tests/inductor_chain_plants.py plants
them when run as a file.

Two ways in. A test imports this module by its name (tests/conftest.py puts this folder on the path) and plants them
for a while, ``with planted():`` (tests/oracles/test_oracle_compile_variant.py). Run as a file, they are planted for
the life of the process: a pointed run's ``--import tests/inductor_plants.py`` (each worker loads it;
bench/compiled-variant.md), or a repro script run after ``runpy.run_path`` of it. No ``from __future__`` import: a
test may paste this source before a script's.
"""

import contextlib

import torch

aten = torch.ops.aten


def _table():
    from torch._inductor import lowering  # inductor loads only when a plant is made

    return lowering.lowerings


def _drop_tail(old):
    table = _table()

    def planted(x, axis=None, keepdims=False, *, dtype=None):
        size = [int(s) for s in x.get_size()]
        dims = range(len(size)) if not axis or not size else [a % len(size) for a in (axis if isinstance(axis, (list, tuple)) else [axis])]
        for d in dims:
            kept = 1 << (size[d].bit_length() - 1) if size[d] else 0
            if kept != size[d]:
                x = table[aten.slice.Tensor](x, d, 0, kept)
        return old(x, axis, keepdims, dtype=dtype) if axis is not None else old(x, dtype=dtype)

    return planted


def _as_contiguous(old):
    from torch._inductor import ir

    table = _table()

    def planted(x, *args, **kwargs):
        size = x.get_size()
        return old(table[aten.as_strided.default](x, size, ir.FlexibleLayout.contiguous_strides(size), x.get_layout().offset), *args, **kwargs)

    return planted


def _negative_mirrored(old):
    table = _table()

    def planted(x, indices):
        return old(x, [None if i is None else table[aten.where.self](table[aten.lt.Scalar](i, 0), table[aten.sub.Tensor](table[aten.neg.default](i), 1), i)
                       for i in indices])

    return planted


def _drop_fused_tail(old):
    from torch._inductor import ir

    dropping = _drop_tail(old)

    def planted(x, *args, **kwargs):
        fused = isinstance(getattr(x, "data", None), ir.StorageBox) and isinstance(x.data.data, ir.Pointwise)
        return (dropping if fused else old)(x, *args, **kwargs)

    return planted


def _view_as_contiguous(old):
    from torch._inductor import ir

    table = _table()

    def planted(x, *args, **kwargs):
        if isinstance(getattr(x, "data", None), (ir.BaseView, ir.ReinterpretView)):
            size = x.get_size()
            x = table[aten.as_strided.default](x, size, ir.FlexibleLayout.contiguous_strides(size), 0)
        return old(x, *args, **kwargs)

    return planted


PLANTS = {
    aten.sum.dim_IntList: _drop_tail,
    aten.sum.default: _drop_tail,
    aten.sinh.default: _as_contiguous,
    aten.index.Tensor: _negative_mirrored,
}


# Two bugs that show only where two ops fuse (oracles/compile/chains.py), each op compiled alone untouched:
# ``sum`` loses a non-power-of-two tail only where its input is a pointwise computation fused into it (never an input
# tensor); ``sin`` reads its input as contiguous only where it is a view made inside the graph (a transpose, a slice).
CHAIN_PLANTS = {
    aten.sum.dim_IntList: _drop_fused_tail,
    aten.sum.default: _drop_fused_tail,
    aten.sin.default: _view_as_contiguous,
}


def plant(plants: dict | None = None) -> dict:
    """Wrap the lowerings (``PLANTS``, or ``CHAIN_PLANTS``); what they were, to put back."""
    plants = PLANTS if plants is None else plants
    table = _table()
    saved = {op: table[op] for op in plants}
    for op, make in plants.items():
        table[op] = make(saved[op])
    return saved


@contextlib.contextmanager
def planted(plants: dict | None = None):
    """The plants while the block runs; then the lowerings as they were, and dynamo's compiled code forgotten."""
    saved = plant(plants)
    try:
        yield
    finally:
        _table().update(saved)
        torch._dynamo.reset()


if __name__ != "inductor_plants":  # run as a file (--import, runpy): planted for the life of the process
    plant()
