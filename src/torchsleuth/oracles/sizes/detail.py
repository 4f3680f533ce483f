"""What a ``sizes`` finding carries for its repro script (``Finding.data``, judge.plugin.encode_detail)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """The configurations the oracle made, and what its rule allowed at the worst element."""

    reduction: bool  # rows batched along a new dim (a reduction); else the sample's values tiled (pointwise)
    sizes: tuple[int, ...]  # the lengths tiled (pointwise) or the rows per batch (reduction), as run.lengths gave them
    front: bool = False  # a reduction's batch is a new first dim (the kernel got negative dims); else a new last one
    slack: float = 0.0  # what the rule allowed beyond ATOL + RTOL * |expected| at the worst element (its measured sensitivity)
    signed_zero: bool = True  # the sign of a zero is judged (not for an op that picks between tied zeros: judge.canonical)
    wrong: tuple[str, ...] = ()  # the configurations that disagree, as the summary names them ("length 9", ...)
