"""A unit split among idle workers (workers.dispatch): which of its cases each part runs.

Each part of a split unit leaves out the cases of the other parts, chosen by a stable hash of the case id, so a
replayed or resumed part runs the same cases, and the parts together run every case once.
"""

from __future__ import annotations

import zlib


def in_part(case_id: str, part: tuple[int, int] | None) -> bool:
    """Whether a case belongs to ``part`` (index, count) of its unit's split (every case does when there is none)."""
    return part is None or zlib.crc32(case_id.encode()) % part[1] == part[0]


class Leaving(frozenset):
    """The cases a worker leaves out of its unit: those in ``skip`` and, for a part of a split unit, the other parts'
    (``case_id in leaving`` is all the engine asks)."""

    def __new__(cls, skip, part: tuple[int, int] | None):
        made = super().__new__(cls, skip)
        made.part = part
        return made

    def __contains__(self, case_id) -> bool:
        return frozenset.__contains__(self, case_id) or not in_part(case_id, self.part)
