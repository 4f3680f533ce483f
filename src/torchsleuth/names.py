"""Names a user types (ops, dtypes, layouts, oracles, searches): matched, suggested, and cached for a quick answer.

Design note. A typo should be answered before anything slow loads: importing
torch takes a second, OpInfo's catalog many. This module imports the standard
library only, so the command line can check names with it before either (see
``cli/precheck.py``). The dtype names are fixed here; the other lists come
from code that needs torch (the catalog, the layout table, the oracle and
search registries), so the first full load writes them to a cache file in
the user's cache folder (``$TORCHSLEUTH_CACHE``, else
``$XDG_CACHE_HOME/torchsleuth``, else ``~/.cache/torchsleuth``), one file
per torch version, holding a fingerprint of torch's version and of
torchsleuth's own source; a file whose fingerprint differs is ignored, so a
cache never rejects a name the code now knows. Nothing is ever required of
the cache: without it the names are checked where they always were.

The matching itself (``resolve_names``, the suggestions for an unknown op)
lives here too, so the quick check and the full one say the same words.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from .errors import UsageError

# Names a user may give to --dtypes, in the order they are listed (``dtypes.NAMES``).
DTYPES = (
    "float64", "float32", "float16", "bfloat16",
    "complex128", "complex64", "complex32",
    "int64", "int32", "int16", "int8", "uint8", "bool",
)
DTYPE_ALIASES = {"double": "float64", "float": "float32", "half": "float16", "long": "int64", "int": "int32", "cfloat": "complex64",
                 "cdouble": "complex128"}
# The lists a cache file holds, each written by the full load.
LISTS = ("ops", "layouts", "variants", "oracles", "searches")


def split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def dtype(name: str) -> str:
    """A dtype name as typed (an alias: ``half``) -> its name (``float16``); an unknown one is one line."""
    name = DTYPE_ALIASES.get(name.strip(), name.strip())
    if name not in DTYPES:
        close = difflib.get_close_matches(name, DTYPES, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"unknown dtype {name!r}{hint}; allowed: {', '.join(DTYPES)}")
    return name


def resolve_names(text: str | None, allowed: tuple[str, ...], what: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """The names of a comma-separated list, each one of ``allowed``; ``all`` is every one, nothing is ``default``."""
    if text is None or not text.strip():
        return default
    if text.strip() == "all":
        return allowed
    chosen = []
    for name in split(text):
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"unknown {what} {name!r}{hint}; allowed: {', '.join(allowed)}")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def close_ops(pattern: str, known) -> list[str]:
    """The catalog names a bare op name that matched none may have meant: the ones holding it as a dotted part
    (``gelu``: ``nn.functional.gelu``), else look-alikes (``sofmax``: ``softmax``); at most three."""
    return named_inside(pattern, known) or difflib.get_close_matches(pattern, known, n=3, cutoff=0.6)


def named_inside(pattern: str, known) -> list[str]:
    """The names that hold a bare ``pattern`` as one of their dotted parts, cut after it (``gelu``:
    ``nn.functional.gelu``; ``pad``: ``nn.functional.pad``, which takes its variants), the shortest first: what a
    user who knows the op by its torch function's name means (at most three)."""
    if any(c in pattern for c in "*?[.:") or not pattern:
        return []
    found = set()
    for name in known:
        parts = name.split(".")
        if pattern in parts:
            found.add(".".join(parts[: parts.index(pattern) + 1]))
    return sorted(found, key=lambda n: (len(n), n))[:3]


def unknown_op(pattern: str, known, command: str) -> str:
    """The one line for a catalog op name that selects nothing."""
    close = close_ops(pattern, known)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; `torchsleuth {command} --list` shows every op"
    return f"unknown op {pattern!r}{hint}"


# --- the cache --------------------------------------------------------------------------------


def cache_folder() -> Path:
    if os.environ.get("TORCHSLEUTH_CACHE"):
        return Path(os.environ["TORCHSLEUTH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchsleuth"


def torch_version() -> str:
    """The installed torch's version, read from its metadata (importing torch would cost the second this saves)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def fingerprint() -> str:
    """torch's version, and where torchsleuth's source is and when it last changed: what the lists depend on."""
    package = Path(__file__).resolve().parent
    newest = max((entry.stat().st_mtime_ns for entry in package.rglob("*.py")), default=0)
    return f"torch {torch_version()}; torchsleuth at {package} ({newest}); python {sys.version_info[:2]}"


def cache_file() -> Path:
    return cache_folder() / f"names-torch-{torch_version()}.json"


def cached() -> dict[str, list[str]] | None:
    """The lists the last full load wrote, if they were written by this torch and this torchsleuth; else None."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint() or not all(isinstance(data.get(k), list) for k in LISTS):
        return None
    return {key: data[key] for key in LISTS}


def remember(lists: dict[str, list[str]]) -> None:
    """Write the lists (``LISTS``) for the next command's quick check; a folder that cannot be written is no error."""
    if cached() == {key: list(lists[key]) for key in LISTS}:
        return
    target = cache_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"fingerprint": fingerprint(), **{key: list(lists[key]) for key in LISTS}}), encoding="utf-8")
        os.replace(temporary, target)
    except OSError:
        pass
