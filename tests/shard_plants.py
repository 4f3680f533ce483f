"""Planted sharding rules for the shard tests: DTensor's sharding propagation patched inside a test.

A plant rewrites what the propagation returns for one aten op (after the
real rule ran, so the op computes what it always did but claims another
placement), or refuses an op as DTensor does for one it lacks: the class of
bug in the second seed story. Imported by the shard test modules
(``from shard_plants import planted_rule``).
"""

from __future__ import annotations

import contextlib
import copy


@contextlib.contextmanager
def propagation(patch):
    """DTensor's sharding propagation with ``patch(schema, original)`` in place of its own (cache cleared both ways)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._sharding_prop import LocalLRUCache
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    propagator = DTensor._op_dispatcher.sharding_propagator
    original, cached = propagator.propagate_op_sharding_non_cached, propagator.propagate_op_sharding

    def patched(schema):
        return patch(schema, original)

    propagator.propagate_op_sharding_non_cached = patched
    propagator.propagate_op_sharding = LocalLRUCache(patched)
    _clear_sharding_prop_cache()
    try:
        yield
    finally:
        propagator.propagate_op_sharding_non_cached, propagator.propagate_op_sharding = original, cached
        _clear_sharding_prop_cache()


def planted_rule(op, change):
    """DTensor's rule for ``op``, with each placement of its claimed output passed through ``change``."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    def patch(schema, original):
        result = original(schema)
        spec = result.output_spec
        if schema.op is op and isinstance(spec, DTensorSpec):
            result = copy.copy(result)
            result.output_spec = DTensorSpec(spec.mesh, tuple(change(p) for p in spec.placements), tensor_meta=spec.tensor_meta)
        return result

    return propagation(patch)


def no_rule(op):
    """DTensor without a sharding rule for ``op``: propagation raises as it does for an op it lacks."""

    def patch(schema, original):
        if schema.op is op:
            raise NotImplementedError(f"Operator {op} does not have a sharding strategy registered.")
        return original(schema)

    return propagation(patch)


def scalars_read_replicated():
    """``_local_scalar_dense`` through its registered replica-only rule: each rank reads the reduced value (the fix of
    torch 2.13's Python numbers read from a Partial DTensor, which skip sharding propagation)."""
    import torch
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSchema, OutputSharding

    def patch(schema, original):
        if schema.op is not torch.ops.aten._local_scalar_dense.default:
            return original(schema)
        spec = schema.args_schema[0]
        wanted = DTensorSpec(spec.mesh, (Replicate(),) * spec.mesh.ndim, tensor_meta=spec.tensor_meta)
        return OutputSharding(None, redistribute_schema=OpSchema(schema.op, (wanted,), {}),
                              needs_redistribute=spec.placements != wanted.placements)

    return propagation(patch)


_SPLIT_FACTOR_DROPPED = """\
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._sharding_prop import LocalLRUCache

_propagator = support.dtensor().DTensor._op_dispatcher.sharding_propagator
_original = _propagator.propagate_op_sharding_non_cached


def _patched(schema):
    result = _original(schema)
    spec = result.output_spec
    if schema.op is torch.ops.aten.transpose.int and isinstance(spec, DTensorSpec):
        Shard = support.dtensor().Shard
        placements = tuple(Shard(p.dim) if isinstance(p, support.strided_shard()) else p for p in spec.placements)
        result = copy.copy(result)
        result.output_spec = DTensorSpec(spec.mesh, placements, tensor_meta=spec.tensor_meta)
    return result


_propagator.propagate_op_sharding_non_cached = _patched
_propagator.propagate_op_sharding = LocalLRUCache(_patched)
"""


def split_factor_dropped_module(*, spawned_only: bool = False) -> str:
    """The text of a module for ``--import`` (so that other processes have the plant too): DTensor's rule for
    transpose dropping a ``_StridedShard``'s split factor from the placement it claims. ``spawned_only``: only in
    processes multiprocessing spawned (the run's gloo ranks), not in the run's own."""
    header = "import copy\nimport multiprocessing\n\nimport torch\n\nfrom torchsleuth.shard import support\n\n"
    if not spawned_only:
        return header + _SPLIT_FACTOR_DROPPED
    body = "".join(f"    {line}" if line.strip() else line for line in _SPLIT_FACTOR_DROPPED.splitlines(keepends=True))
    return header + "if multiprocessing.parent_process() is not None:\n" + body


_RULE_PLANTS = """\
import copy

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._sharding_prop import LocalLRUCache
from torch.distributed.tensor.placement_types import _StridedShard

MODES = {modes!r}
_propagator = DTensor._op_dispatcher.sharding_propagator
_original = _propagator.propagate_op_sharding_non_cached
REDUCTIONS = (torch.ops.aten.sum.dim_IntList, torch.ops.aten.mean.dim)


def _reduced(schema):
    dims = schema.args_schema[1] if len(schema.args_schema) > 1 else None
    rank = schema.args_schema[0].tensor_meta.shape.__len__()
    dims = [dims] if isinstance(dims, int) else list(dims or range(rank))
    return {{d % rank for d in dims}}


def _keepdim(schema):
    return len(schema.args_schema) > 2 and schema.args_schema[2] is True


def _with(result, placements):
    spec = result.output_spec
    result = copy.copy(result)
    result.output_spec = DTensorSpec(spec.mesh, tuple(placements), tensor_meta=spec.tensor_meta)
    return result


def _patched(schema):
    result = _original(schema)
    spec = result.output_spec
    if "norm_grads_claimed_replicated" in MODES and schema.op is torch.ops.aten.native_layer_norm_backward.default:
        # a norm over sharded tokens: its weight's and bias's gradients, partial sums, claimed Replicate (no all-reduce)
        if isinstance(spec, tuple) and any(isinstance(s, DTensorSpec) and any(isinstance(p, Partial) for p in s.placements)
                                           for s in spec):
            result = copy.copy(result)
            result.output_spec = tuple(
                DTensorSpec(s.mesh, tuple(Replicate() if isinstance(p, Partial) else p for p in s.placements),
                            tensor_meta=s.tensor_meta) if isinstance(s, DTensorSpec) else s for s in spec)
        return result
    if not isinstance(spec, DTensorSpec):
        return result
    source = schema.args_schema[0]
    if "strided_kept_as_shard" in MODES and schema.op in REDUCTIONS:
        # a _StridedShard on a dim the op does not reduce comes out as a plain Shard: the split factor lost
        if any(isinstance(p, _StridedShard) and p.dim not in _reduced(schema) for p in source.placements):
            return _with(result, [Shard(p.dim) if isinstance(p, _StridedShard) else p for p in spec.placements])
    if MODES & {{"strided_reduced_dim_not_replicated", "reduced_dim_not_replicated"}} and schema.op is torch.ops.aten._softmax.default:
        # softmax over a dim held as _StridedShard, computed on the local rows without replicating them first
        dim = schema.args_schema[1] % len(source.tensor_meta.shape)
        # (reduced_dim_not_replicated: any Shard of that dim, _StridedShard or plain)
        strided_only = "reduced_dim_not_replicated" not in MODES
        if any(isinstance(p, (Shard, _StridedShard)) and p.dim == dim and (isinstance(p, _StridedShard) or not strided_only)
               for p in source.placements):
            result = _with(result, source.placements)
            result.redistribute_schema, result.needs_redistribute = None, False
            return result
    if "partial_claimed_replicated" in MODES and schema.op in REDUCTIONS + (torch.ops.aten.sum.default,):
        # a reduction over a sharded dim claims its partial sums Replicate: the all-reduce forgotten
        if any(isinstance(p, Partial) for p in spec.placements):
            return _with(result, [Replicate() if isinstance(p, Partial) else p for p in spec.placements])
    if "keepdim_partial_claimed_as_shard" in MODES and schema.op in REDUCTIONS and _keepdim(schema):
        # a keepdim reduction over a sharded dim: the partial sums claimed as a Shard of the reduced dim
        reduced = min(_reduced(schema))
        return _with(result, [Shard(reduced) if isinstance(p, Partial) else p for p in spec.placements])
    return result


_propagator.propagate_op_sharding_non_cached = _patched
_propagator.propagate_op_sharding = LocalLRUCache(_patched)
"""


def rule_plant(*modes: str) -> str:
    """The text of a module for ``--import`` rewriting DTensor's rules as the seed story's bugs do, each of ``modes``:

    * ``strided_kept_as_shard``: a sum or mean over another dim than a ``_StridedShard``'s claims a plain ``Shard``
      (the split factor lost);
    * ``strided_reduced_dim_not_replicated``: softmax over a dim held as ``_StridedShard`` computed on the local rows,
      without replicating them first; ``reduced_dim_not_replicated``: the same over any ``Shard`` of that dim;
    * ``keepdim_partial_claimed_as_shard``: a keepdim reduction over a sharded dim claims its partial sums a ``Shard``;
      ``partial_claimed_replicated``: any sum or mean over a sharded dim claims them ``Replicate`` (no all-reduce);
    * ``norm_grads_claimed_replicated``: layer_norm's backward over sequence-sharded tokens claims its weight's and
      bias's gradients (partial sums over the tokens) ``Replicate``: the all-reduce forgotten.
    """
    return _RULE_PLANTS.format(modes=set(modes))
