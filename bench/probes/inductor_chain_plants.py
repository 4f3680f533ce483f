"""Two inductor bugs that show only where two ops fuse, planted for a pointed run to find
(``torchsleuth ops --ops sum,sin --import THIS``).

Each wraps one entry of inductor's lowering table (``torch._inductor.lowering.lowerings``), in every process that
imports this module (each worker does, through ``--import``); eager is untouched, and so is each op compiled alone:

* ``sum``: each reduced dim whose size is not a power of two loses its tail, but only where the input is a
  pointwise computation fused into the reduction (an unrealized ``Pointwise``), never an input tensor;
* ``sin``: its input is read as if contiguous where it is a view made inside the graph (a transpose, a slice),
  never an input tensor, however laid out.

The same plants as tests/oracles/test_oracle_compile_chains.py's, for bench/compiled-chains.md.
"""

import torch
from torch._inductor import ir, lowering

aten = torch.ops.aten
table = lowering.lowerings


def _drop_fused_tail(old):
    def planted(x, axis=None, keepdims=False, *, dtype=None):
        size = [int(s) for s in x.get_size()]
        if isinstance(getattr(x, "data", None), ir.StorageBox) and isinstance(x.data.data, ir.Pointwise):
            dims = range(len(size)) if not axis or not size else [a % len(size) for a in (axis if isinstance(axis, (list, tuple)) else [axis])]
            for d in dims:
                kept = 1 << (size[d].bit_length() - 1) if size[d] else 0
                if kept != size[d]:
                    x = table[aten.slice.Tensor](x, d, 0, kept)
        return old(x, axis, keepdims, dtype=dtype) if axis is not None else old(x, dtype=dtype)

    return planted


def _view_as_contiguous(old):
    def planted(x, *args, **kwargs):
        if isinstance(getattr(x, "data", None), (ir.BaseView, ir.ReinterpretView)):
            size = x.get_size()
            x = table[aten.as_strided.default](x, size, ir.FlexibleLayout.contiguous_strides(size), 0)
        return old(x, *args, **kwargs)

    return planted


for _op in (aten.sum.dim_IntList, aten.sum.default):
    table[_op] = _drop_fused_tail(table[_op])
table[aten.sin.default] = _view_as_contiguous(table[aten.sin.default])
