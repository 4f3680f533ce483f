"""What a ``capability`` finding carries for its repro script (``Finding.data``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """How the capabilities were compared when the finding was made; the script compares them the same way."""

    capabilities: tuple[str, ...]  # every capability compared, lowest first ("default", "avx2", "avx512")
    reference: str  # the one the others were compared with
    worker: str  # the capability the sweep's worker ran under (the others ran in peer processes)
    threads: int  # intra-op threads: a reduction's order depends on them
    imports: tuple[str, ...] = ()  # the run's --import modules, loaded by every process
