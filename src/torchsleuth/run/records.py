"""Records of the run stage: how a call was made, in enough detail to make it again.

These are what the repro scripts and reports are written from; live tensors never
leave the worker that made them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class TensorSpec:
    """One tensor argument exactly as the kernel saw it."""

    path: str  # "input", "args[1]", "weight", "out[0]", "grad_output"
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    storage_numel: int  # elements in the whole storage, guards and gaps included
    dtype: str  # "float32"
    device: str  # "cpu", "cuda:0"
    layout: str  # the layout transform that made it (cases.records.LAYOUTS)
    requires_grad: bool = False
    # zlib-compressed bytes of the whole storage (so gaps and guards come back
    # too); None when the storage is too large to carry inline.
    data: bytes | None = None
    # (dim, period) when the storage was too large to carry inline but the tensor (contiguous, filling it) is its
    # first ``period`` entries along ``dim`` tiled, as the large oracle's stretched tensors are: ``data`` holds those.
    tiled: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class CallSpec:
    """A call one can paste: ``function(*args, **kwargs)`` with tensors named by path.

    ``args_src`` and ``kwargs_src`` are Python source in which each tensor is
    written ``T["path"]``; ``function`` is an importable name such as
    ``torch.addcmul`` or ``torch.Tensor.addcmul_``. ``function`` is empty when
    the op is not reachable by name (then ``why_not`` says so).
    """

    function: str
    args_src: str
    kwargs_src: str
    tensors: tuple[TensorSpec, ...]
    variant: str
    # backward: the inputs differentiated; the output gradients are the
    # tensors whose path starts with "grad_output".
    grad_paths: tuple[str, ...] = ()
    why_not: str = ""
