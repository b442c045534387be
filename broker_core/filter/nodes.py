"""Syntax tree of a parsed selector.

Values follow Java's types: ``jtype`` of a constant is one of ``NULL``,
``BOOLEAN``, ``INTEGER``, ``LONG``, ``DOUBLE``, ``STRING``. Derived forms are
built from the primitives as RocketMQ builds them: ``a <> b`` is
``Not(Eq(a, b))``, ``BETWEEN`` is two comparisons joined by ``And``, ``IS NOT
NULL`` is ``Not(IsNull(...))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

NULL = "null"
BOOLEAN = "boolean"
INTEGER = "integer"
LONG = "long"
DOUBLE = "double"
STRING = "string"


@dataclass(frozen=True, slots=True)
class Const:
    value: object
    jtype: str
    pos: int


@dataclass(frozen=True, slots=True)
class Prop:
    name: str
    pos: int


@dataclass(frozen=True, slots=True)
class Neg:
    """Unary minus of a non-constant: null unless the operand is a number."""

    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A bare property used as a condition: TRUE only for a boolean TRUE."""

    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Eq:
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    pos: int


@dataclass(frozen=True, slots=True)
class Cmp:
    """``>``, ``>=``, ``<`` or ``<=``."""

    op: str
    left: Node
    right: Node
    pos: int


@dataclass(frozen=True, slots=True)
class In:
    operand: Prop
    values: frozenset[str]
    negated: bool
    pos: int


@dataclass(frozen=True, slots=True)
class StrOp:
    """``CONTAINS``, ``STARTSWITH`` or ``ENDSWITH`` (method: contains,
    startswith, endswith), optionally negated."""

    method: str
    operand: Node
    arg: str
    negated: bool
    pos: int


Node: TypeAlias = (
    Const | Prop | Neg | BoolCast | Not | And | Or | Eq | IsNull | Cmp | In | StrOp
)

#: Nodes whose value is TRUE, FALSE or NULL (RocketMQ's ``BooleanExpression``).
BOOLEAN_NODES = (BoolCast, Not, And, Or, Eq, IsNull, Cmp, In, StrOp)


def is_boolean(node: Node) -> bool:
    """Return whether ``node`` is a condition (TRUE/FALSE/NULL literals too)."""
    if isinstance(node, Const):
        return node.jtype in (BOOLEAN, NULL)
    return isinstance(node, BOOLEAN_NODES)


def render(node: Node) -> str:
    """Return a canonical, fully parenthesised text of ``node`` (for messages)."""
    if isinstance(node, Const):
        if node.jtype == NULL:
            return "NULL"
        if node.jtype == BOOLEAN:
            return "TRUE" if node.value else "FALSE"
        if node.jtype == STRING:
            return "'" + str(node.value).replace("'", "''") + "'"
        return repr(node.value)
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, Neg):
        return f"-{render(node.operand)}"
    if isinstance(node, BoolCast):
        return render(node.operand)
    if isinstance(node, Not):
        return f"NOT ({render(node.operand)})"
    if isinstance(node, And):
        return f"({render(node.left)} AND {render(node.right)})"
    if isinstance(node, Or):
        return f"({render(node.left)} OR {render(node.right)})"
    if isinstance(node, Eq):
        return f"({render(node.left)} = {render(node.right)})"
    if isinstance(node, IsNull):
        return f"({render(node.operand)} IS NULL)"
    if isinstance(node, Cmp):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    if isinstance(node, In):
        items = ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(node.values))
        return f"({node.operand.name} {'NOT IN' if node.negated else 'IN'} ({items}))"
    word = node.method.upper()
    return f"({render(node.operand)} {'NOT ' if node.negated else ''}{word} " + (
        "'" + node.arg.replace("'", "''") + "')"
    )
