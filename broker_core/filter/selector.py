"""Compiled SQL92 selectors and the matcher the store's pull uses.

``compile(expression)`` parses, checks and compiles an expression once; the
result (or the syntax error) is cached by expression text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from broker_core.errors import FilterError, FilterEvaluationError, FilterSyntaxError
from broker_core.filter.codegen import Evaluator, build_evaluator
from broker_core.filter.nodes import Node, Prop, render
from broker_core.filter.parser import parse
from broker_core.tags import parse_subscription

#: Expression types of a subscription (RocketMQ ``ExpressionType``).
TAG = "TAG"
SQL92 = "SQL92"

CACHE_SIZE = 1024

Matcher = Callable[[Mapping[str, Any]], bool]
TextEvaluator = Callable[[str, Mapping[str, Any]], "bool | None"]


class Selector:
    """A compiled SQL92 expression.

    ``properties`` values are ``str`` (as the broker stores them) or ``int``,
    ``float``, ``bool`` in typed contexts; a missing name is NULL.
    """

    __slots__ = ("expression", "tree", "source", "properties", "_fn", "_text_fn")

    def __init__(self, expression: str, tree: Node) -> None:
        self.expression = expression
        self.tree = tree
        self._fn, self.source = build_evaluator(tree)
        self._text_fn: TextEvaluator | None = None
        #: Property names the expression reads.
        self.properties: frozenset[str] = frozenset(_names(tree))

    @property
    def evaluator(self) -> Evaluator:
        """The generated function behind ``evaluate`` (for tight loops)."""
        return self._fn

    @property
    def text_evaluator(self) -> TextEvaluator:
        """An evaluator over the encoded properties string of a record.

        Called as ``fn(text, typed)``: ``text`` is the ``name\\x01value\\x02``
        string the store keeps, ``typed`` a dict of typed values that take
        precedence over properties of the same name. It returns what
        ``evaluate`` returns for ``{**decode_properties(text), **typed}``.
        """
        fn = self._text_fn
        if fn is None:
            fn = self._text_fn = build_evaluator(self.tree, text_mode=True)[0]
        return fn

    def evaluate(self, properties: Mapping[str, Any]) -> bool | None:
        """Return TRUE, FALSE or None (SQL NULL) for ``properties``.

        Raises ``FilterEvaluationError`` when a value cannot be converted for a
        comparison (``a > 5`` with ``a = 'abc'``) or has an unsupported type.
        """
        return self._fn(properties)

    def matches(self, properties: Mapping[str, Any]) -> bool:
        """Return whether ``properties`` match: only TRUE does.

        An evaluation error counts as no match, as in RocketMQ's broker.
        """
        try:
            return self._fn(properties) is True
        except FilterEvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"

    def __str__(self) -> str:
        return render(self.tree)


def _names(node: object) -> set[str]:
    if isinstance(node, Prop):
        return {node.name}
    out: set[str] = set()
    for attr in ("operand", "left", "right"):
        child = getattr(node, attr, None)
        if child is not None:
            out |= _names(child)
    return out


#: Operators and operands an expression may hold (about 500 comparisons):
#: compiling the largest costs ~50 ms once (then cached), with the GIL held.
MAX_NODES = 2048


def _size(node: object, stop: int) -> int:
    """The nodes of ``node``'s tree, counted up to ``stop``."""
    count, todo = 0, [node]
    while todo and count < stop:
        n = todo.pop()
        count += 1
        for attr in ("operand", "left", "right"):
            child = getattr(n, attr, None)
            if child is not None:
                todo.append(child)
    return count


_cache: OrderedDict[str, Selector | FilterSyntaxError] = OrderedDict()
_cache_lock = threading.Lock()


def compile(expression: str) -> Selector:  # noqa: A001 - the module's verb
    """Return the compiled selector of ``expression`` (cached, up to 1024 texts).

    Raises ``FilterSyntaxError`` (``position``, ``expected``) for an invalid
    expression; failures are cached too, as RocketMQ's filter factory does.
    """
    if not isinstance(expression, str):
        raise FilterError(f"an SQL92 expression must be a string, not {expression!r}")
    with _cache_lock:
        hit = _cache.get(expression)
        if hit is not None:
            _cache.move_to_end(expression)
    if hit is None:
        try:
            tree = parse(expression)
            size = _size(tree, MAX_NODES + 1)
            if size > MAX_NODES:
                # Refused before the code generator: compiling holds the GIL
                # (1,501 chained terms took 0.5 s to fail, every other
                # client of the endpoint waiting meanwhile).
                raise FilterSyntaxError(
                    f"the expression is too complex: more than {MAX_NODES} "
                    "operators and operands",
                    0,
                    "fewer terms",
                )
            hit = Selector(expression, tree)
        except FilterSyntaxError as exc:
            hit = exc
        except (RecursionError, SyntaxError, MemoryError):
            # Thousands of chained terms: too deep for the code generator.
            hit = FilterSyntaxError(
                "expression is too complex to compile", 0, "fewer terms"
            )
        with _cache_lock:
            _cache[expression] = hit
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, FilterSyntaxError):
        raise FilterSyntaxError(str(hit), hit.position, hit.expected)
    return hit


def clear_cache() -> None:
    """Forget every compiled expression."""
    with _cache_lock:
        _cache.clear()


def cache_info() -> dict[str, int]:
    """Return the number of cached expressions and the capacity."""
    with _cache_lock:
        return {"size": len(_cache), "capacity": CACHE_SIZE}


def build_matcher(expression_type: str | None, expression: str | None) -> Matcher:
    """Return a predicate over a message's properties for a subscription.

    ``expression_type`` is ``"TAG"`` (default when None) or ``"SQL92"``, case
    insensitive. A TAG expression (``*``, ``a || b``) matches the exact
    ``TAGS`` property; an SQL92 expression matches when it evaluates to TRUE
    (NULL, FALSE and evaluation errors do not match). This is the one entry
    point the store's pull uses, so a subscription is compiled once and cached.

    Raises ``FilterSyntaxError`` for an invalid SQL92 expression and
    ``FilterError`` for a missing expression or an unknown type.
    """
    kind = (expression_type or TAG).upper()
    if kind == TAG:
        tag_filter = parse_subscription(expression)
        if tag_filter.match_all:
            return _match_all
        tags = tag_filter.tags

        def match_tags(properties: Mapping[str, Any]) -> bool:
            return properties.get("TAGS") in tags

        return match_tags
    if kind == SQL92:
        if expression is None or not expression.strip():
            raise FilterError("an SQL92 subscription needs an expression")
        return compile(expression).matches
    raise FilterError(f"unknown expression type {expression_type!r} (TAG or SQL92)")


def _match_all(properties: Mapping[str, Any]) -> bool:
    return True
