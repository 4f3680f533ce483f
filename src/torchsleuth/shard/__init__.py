"""``torchsleuth shard``: does every DTensor sharding give the single-device answer?

Design note. The second seed story: DTensor's sharding rules decide where
each output shard lives, and a rule that is wrong for a placement (it forgets
to replicate a reduced dim, or drops a ``_StridedShard``'s split_factor)
makes ``full_tensor()`` silently wrong. This package is a source of cases for
the pipeline, like ``optim``: its own matrix, judged and written through the
ops engine's store, shrinking records, findings file, groups and terminal.

    op (OpInfo catalog + composite chains + surface chains) x variant (forward, backward)
      x mesh (2, 3, 4, 2x2, 2x3) x sample x placements of every tensor argument

Modules, in pipeline order: ``support`` (what this torch has, by feature;
DTensor's names on every torch from 2.4), ``placements`` (meshes, placement
text, the catalog's sampled placements), ``targeted`` (a pointed run's
placements, chosen by what the op does), ``composites`` (the chains where
_StridedShard arises), ``surface`` (DTensor beyond the functional call:
in-place ops and views, Python scalars, numbers, _like factories, random
ops), ``randomness`` (what a random op on a DTensor must still satisfy),
``cases`` (the config and the pipeline ``Case`` of each), ``world`` (a
simulated mesh or a real rank), ``split`` (Partial inputs), ``run`` (one
case: plain and sharded, the round trip, the blame trace), ``judge`` (the
oracle and its tolerance, findings), ``shrink``, ``ranks`` (groups of gloo
processes the run spawns), ``gloo`` (what the simulator cannot judge, and
the simulator checked, on real process groups), ``repro`` (scripts),
``sweep`` (the store and the outputs), ``torchrun`` (the same cases as
ranks of a torchrun launch).
"""

from .cases import DEFAULT_DTYPES, DTYPES, VARIANTS, ShardConfig
from .placements import KINDS, MESHES
from .support import missing

__all__ = ["DEFAULT_DTYPES", "DTYPES", "KINDS", "MESHES", "VARIANTS", "ShardConfig", "missing"]
