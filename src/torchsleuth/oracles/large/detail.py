"""What a ``large`` finding of an element, index or creation probe carries for its repro script (``Finding.data``).

The stretched forms (``large:length=``, ``large:rows=``) carry none: their
findings are the stretched case's own, judged and scripted as any case is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """The large tensor the probe made and the positions it read."""

    probe: str  # "elements" (a pointwise call on tiled arguments), "index" (a gather or scatter over a tiled tensor), "creation"
    elements: int  # n: elements of the large tensor(s)
    distinct: int  # values tiled: element i holds value i % distinct (0 for a creation probe: nothing is tiled)
    positions: tuple[int, ...]  # the elements read (elements, creation) or indexed (index), in order
    shadows: tuple[int, ...] = ()  # a scatter's: the positions one boundary away, checked to keep their tiled value
    size: int = 0  # a creation probe's K: an identity's or triangle's size (n for a vector)
    step: float = 0.0  # a creation probe's S: arange's step
