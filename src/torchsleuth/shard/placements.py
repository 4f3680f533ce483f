"""Meshes and placements: what ``--mesh`` and ``--placements`` choose, as text and as DTensor objects.

Design note. A case names its mesh and each tensor argument's placements in
short text, so that a case id (and a finding's repro) carries them:

* a mesh is its shape: ``2``, ``3``, ``4`` (1-D) or ``2x2``, ``2x3`` (2-D),
  over ranks ``0..n-1`` in row-major order;
* one placement per mesh dim, joined by ``.``: ``R`` (Replicate), ``S0``
  (Shard(0)), ``Psum``/``Pavg``/``Pmax``/``Pmin`` (Partial with that
  reduction), ``SS0x2`` (``_StridedShard(0, split_factor=2)``). ``S1.R`` is
  Shard(1) on mesh dim 0 and Replicate on mesh dim 1.

Which placements an argument gets (``options``) is a pure function of its
shape and dtype, the mesh and the placement kinds chosen: every tensor dim
for Shard and _StridedShard, each reduction for Partial (not for bool,
whose values do not reduce; ``avg`` only for floating dtypes, as an average
of integers is not an integer). Sizes are not filtered: a dim that does not
divide by the mesh is an uneven shard, which is half of what is tested.
_StridedShard's split factor is the one FSDP2 with tensor parallelism makes:
the size of the mesh dim after it (2 on a 1-D mesh, where it stands for a
view of a sharded dim); on a 2-D mesh only mesh dim 0 gets one.

``combinations`` chooses, within a budget, which placements of all the
arguments one case gets: first each argument alone (the others replicated,
so a finding names the argument), spread so that every kind appears early,
then every argument placed at once; seeded by the op, sample and mesh.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass

from ..errors import UsageError
from . import support

MESHES = ("2", "3", "4", "2x2", "2x3")
KINDS = ("replicate", "shard", "partial", "strided")
REDUCTIONS = ("sum", "avg", "max", "min")
_ONE = re.compile(r"^(R|S(\d+)|P(sum|avg|max|min)|SS(\d+)x(\d+))$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Mesh:
    name: str  # "2x3"
    shape: tuple[int, ...]

    @property
    def ranks(self) -> int:
        return math.prod(self.shape)

    def coordinate(self, rank: int) -> tuple[int, ...]:
        """Where ``rank`` sits in the mesh (ranks are laid out row-major)."""
        found = []
        for size in reversed(self.shape):
            found.append(rank % size)
            rank //= size
        return tuple(reversed(found))


def mesh(name: str) -> Mesh:
    parts = name.strip().lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or len(shape) > 2 or any(s < 1 for s in shape) or math.prod(shape) < 2:
        raise UsageError(f"mesh {name!r} is not a mesh shape; write N (1-D) or NxM (2-D), at least 2 ranks, e.g. {', '.join(MESHES)}")
    return Mesh(name="x".join(map(str, shape)), shape=shape)


def meshes(text: str | None) -> tuple[Mesh, ...]:
    """The meshes ``--mesh`` names (comma-separated shapes); the defaults when empty."""
    names = [p for p in (text or "").split(",") if p.strip()] or list(MESHES)
    return tuple(dict.fromkeys(mesh(n) for n in names))


def kinds(text: str | None) -> tuple[str, ...]:
    if not text or not text.strip():
        return KINDS
    chosen = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        if part not in KINDS:
            raise UsageError(f"placement kind {part!r} is not one of: {', '.join(KINDS)}")
        chosen.append(part)
    if "replicate" not in chosen:  # the arguments not placed otherwise are replicated
        chosen.insert(0, "replicate")
    return tuple(dict.fromkeys(chosen))


def parse(text: str) -> tuple:
    """The DTensor placements ``S1.R`` names."""
    api = support.dtensor()
    Partial, Replicate, Shard = api.Partial, api.Replicate, api.Shard

    found = []
    for part in text.split("."):
        m = _ONE.match(part)
        if m is None:
            raise UsageError(f"placement {part!r} in {text!r} is not one of R, S<dim>, Psum, Pavg, Pmax, Pmin, SS<dim>x<split>")
        if part == "R":
            found.append(Replicate())
        elif m.group(2) is not None:
            found.append(Shard(int(m.group(2))))
        elif m.group(3) is not None:
            found.append(Partial(m.group(3)))
        else:
            strided = support.strided_shard()
            if strided is None:
                raise UsageError(f"placement {part!r}: this torch has no _StridedShard")
            found.append(strided(int(m.group(4)), split_factor=int(m.group(5))))
    return tuple(found)


def text(placements) -> str:
    """The short text of DTensor placements (the inverse of ``parse``)."""
    api = support.dtensor()
    Partial, Replicate, Shard = api.Partial, api.Replicate, api.Shard

    strided = support.strided_shard()
    parts = []
    for p in placements:
        if strided is not None and isinstance(p, strided):
            parts.append(f"SS{p.dim}x{p.split_factor}")
        elif isinstance(p, Shard):
            parts.append(f"S{p.dim}")
        elif isinstance(p, Replicate):
            parts.append("R")
        elif isinstance(p, Partial):
            parts.append(f"P{p.reduce_op}")
        else:
            parts.append(type(p).__name__)
    return ".".join(parts)


def words(placement: str) -> str:
    """``SS0x2.S0`` as a person reads it: ``_StridedShard(0, sf=2), Shard(0)``."""
    out = []
    for part in placement.split("."):
        m = _ONE.match(part)
        if m is None:
            out.append(part)
        elif part == "R":
            out.append("Replicate")
        elif m.group(2) is not None:
            out.append(f"Shard({m.group(2)})")
        elif m.group(3) is not None:
            out.append(f"Partial({m.group(3)})")
        else:
            out.append(f"_StridedShard({m.group(4)}, sf={m.group(5)})")
    return "(" + ", ".join(out) + ")"


def is_replicate(placement: str) -> bool:
    return all(p == "R" for p in placement.split("."))


def kind_of(part: str) -> str:
    return {"R": "replicate", "S": "shard", "P": "partial"}[part[0]] if not part.startswith("SS") else "strided"


def options(shape: tuple[int, ...], dtype: str, on: Mesh, chosen: tuple[str, ...] = KINDS) -> list[str]:
    """Every placement of a tensor of ``shape`` and ``dtype`` on mesh ``on`` (see the design note)."""
    per_dim = []
    for mesh_dim in range(len(on.shape)):
        here = ["R"]
        if "shard" in chosen:
            here += [f"S{d}" for d in range(len(shape))]
        if "partial" in chosen and dtype != "bool":
            floating = dtype.startswith(("float", "bfloat", "complex"))
            here += [f"P{r}" for r in REDUCTIONS if r != "avg" or floating]
            if dtype.startswith("complex"):
                here = [h for h in here if h not in ("Pmax", "Pmin")]
        if "strided" in chosen and support.strided_shard() is not None:
            split = 2 if len(on.shape) == 1 else (on.shape[1] if mesh_dim == 0 else 0)
            if split:  # DTensor refuses a strided shard that does not divide evenly
                here += [f"SS{d}x{split}" for d in range(len(shape)) if shape[d] and shape[d] % (split * on.shape[mesh_dim]) == 0]
        per_dim.append(here)
    found = []
    for choice in itertools.product(*per_dim):
        reductions = {c for c in choice if c.startswith("P")}
        if len(reductions) <= 1:  # one reduction per placement: mixed ones do not commute (split.py)
            found.append(".".join(choice))
    return found


def combinations(arguments: dict[str, list[str]], budget: int, *, seed: str) -> list[dict[str, str]]:
    """Up to ``budget`` placements of every argument (0: all of them), as ``{path: placement}``.

    ``arguments`` maps each tensor argument to its ``options``. Replicated
    arguments are left out of each result.
    """
    rng = random.Random(seed)
    placed = {path: [o for o in opts if not is_replicate(o)] for path, opts in arguments.items()}
    if budget == 0:
        found = []
        for choice in itertools.product(*[[None] + opts for opts in placed.values()]):
            found.append({p: c for p, c in zip(placed, choice) if c is not None})
        return [f for f in found if f]
    single = []
    for path, opts in placed.items():
        by_kind: dict[str, list[str]] = {}
        for o in opts:
            by_kind.setdefault(_kinds_key(o), []).append(o)
        for group in by_kind.values():
            rng.shuffle(group)
        # interleave the kinds, so that a small budget still sees each
        order = [o for batch in itertools.zip_longest(*by_kind.values()) for o in batch if o is not None]
        single.append([{path: o} for o in order])
    singles = [c for batch in itertools.zip_longest(*single) for c in batch if c is not None]
    multi = []
    if len(placed) > 1 and all(placed.values()):
        for _ in range(budget):
            multi.append({p: rng.choice(opts) for p, opts in placed.items()})
    share = budget if not multi else max(1, (2 * budget + 2) // 3)
    chosen = singles[:share]
    for c in multi:
        if len(chosen) >= budget:
            break
        if c not in chosen:
            chosen.append(c)
    for c in singles[share:]:  # a budget the combinations left unfilled
        if len(chosen) >= budget:
            break
        chosen.append(c)
    return chosen


def _kinds_key(placement: str) -> str:
    return ",".join(sorted({kind_of(p) for p in placement.split(".") if p != "R"}))
