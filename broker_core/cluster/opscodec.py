"""JSON for the values ``NodeOps`` takes and returns over the admin API.

The console's pages work with the library's own types (``HalfPage``,
``MessageExt``, ``DelayStats``, ...); the node's answers carry them as tagged
JSON so that the console gets the same objects back whether it opened the
store itself or asked the node:

* a dataclass of the library is ``{"__t": "module.Class", "f": {field: value}}``;
* an enum member is ``{"__e": "module.Class", "v": value}``;
* bytes are ``{"__b": base64}``; a tuple is ``{"__tu": [...]}``; a dict whose
  keys are not all plain strings is ``{"__d": [[key, value], ...]}``;
* a ``MessageExt`` is its record: ``{"__m": base64}`` (decoded lazily again);
* a ``BrokerError`` is ``{"type": "ClassName", "message": ..., "attrs": {...}}``.

Decoding builds only the classes listed here (``_types``): an answer cannot
make the console instantiate anything else.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from enum import Enum
from typing import Any

from broker_core import errors
from broker_core.errors import CodecError

_TAGS = ("__t", "__e", "__b", "__tu", "__d", "__m")


@functools.cache
def _types() -> dict[str, type]:
    from broker_core import (
        browse,
        groups,
        lag,
        message,
        metadata,
        offset_reset,
        search,
    )
    from broker_core.schedule import results
    from broker_core.transaction import types

    out: dict[str, type] = {}
    mods = (
        browse,
        groups,
        lag,
        message,
        metadata,
        offset_reset,
        search,
        results,
        types,
    )
    for mod in mods:
        for obj in vars(mod).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == mod.__name__
                and (dataclasses.is_dataclass(obj) or issubclass(obj, Enum))
            ):
                out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return out


def _name(cls: type) -> str:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if _types().get(name) is not cls:
        raise CodecError(f"{name} cannot cross the admin API")
    return name


_PLAIN = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _fields(cls: type) -> tuple[str, tuple[str, ...], frozenset[str]]:
    """A dataclass's tag, field names and the names not set by ``__init__``."""
    fs = dataclasses.fields(cls)
    return (
        _name(cls),
        tuple(f.name for f in fs),
        frozenset(f.name for f in fs if not f.init),
    )


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (module doc)."""
    from broker_core.message import MessageExt

    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        return [encode(v) for v in value]
    if isinstance(value, Enum):  # before str and int: StrEnum, IntEnum
        return {"__e": _name(kind), "v": encode(value.value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        tag, names, _ = _fields(type(value))
        return {"__t": tag, "f": {n: encode(getattr(value, n)) for n in names}}
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, MessageExt):
        return {"__m": base64.b64encode(value.raw_record()).decode()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"__tu": [encode(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__d": [[encode(k), encode(v)] for k, v in value.items()]}
    raise CodecError(f"{type(value).__name__} cannot cross the admin API")


def depth(data: Any) -> int:
    """How deeply ``data`` (decoded JSON) nests lists and objects: 0 for a
    scalar, 1 for ``[]``. Counted without recursion, so a value too deep for
    ``encode`` and ``decode`` is measured and refused first."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        deepest = max(deepest, level)
        todo.extend((v, level + 1) for v in children)
    return deepest


def decode(data: Any) -> Any:
    """The value ``encode`` made ``data`` from."""
    kind = type(data)
    if kind is list:
        return [decode(v) for v in data]
    if kind is not dict:
        return data
    if "__t" in data:
        return _build(data["__t"], data.get("f") or {})
    if "__e" in data:
        cls = _types().get(data["__e"])
        if cls is None or not issubclass(cls, Enum):
            raise CodecError(f"unknown enum {data['__e']!r}")
        return cls(decode(data.get("v")))
    if "__b" in data:
        return base64.b64decode(data["__b"])
    if "__m" in data:
        from broker_core.message import MessageExt

        return MessageExt(base64.b64decode(data["__m"]))
    if "__tu" in data:
        return tuple(decode(v) for v in data["__tu"])
    if "__d" in data:
        return {_key(decode(k)): decode(v) for k, v in data["__d"]}
    return {k: decode(v) for k, v in data.items()}


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _build(name: str, values: dict[str, Any]) -> Any:
    cls = _types().get(name)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise CodecError(f"unknown type {name!r}")
    _, names, not_init = _fields(cls)
    if not set(values) <= set(names):
        unknown = sorted(set(values) - set(names))
        raise CodecError(f"{name}: unknown fields {unknown}")
    if not not_init:
        return cls(**{k: decode(v) for k, v in values.items()})
    obj = cls(**{k: decode(v) for k, v in values.items() if k not in not_init})
    for k in not_init & set(values):
        object.__setattr__(obj, k, decode(values[k]))
    return obj


# -- errors --------------------------------------------------------------------
@functools.cache
def _error_types() -> dict[str, type[errors.BrokerError]]:
    out: dict[str, type[errors.BrokerError]] = {}
    todo: list[type[errors.BrokerError]] = [errors.BrokerError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == errors.__name__:
            out[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return out


def encode_error(exc: errors.BrokerError) -> dict[str, Any]:
    attrs = {}
    for k, v in vars(exc).items():
        try:
            attrs[k] = encode(v)
        except CodecError:
            continue
    return {"type": type(exc).__name__, "message": str(exc), "attrs": attrs}


def decode_error(data: dict[str, Any]) -> errors.BrokerError:
    """The library's exception of that name (``BrokerError`` for a name it
    does not know), with the node's message and attributes."""
    cls = _error_types().get(str(data.get("type")), errors.BrokerError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(data.get("message", "")))
    for k, v in (data.get("attrs") or {}).items():
        try:
            setattr(exc, k, decode(v))
        except (AttributeError, CodecError):
            continue
    return exc
