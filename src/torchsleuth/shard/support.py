"""What this torch offers ``torchsleuth shard``, found by feature, never by version number.

Design note. ``torchsleuth shard`` needs DTensor (``torch.distributed.tensor``)
and, to simulate a mesh in one process, ``LocalTensorMode``
(``torch.distributed._local_tensor``, torch 2.10 and later) with the ``fake``
process-group backend. ``_StridedShard`` is optional: where a torch lacks it,
strided placements are left out of the matrix and the summary says so. Each
check imports the thing itself, so a backport or a removal is seen as it is.
"""

from __future__ import annotations

import functools


@functools.cache
def missing() -> str:
    """Why shard cases cannot be simulated here, in one line; "" when they can."""
    import torch

    if not torch.distributed.is_available():
        return f"torch {torch.__version__} was built without torch.distributed, which torchsleuth shard needs"
    try:
        import torch.distributed.tensor  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no DTensor (torch.distributed.tensor: {e}); torchsleuth shard needs torch 2.10 or later"
    try:
        from torch.distributed._local_tensor import LocalTensorMode  # noqa: F401
    except ImportError:
        return (f"torch {torch.__version__} has no LocalTensorMode (torch.distributed._local_tensor), which simulates "
                "a mesh in one process; torchsleuth shard needs torch 2.10 or later")
    return ""


@functools.cache
def strided_shard():
    """The ``_StridedShard`` placement class, or None where this torch has none."""
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:
        return None
    return _StridedShard
