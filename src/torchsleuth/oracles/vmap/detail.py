"""What a ``vmap`` case judges, and what a finding tells its script: the records the oracle and the script share.

Design note. A case's oracle name says which mode it judges, so that it
replays from its id alone: ``vmap:forward`` (the call itself) or
``vmap:grad`` (its gradient, a vjp against seeded cotangents). A finding
carries a ``Detail`` in ``Finding.data`` (``judge.plugin.encode_detail``):
everything its script needs beyond the call to rebuild the batch and the
vmapped call (the mode, the tensors mapped over and each one's batch dim,
the batch size, the seed and kind of the other samples' values), and what
the rule allowed at the worst element. ``Finding.detail`` says the same in a
sentence for a reader; nothing parses it.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "vmap:"
FORWARD, GRAD = "forward", "grad"
MODES = (FORWARD, GRAD)

# The samples of a batch: the call's own first, then BATCH - 1 others.
BATCH = 3
# How the others' values are made: RANDOM, each tensor redrawn (floats uniformly in the range of its
# finite values, other dtypes from its own values), seeded; SAME, copies of the call's own (when
# redrawn values make the call raise: a matrix that must be positive definite, say).
RANDOM, SAME = "random", "same"
FILLS = (RANDOM, SAME)
# Seeds the redrawn values: this plus the sample's index.
SEED_BASE = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """What a ``vmap`` finding's script reads back (``Finding.data``)."""

    mode: str  # one of MODES
    paths: tuple[str, ...]  # the call's tensors vmap maps over, in the order the vmapped function takes them
    in_dims: tuple[int | None, ...]  # one per path: where its batch dim is in the stacked tensor; None: not batched
    batch: int = BATCH  # samples in the batch, the call's own first
    seed: int = 0  # seeds the other samples' values
    fill: str = RANDOM  # one of FILLS
    differentiated: tuple[str, ...] = ()  # grad: the inputs differentiated (the cotangents are the call's grad_output[i])
    sample: int = 0  # the sample of the batch where the worst difference is
    slack: float = 0.0  # what the rule allowed beyond ATOL + RTOL * |alone| at the worst element (its measured sensitivity)
    imports: tuple[str, ...] = ()  # the run's --import modules, loaded before the call

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.fill not in FILLS:
            raise ValueError(f"fill {self.fill!r} is not one of {', '.join(FILLS)}")
        if len(self.in_dims) != len(self.paths):
            raise ValueError(f"{len(self.in_dims)} in_dims for {len(self.paths)} paths")


def in_dims_source(in_dims: tuple[int | None, ...]) -> str:
    """``in_dims`` as torch.func.vmap takes it, as source: ``(1, None)``."""
    return repr(tuple(in_dims))
