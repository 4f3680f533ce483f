"""What an ``exact`` finding tells its script: the points where the kernel is wrong, with the exact values."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    call: str  # the public call, taking the points' tensors in path order and then the numbers ("torch.special.zeta")
    numbers: tuple = ()  # the sample's non-tensor positional arguments, after the tensors (polygamma's order)
    dtype: str = "float64"
    points: tuple[tuple[str, ...], ...] = ()  # each wrong point's inputs, as float.hex
    expected: tuple[str, ...] = ()  # the exact value at each, 25 significant digits
    allowed: tuple[float, ...] = ()  # how far from it the rule allowed the result
    source: str = ""  # the function as mpmath spells it, for a reader
