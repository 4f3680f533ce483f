"""Records to JSON and back, for the store: plain data, no pickle.

Every record that crosses a stage boundary is a frozen dataclass of strings,
numbers, bytes, tuples and other such records. ``encode`` turns one into
JSON-safe values (bytes as base64); ``decode`` rebuilds it from the field
types, so a record read back equals the one written.
"""

from __future__ import annotations

import base64
import dataclasses
import typing
from functools import cache
from typing import Any


def encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def decode(cls, data: Any) -> Any:
    return _decode(cls, data)


def _decode(hint, data):
    if data is None:
        return None
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return hint(**{f.name: _decode(hints[f.name], data[f.name]) for f in dataclasses.fields(hint) if f.name in data})
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _decode(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item) for item in data)
        return tuple(_decode(a, item) for a, item in zip(args, data))
    if hint is bytes:
        return base64.b64decode(data["b64"])
    return data
