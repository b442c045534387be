"""The arguments of an operation checked against its signature before it runs.

The admin API decodes each call's ``args`` and ``kwargs`` (``opscodec``) and
binds them to the operation's signature; ``check_call`` then compares every
bound value with its parameter's annotation, so that a float or a boolean
where the operation wants an integer is refused (``InvalidArgumentError``, a
``ValidationError``: 400, naming the argument, the type expected and the type
given; the console raises it again) and never reaches the store. What an
annotation allows:

* ``int``: an integer, not a boolean; ``float``: a float or an integer (not
  a boolean); ``bool``, ``str``, ``bytes``: that type exactly;
* ``X | None`` and other unions: any of their members; ``Literal[...]``: one
  of its values;
* ``list[X]``, ``tuple[X, ...]``, ``dict[K, V]``: that container with each
  member checked;
* a class (the library's dataclasses and enums, which the codec builds): an
  instance of it; a dataclass's fields, each checked against its own
  annotation in turn (recursively), so that a ``Message`` whose ``flag`` is a
  string is refused naming the argument and the field
  (``message: field flag: must be int, not str (argument of send)``);
* ``Any``, no annotation, or a form this check does not know: anything.

An operation that takes ``**kwargs`` on to the library names the function
whose keywords it passes on (``keywords_of``): those keywords are checked
against that function's signature (an unknown keyword is refused by name).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from broker_core.errors import InvalidArgumentError

_UNIONS = (typing.Union, types.UnionType)


@functools.cache
def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(fn)


def hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s parameter annotations, resolved (cached per function)."""
    return _hints(getattr(fn, "__func__", fn))


#: where in a value a check failed, outermost first: a dataclass's field
#: names and, as 1-tuples, the indexes (or keys) of the containers on the way
_Path = tuple[str | tuple[Any], ...]


@functools.cache
def field_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    """A dataclass's fields with their annotations resolved (cached per
    class): every field, set by ``__init__`` or not."""
    resolved = typing.get_type_hints(cls)
    return tuple((f.name, resolved.get(f.name, Any)) for f in dataclasses.fields(cls))


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is what the annotation ``hint`` allows (module doc)."""
    return mismatch(value, hint) is None


def mismatch(value: Any, hint: Any) -> tuple[_Path, Any, Any] | None:
    """None when ``value`` fits ``hint`` (module doc); otherwise where it
    does not: (the path to the part that does not fit, the annotation there,
    the value there). The path is empty when ``value`` itself is of the wrong
    type; it leads into a dataclass's fields (through the containers that
    hold it) when ``value`` is of the right type but a field is not."""
    if hint is Any or hint is inspect.Parameter.empty:
        return None
    miss: tuple[_Path, Any, Any] = ((), hint, value)
    if hint is None or hint is type(None):
        return None if value is None else miss
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _UNIONS:
        deeper = None
        for a in args:
            inner = mismatch(value, a)
            if inner is None:
                return None
            if deeper is None and inner[0]:
                deeper = inner  # the right type, a field of it wrong
        return deeper or miss
    if origin is typing.Literal:
        ok = any(value == a and type(value) is type(a) for a in args)
        return None if ok else miss
    if origin is list:
        if not isinstance(value, list):
            return miss
        if not args:
            return None
        return _members(enumerate(value), (args[0],) * len(value), miss)
    if origin is tuple:
        if not isinstance(value, tuple):
            return miss
        if not args:
            return None
        if len(args) == 2 and args[1] is Ellipsis:
            return _members(enumerate(value), (args[0],) * len(value), miss)
        if len(value) != len(args):
            return miss
        return _members(enumerate(value), args, miss)
    if origin is dict:
        if not isinstance(value, dict):
            return miss
        if not args:
            return None
        for k in value:
            if not fits(k, args[0]):
                return miss
        return _members(value.items(), (args[1],) * len(value), miss)
    if hint is bool:
        return None if isinstance(value, bool) else miss
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else miss
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else miss
    if isinstance(hint, type):
        if not isinstance(value, hint):
            return miss
        kind: type = type(value)
        if dataclasses.is_dataclass(kind):
            for name, field_hint in field_hints(kind):
                inner = mismatch(getattr(value, name), field_hint)
                if inner is not None:
                    return ((name, *inner[0]), inner[1], inner[2])
        return None
    return None  # a form not checked here (a TypeVar, a Protocol, ...)


def _members(
    items: Any, member_hints: Any, miss: tuple[_Path, Any, Any]
) -> tuple[_Path, Any, Any] | None:
    """The first member of a container that does not fit its annotation:
    the container itself (``miss``) when the member is of the wrong type, the
    field inside it when it is a dataclass with a field of the wrong type."""
    for (key, v), h in zip(items, member_hints, strict=True):
        inner = mismatch(v, h)
        if inner is not None:
            if not inner[0]:
                return miss
            return (((key,), *inner[0]), inner[1], inner[2])
    return None


def _where(path: _Path) -> str:
    """A path of ``mismatch`` as a reader would write it (``flag``,
    ``[2].flag``, ``inner.queue_id``)."""
    out = ""
    for step in path:
        if isinstance(step, str):
            out += f".{step}" if out else step
        else:
            out += f"[{step[0]!r}]"
    return out


def describe(hint: Any) -> str:
    """An annotation as a reader would write it (``int | None``)."""
    if hint is None or hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin in _UNIONS:
        return " | ".join(describe(a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    if origin is not None:
        inner = ", ".join(
            "..." if a is Ellipsis else describe(a) for a in typing.get_args(hint)
        )
        return f"{origin.__name__}[{inner}]" if inner else origin.__name__
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _given(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def keywords_of(
    target: Callable[[], Callable[..., Any]], skip: tuple[str, ...] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark an operation whose ``**kwargs`` go on to ``target()`` (a function
    given lazily, so that its module is imported on the first call); ``skip``:
    its parameters the operation passes itself (not keywords a caller gives)."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__keywords_of__ = (target, skip)  # type: ignore[attr-defined]
        return fn

    return mark


def check_call(
    name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> None:
    """Refuse (``InvalidArgumentError``) arguments that do not bind to ``fn``'s
    signature or whose types its annotations do not allow (module doc)."""
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(f"{name}: {exc}") from None
    annotations = hints(fn)
    for pname, value in bound.arguments.items():
        param = sig.parameters[pname]
        if param.kind is param.VAR_KEYWORD:
            _check_keywords(name, fn, value)
            continue
        hint = annotations.get(pname, Any)
        values = value if param.kind is param.VAR_POSITIONAL else (value,)
        for v in values:
            _check(name, pname, v, hint)


def _check_keywords(name: str, fn: Callable[..., Any], given: dict[str, Any]) -> None:
    """The ``**kwargs`` of ``fn``: against its ``keywords_of`` target's
    keyword parameters when it names one."""
    marked = getattr(getattr(fn, "__func__", fn), "__keywords_of__", None)
    if marked is None:
        return
    target, skip = marked
    to = target()
    params = {
        n: p
        for n, p in inspect.signature(to).parameters.items()
        if n not in ("self", *skip)
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    annotations = hints(to)
    for key, value in given.items():
        if key not in params:
            known = ", ".join(sorted(params))
            raise InvalidArgumentError(
                f"{name}: unknown keyword argument {key!r} (it takes {known})"
            )
        _check(name, key, value, annotations.get(key, Any))


def _check(name: str, param: str, value: Any, hint: Any) -> None:
    """Refuse ``value`` for the argument ``param`` of ``name`` unless it fits
    ``hint``: the message names the argument and, inside a dataclass, the
    field (``message: field flag: must be int, not str (argument of send)``)."""
    miss = mismatch(value, hint)
    if miss is None:
        return
    path, hint, value = miss
    where = f"{param}: field {_where(path)}" if path else param
    raise InvalidArgumentError(
        f"{where}: must be {describe(hint)}, not {_given(value)} (argument of {name})"
    )
