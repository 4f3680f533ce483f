"""The repro kit: what every standalone repro script is made of.

Design note. ``kit`` holds the helpers a script contains (rebuild a tensor
exactly, compare results, read a storage, ...) as ordinary functions, and
``kit.source`` copies them into a script; ``parts`` writes the pieces of a
script (header, preamble, the call, the tensors, the verdict, the bytes);
``checks`` (with ``support``) writes the generic script of a finding of the
references and contracts. The oracles' own scripts use the same pieces.

This package sits just above ``judge``: it reads findings and call records
and imports nothing of the engine, the sweep, the reports or the oracles.
"""

from .checks import CHECKS, check_of, generic_script, why_not
from .kit import HANG_SECONDS, imports, source

__all__ = ["CHECKS", "HANG_SECONDS", "check_of", "generic_script", "imports", "source", "why_not"]
