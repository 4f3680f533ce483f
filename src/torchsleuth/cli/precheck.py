"""The names `torchsleuth ops` is given, and the output paths of the commands that write, checked before torch loads.

Design note. ``main`` calls ``check`` with the command line before it builds
the parser (which imports every command, and torch with them). It reads the
name flags only (``--ops``, ``--dtypes``, ``--layouts``, ``--variants``,
``--oracles``, ``--search``) and answers a name that cannot be right with the
line the full check would print (``names`` holds the matching for both):
dtypes from the fixed list, the others from the lists the last full load
cached (``names.cached``). It never accepts anything: a name it cannot judge
here is left to the full check that follows, so it answers quickly or not at
all. Ops are judged only when given as catalog names (no glob, no ``aten.``
or ``NS::`` overload, no ``--import`` that may register more), the form a
typo takes. The output paths given are checked here too (``paths.check``),
on the commands whose flags cannot be a script's (not ``watch``). ``remember`` writes the cache once a run has loaded the catalog.
"""

from __future__ import annotations

import argparse

from .. import names, paths
from ..errors import UsageError

# the flags read here, and their list in the cache
_FLAGS = {"--ops": "ops", "--dtypes": "dtypes", "--layouts": "layouts", "--variants": "variants", "--oracles": "oracles",
          "--search": "searches"}


# the commands whose output paths are checked here (watch's flags may follow its script, and be the script's)
_WRITERS = {"ops": ("--out", "--json", "--junit"), "optim": ("--out", "--json"), "shard": ("--out", "--json"), "drill": ("--json",)}


def check(argv: list[str]) -> None:
    """Raise ``UsageError`` for a name or an output path in the argv that cannot be right; do nothing when unsure."""
    if not argv:
        return
    if argv[0] in _WRITERS:
        _outputs(argv[0], argv[1:])
    if argv[0] == "ops":
        _names(argv)


def _outputs(command: str, argv: list[str]) -> None:
    parser = _Quiet(add_help=False, allow_abbrev=False)
    for flag in _WRITERS[command]:
        parser.add_argument(flag)
    try:
        given, _ = parser.parse_known_args(argv)
    except _Unsure:
        return
    paths.check(**{flag[2:]: getattr(given, flag[2:]) for flag in _WRITERS[command]})


def _names(argv: list[str]) -> None:
    parser = _Quiet(add_help=False, allow_abbrev=False)
    for flag in _FLAGS:
        parser.add_argument(flag)
    parser.add_argument("--import", dest="imports", action="append", default=[])
    try:
        given, _ = parser.parse_known_args(argv[1:])
    except _Unsure:  # a flag without its value: the full parser says so
        return
    if given.dtypes and given.dtypes.strip() != "all":
        for name in names.split(given.dtypes):
            names.dtype(name)
    lists = names.cached()
    if lists is None:
        return
    if given.layouts:
        names.resolve_names(given.layouts, tuple(lists["layouts"]), "layout", ())
    if given.variants:
        names.resolve_names(given.variants, tuple(lists["variants"]), "variant", ())
    if given.oracles and given.oracles.strip() != "none":
        names.resolve_names(given.oracles, tuple(lists["oracles"]), "oracle", ())
    if given.search and given.search.strip() != "none":
        names.resolve_names(given.search, tuple(lists["searches"]), "search", ())
    if given.ops and not given.imports:
        _ops(given.ops, lists["ops"])


class _Unsure(Exception):
    pass


class _Quiet(argparse.ArgumentParser):
    """argparse that prints nothing on an error: the full parser, which comes next, tells the user."""

    def error(self, message: str):
        raise _Unsure(message)


def _ops(text: str, catalog: list[str]) -> None:
    prefixes = {name.partition(".")[0] for name in catalog}
    for pattern in names.split(text):
        if pattern == "all" or any(c in pattern for c in "*?[:") or pattern.startswith("aten."):
            continue  # a glob, or overloads swept from their schema: the full check knows those
        if "." in pattern and pattern.partition(".")[0] not in prefixes:
            continue  # perhaps an op namespace's overload (prims.add)
        if not any(name == pattern or name.startswith(pattern + ".") for name in catalog):
            raise UsageError(names.unknown_op(pattern, catalog, "ops"))


def remember(*, ops, layouts, variants, oracles, searches) -> None:
    """The lists a full load found, cached for the next command's quick check."""
    names.remember({"ops": sorted(ops), "layouts": list(layouts), "variants": list(variants), "oracles": list(oracles),
                    "searches": list(searches)})
