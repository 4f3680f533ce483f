"""What a ``compile`` finding carries for its repro script (``Finding.data``)."""

from __future__ import annotations

from dataclasses import dataclass

# The oracle's three checks; a finding failed one of them: the compiled result against eager, eager after
# the compile against eager before, the global state around the compile.
COMPILED, AFTER, STATE = "compiled", "after", "state"
ASPECTS = (COMPILED, AFTER, STATE)
# The oracle names of the compiled variant's cases (variant.py): the sweep's case compiled with static or dynamic shapes.
# Their findings are the references' and contracts', and carry no Detail record.
STATIC, DYNAMIC = "compile:static", "compile:dynamic"


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """Which check failed, and how the script makes it again."""

    aspect: str  # one of ASPECTS
    values_compared: bool = True  # False: compiled against eager by metadata only (a random op, an uninitialized result)
    imports: tuple[str, ...] = ()  # the run's --import modules, loaded before the call

    def __post_init__(self):
        if self.aspect not in ASPECTS:
            raise ValueError(f"aspect {self.aspect!r} is not one of {', '.join(ASPECTS)}")
