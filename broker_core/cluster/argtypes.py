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
  instance of it;
* ``Any``, no annotation, or a form this check does not know: anything.

An operation that takes ``**kwargs`` on to the library names the function
whose keywords it passes on (``keywords_of``): those keywords are checked
against that function's signature (an unknown keyword is refused by name).
"""

from __future__ import annotations

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


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is what the annotation ``hint`` allows (module doc)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _UNIONS:
        return any(fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is list:
        return isinstance(value, list) and (
            not args or all(fits(v, args[0]) for v in value)
        )
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if not args:
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(fits, value, args))
    if origin is dict:
        return isinstance(value, dict) and (
            not args
            or all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
        )
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a form not checked here (a TypeVar, a Protocol, ...)


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
            if not fits(v, hint):
                raise _mismatch(name, pname, hint, v)


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
        hint = annotations.get(key, Any)
        if not fits(value, hint):
            raise _mismatch(name, key, hint, value)


def _mismatch(name: str, param: str, hint: Any, value: Any) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{param}: must be {describe(hint)}, not {_given(value)} (argument of {name})"
    )
