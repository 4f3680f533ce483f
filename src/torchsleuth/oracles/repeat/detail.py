"""What a ``repeat`` case changes, and what a finding tells its script: the records the oracle and the script share.

Design note. A case's oracle name says what B changes against A, so that
the case replays from its id alone: ``repeat:alpha=0.5`` (one number
argument and B's value of it, as ``repr`` writes it, spaces dropped) or
``repeat:dtype=float64`` (every tensor of the case's dtype in another).
``Change`` is that name as a record; it is written and read here only (the
plan writes it; the judge, and the script of a crash the sweep saw, read
it).

A ``stale_result`` finding carries a ``Detail`` in ``Finding.data``
(``judge.plugin.encode_detail``): what its script needs beyond the call,
namely both values of the number (or B's dtype), the check that failed and
how B's cache-free reference was made. ``Finding.detail`` says the same in
a sentence for a reader; nothing parses it.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

PREFIX = "repeat:"  # every repeat case's oracle name starts so
DTYPE_PREFIX = PREFIX + "dtype="  # ... and a dtype case's so: B is the call in another dtype

# Non-finite numbers as a case's oracle name writes them (repr), which literal_eval cannot read.
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

# How B's cache-free reference is made (see oracle.py's design note). The words appear in
# summaries: "its nudged float64 reference says ...".
NUDGED = "nudged float64"  # B in float64 (complex128) on the CPU, on nudged copies
INTEGER = "int"  # B on the CPU in another integer dtype, judged exactly
CPU = "CPU"  # B on the CPU in the case's own dtype (an integer or bool case on another device)
B_REFERENCES = (NUDGED, INTEGER, CPU)

# The checks a finding can come from.
AGAIN = "again"  # the second A gave other bits than the first
STALE = "stale"  # B holds A's result where B's reference says otherwise
DTYPES = "dtypes"  # B (in another dtype) returns other dtypes than the op gives for B's inputs
CHECKS = (AGAIN, STALE, DTYPES)


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """What B changes against A: one number argument, or the dtype (exactly one of the two is set)."""

    argument: str = ""  # the number argument: "alpha", "args[1]" (the sample's args after the input)
    number: bool | int | float | complex | None = None  # B's value of it
    dtype: str = ""  # B's dtype, for the dtype case: "float64"

    @classmethod
    def parse(cls, oracle: str) -> Change:
        """A case's oracle name as a record: ``"repeat:alpha=0.5"`` -> ``Change(argument="alpha", number=0.5)``."""
        if oracle.startswith(DTYPE_PREFIX):
            return cls(dtype=oracle.removeprefix(DTYPE_PREFIX))
        argument, _, text = oracle.removeprefix(PREFIX).rpartition("=")
        return cls(argument=argument, number=NON_FINITE[text] if text in NON_FINITE else ast.literal_eval(text))

    def oracle_name(self) -> str:
        """The case's oracle name: ``parse``'s inverse."""
        if self.dtype:
            return DTYPE_PREFIX + self.dtype
        return f"{PREFIX}{self.argument}={repr(self.number).replace(' ', '')}"


def argument_position(argument: str) -> int | None:
    """Where a number argument stands in the call, the input first (``"args[1]"`` -> 2); None for a keyword."""
    return int(argument[len("args["):-1]) + 1 if argument.startswith("args[") else None


def source_literal(value) -> str:
    """A number as Python source: ``float('inf')`` where repr would give a bare name."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """What a ``stale_result`` finding's script reads back (``Finding.data``)."""

    check: str  # the check that found it: one of CHECKS
    argument: str = ""  # the number argument B changes ("alpha", "args[1]"); "" when B is the call in another dtype
    a_number: str = ""  # A's value of it, as Python source ("-0.5", "float('inf')")
    b_number: str = ""  # B's
    b_dtype: str = ""  # B's dtype when B is the call in another dtype ("float64"); "" when B changes a number
    b_reference: str = ""  # how B's cache-free reference is made: one of B_REFERENCES; "" when B has none
    reference_dtype: str = ""  # the dtype B's reference computes in ("float64", "int32"); "" for the case's own
