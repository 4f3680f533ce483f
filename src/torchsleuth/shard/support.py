"""What this torch offers ``torchsleuth shard``, found by feature, never by version number.

Design note. ``torchsleuth shard`` needs DTensor: public as
``torch.distributed.tensor`` from torch 2.5, private as
``torch.distributed._tensor`` in 2.4 (the same classes). Everything in this
package takes DTensor's names from ``dtensor()``, never from either module
directly, so the same code runs on both. Two features are optional, each
found by importing it:

* ``LocalTensorMode`` (``torch.distributed._local_tensor``, torch 2.10 and
  later) simulates a mesh in one process over the ``fake`` process-group
  backend. Without it (``simulator()`` says why) every case runs on real
  gloo process groups the sweep spawns itself (ranks.py).
* ``_StridedShard`` (torch 2.5 and later): without it strided placements are
  left out of the matrix, and the run says so.

``quiet_dtensor`` lives here, below every module that runs cases (the sweep,
the spawned ranks, a torchrun rank), which each call it once per process.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace


@functools.cache
def missing() -> str:
    """Why ``torchsleuth shard`` cannot run here at all, in one line; "" when it can (on gloo ranks at least)."""
    import torch

    if not torch.distributed.is_available():
        return f"torch {torch.__version__} was built without torch.distributed, which torchsleuth shard needs"
    try:
        dtensor()
    except ImportError as e:
        return f"torch {torch.__version__} has no DTensor ({e}); torchsleuth shard needs torch 2.4 or later"
    return ""


@functools.cache
def simulator() -> str:
    """Why meshes cannot be simulated in this process, in one line; "" when ``LocalTensorMode`` can."""
    import torch

    try:
        from torch.distributed._local_tensor import LocalTensorMode  # noqa: F401
        from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401
    except ImportError:
        return (f"torch {torch.__version__} has no LocalTensorMode (torch.distributed._local_tensor, torch 2.10 and later) "
                "to simulate a mesh in one process")
    return ""


@functools.cache
def dtensor() -> SimpleNamespace:
    """DTensor's public names on this torch: DTensor, Shard, Replicate, Partial, distribute_tensor, DeviceMesh."""
    try:
        from torch.distributed import tensor as module

        module.DTensor  # noqa: B018 (torch 2.4 has the package, for tensor parallelism, without DTensor)
    except (ImportError, AttributeError):
        from torch.distributed import _tensor as module
    from torch.distributed.device_mesh import DeviceMesh

    return SimpleNamespace(DTensor=module.DTensor, Shard=module.Shard, Replicate=module.Replicate, Partial=module.Partial,
                           distribute_tensor=module.distribute_tensor, DeviceMesh=DeviceMesh)


@functools.cache
def strided_shard():
    """The ``_StridedShard`` placement class, or None where this torch has none."""
    for name in ("torch.distributed.tensor.placement_types", "torch.distributed._tensor.placement_types"):
        try:
            module = __import__(name, fromlist=["_StridedShard"])
        except ImportError:
            continue
        if hasattr(module, "_StridedShard"):
            return module._StridedShard
    return None


def quiet_dtensor() -> None:
    """DTensor's advice a sweep would print thousands of times, on purpose: quiet.

    It logs every 2-D redistribution made in two steps, and warns on every
    one-element tensor it replicates implicitly (samples have many).
    """
    import logging
    import warnings

    for name in ("torch.distributed.tensor._redistribute", "torch.distributed._tensor._redistribute"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1", category=UserWarning)
    # torch 2.4, on every CPU mesh a rank makes: the cases draw no random numbers on DTensors (run.py skips those ops)
    warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support", category=UserWarning)


def lacking(kinds: tuple[str, ...]) -> list[str]:
    """What the matrix of placement ``kinds`` leaves out on this torch, each in a line the run says once."""
    import torch

    if "strided" in kinds and strided_shard() is None:
        return [f"torch {torch.__version__} has no _StridedShard: strided placements left out"]
    return []
