"""Three inductor bugs planted for a pointed run to find (``torchsleuth ops --ops sum,sinh,take --import THIS``).

Each wraps one entry of inductor's lowering table (``torch._inductor.lowering.lowerings``, where
``GraphLowering.call_function`` looks an aten overload up), in every process that imports this module
(each worker does, through ``--import``); eager is untouched:

* ``sum``: every reduced dim whose size is not a power of two loses its tail (a tiled reduction's last tile);
* ``sinh``: its input is read as if it were contiguous, whatever its strides;
* ``index`` (where ``take`` lowers): a negative index ``i`` reads ``-i - 1`` instead of ``i + size``.

The same plants as tests/oracles/test_oracle_compile_variant.py's, for bench/compiled-variant.md.
"""

import torch
from torch._inductor import ir, lowering

aten = torch.ops.aten
table = lowering.lowerings


def _drop_tail(old):
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
    def planted(x, *args, **kwargs):
        size = x.get_size()
        return old(table[aten.as_strided.default](x, size, ir.FlexibleLayout.contiguous_strides(size), x.get_layout().offset), *args, **kwargs)

    return planted


def _negative_mirrored(old):
    def planted(x, indices):
        return old(x, [None if i is None else table[aten.where.self](table[aten.lt.Scalar](i, 0), table[aten.sub.Tensor](table[aten.neg.default](i), 1), i)
                       for i in indices])

    return planted


for _op, _make in ((aten.sum.dim_IntList, _drop_tail), (aten.sum.default, _drop_tail), (aten.sinh.default, _as_contiguous),
                   (aten.index.Tensor, _negative_mirrored)):
    table[_op] = _make(table[_op])
