"""Where a shard case runs: a mesh simulated in this process, or this rank of a real process group.

Design note. The run stage (run.py) is written once, against this small
interface, and runs unchanged on both:

* ``Simulated``: the mesh's ranks simulated in this process by
  ``LocalTensorMode`` over the ``fake`` process-group backend. Every
  collective DTensor issues is carried out on the local shards of all
  ranks; a result is a ``LocalTensor`` holding every rank's value.
* ``Real``: this process is one rank of a process group torch.distributed
  set up (gloo processes spawned by ranks.py, or a ``torchrun`` launch over
  gloo or NCCL); collectives are real; a result is this rank's value only.

``values(t)`` gives every rank's value of a result this world can see
(all of them simulated; this rank's, real); ``adjust(local, f)`` rewrites each
rank's local value as ``f(coordinate, value)``: how Partial inputs are made
(split.py) in both worlds alike; ``reads()`` records the Python numbers
ranks read from DTensors (``item()``, ``float()``, ``bool()``: aten's
``_local_scalar_dense``), where simulated ranks read different ones (on real
process groups each rank reads its own, and there is nothing to record).
``DeviceMesh`` objects are made once per
shape and kept: the first costs most of a second (simulated), or a
collective that makes the sub-groups of a 2-D mesh (real: every rank makes
its meshes in the same order, as it runs the same cases).
"""

from __future__ import annotations

import contextlib
import sys

import torch

from .placements import Mesh
from .support import dtensor

# The fake backend's world: large enough for any mesh --mesh accepts in one process.
FAKE_WORLD = 64


def _fake_group(ranks: int) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_backend() != "fake":
            raise RuntimeError("a real process group is initialized in this process; simulate meshes in another")
        if dist.get_world_size() < ranks:
            raise RuntimeError(f"the fake process group has {dist.get_world_size()} ranks; a mesh of {ranks} needs more")
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=max(FAKE_WORLD, ranks), store=FakeStore())


class Simulated:
    """A mesh of ``mesh.ranks`` ranks simulated in this process (LocalTensorMode)."""

    real = False
    # one mode and one DeviceMesh per mesh, kept: the mode caches each rank's mesh coordinates
    _meshes: dict[tuple, tuple] = {}

    def __init__(self, mesh: Mesh, device: str = "cpu"):
        from torch.distributed._local_tensor import LocalTensorMode

        _fake_group(mesh.ranks)
        self.mesh = mesh
        self.device = device
        key = (mesh.shape, torch.device(device).type)
        if key not in Simulated._meshes:
            DeviceMesh = dtensor().DeviceMesh
            mode = LocalTensorMode(frozenset(range(mesh.ranks)))
            with mode:
                Simulated._meshes[key] = (mode, DeviceMesh(torch.device(device).type, torch.arange(mesh.ranks).reshape(mesh.shape)))
        self.mode, self.device_mesh = Simulated._meshes[key]

    def context(self):
        return self.mode

    def values(self, t) -> list:
        """Every rank's value of ``t`` (a LocalTensor, or one value all ranks share)."""
        from torch.distributed._local_tensor import LocalTensor

        if not isinstance(t, LocalTensor):
            return [t]
        found = []
        for r in range(self.mesh.ranks):
            value = t._local_tensors[r]
            while isinstance(value, LocalTensor):  # autograd can nest them (a gradient of a LocalTensor gradient)
                value = value._local_tensors[r]
            found.append(value)
        return found

    def adjust(self, local, change):
        from torch.distributed._local_tensor import LocalTensor

        if isinstance(local, LocalTensor):
            return self.mode.tensor_map(local, lambda rank, value: change(self.mesh.coordinate(rank), value))
        # a replicated local value the mode kept as one plain tensor: every rank starts from it
        return self.mode.rank_map(lambda rank: change(self.mesh.coordinate(rank), local))

    def replicated(self, t):
        """``t`` as a LocalTensor every rank holds a copy of."""
        return self.mode.rank_map(lambda rank: t.clone())

    def disabled(self):
        return self.mode.disable()

    @contextlib.contextmanager
    def reads(self):
        """The Python numbers read in this context on which ranks differ, in order: ``{rank: value}`` each.

        Each rank's ``_local_scalar_dense`` is run on its own; where they
        differ, LocalTensorMode would refuse ("Non Tensor or int rank results
        must be equal for all ranks", or a per-rank int that ``bool()`` cannot
        use), while on real process groups each rank goes on with its own
        number: the silent bug. Here rank 0's goes on, and every rank's is
        kept for the judge.
        """
        module = sys.modules.get("torch.distributed._local_tensor")
        original = getattr(module, "_for_each_rank_run_func", None)
        differing: list[dict] = []
        if original is None:  # a LocalTensorMode without that function: unchanged
            yield differing
            return
        read = torch.ops.aten._local_scalar_dense.default

        def for_each_rank(func, ranks, args, kwargs, **how):
            if func is not read:
                return original(func, ranks, args, kwargs, **how)
            values = {rank: original(func, frozenset({rank}), args, kwargs, **how) for rank in sorted(ranks)}
            first = values[min(values)]
            if any(v != first and not (v != v and first != first) for v in values.values()):  # NaN on every rank is one value
                differing.append(values)
            return first

        module._for_each_rank_run_func = for_each_rank
        try:
            yield differing
        finally:
            module._for_each_rank_run_func = original


class Real:
    """This process as one rank of the initialized default process group, on a mesh of all its ranks."""

    real = True
    # one DeviceMesh per mesh shape and device, kept for the life of the process group
    _meshes: dict[tuple, object] = {}

    def __init__(self, mesh: Mesh, device: str = "cpu"):
        import torch.distributed as dist

        if dist.get_world_size() != mesh.ranks:
            raise RuntimeError(f"mesh {mesh.name} needs {mesh.ranks} ranks; the process group has {dist.get_world_size()}")
        self.mesh = mesh
        self.device = device
        self.rank = dist.get_rank()
        key = (mesh.shape, str(torch.device(device)), id(dist.group.WORLD))
        if key not in Real._meshes:
            Real._meshes[key] = dtensor().DeviceMesh(torch.device(device).type, torch.arange(mesh.ranks).reshape(mesh.shape))
        self.device_mesh = Real._meshes[key]

    def context(self):
        return contextlib.nullcontext()

    def values(self, t) -> list:
        return [t]

    def adjust(self, local, change):
        return change(self.mesh.coordinate(self.rank), local)

    def disabled(self):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def reads(self):
        yield []  # each rank reads its own number: nothing differs within this process
