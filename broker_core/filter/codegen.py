"""Translate a selector tree into a specialised Python function.

The generated function takes the properties mapping and returns True, False
or None (SQL NULL). Every property is read once; a comparison of a property
with a literal has an inline fast path for string values (the broker's case)
and falls back to the general helpers of ``javatypes`` for typed values.
Literals are embedded with ``repr`` (numbers, strings, booleans, None; all of
them finite and well-formed after parsing) or passed in as closure constants
(IN sets), never as raw text from the expression.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from broker_core.filter import javatypes
from broker_core.filter.nodes import (
    DOUBLE,
    INTEGER,
    LONG,
    STRING,
    And,
    BoolCast,
    Cmp,
    Const,
    Eq,
    In,
    IsNull,
    Neg,
    Node,
    Not,
    Or,
    Prop,
    StrOp,
)
from broker_core.filter.props import find_property

Evaluator = Callable[[Mapping[str, Any]], "bool | None"]

#: Helpers visible to generated code as closure variables.
_HELPERS: dict[str, object] = {
    "_str": str,
    "_bool": bool,
    "_jint": javatypes.java_int,
    "_jlong": javatypes.java_long,
    "_jdouble": javatypes.java_double,
    "_jbool": javatypes.java_bool,
    "_dcmp": javatypes.double_compare,
    "_equal": javatypes.equal,
    "_ordered": javatypes.ordered,
    "_negate": javatypes.negate,
    "_find": find_property,
}

# How a string property is parsed when compared with a literal of each type.
_STRING_PARSER = {INTEGER: "_jint", LONG: "_jlong", DOUBLE: "_jdouble"}


class _Gen:
    def __init__(self, text_mode: bool = False) -> None:
        self.text_mode = text_mode
        self.lines: list[str] = []
        self.props: dict[str, str] = {}
        # Properties already read on every path to the current line: a
        # property is read where first needed, so a short-circuited branch
        # costs nothing, and again after a branch that may not have run.
        self.loaded: set[str] = set()
        self.consts: dict[str, object] = {}
        self.count = 0

    def tmp(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def const(self, value: object) -> str:
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def prop(self, name: str, ind: int) -> str:
        var = self.props.get(name)
        if var is None:
            var = self.props[name] = f"v{len(self.props)}"
        if name not in self.loaded:
            self.loaded.add(name)
            if self.text_mode:
                for line in _text_head(name, var):
                    self.emit(ind, line)
            else:
                self.emit(ind, f"{var} = p.get({name!r})")
        return var

    # -- values ------------------------------------------------------------
    def value(self, node: Node, ind: int) -> str:
        """Emit code for a value and return a simple expression of it."""
        if isinstance(node, Const):
            # Parenthesised: "5.__class__" would not parse.
            return f"({node.value!r})"
        if isinstance(node, Prop):
            return self.prop(node.name, ind)
        if isinstance(node, Neg):
            inner = self.value(node.operand, ind)
            t = self.tmp()
            self.emit(ind, f"{t} = _negate({inner})")
            return t
        return self.boolean(node, ind)

    # -- conditions ----------------------------------------------------------
    def boolean(self, node: Node, ind: int) -> str:
        """Emit code for a condition and return a name or literal of its value."""
        if isinstance(node, Const):
            return repr(node.value)
        t = self.tmp()
        if isinstance(node, BoolCast):
            v = self.value(node.operand, ind)
            self.emit(
                ind,
                f"{t} = {v} if {v}.__class__ is _bool else "
                f"(None if {v} is None else False)",
            )
        elif isinstance(node, Not):
            v = self.boolean(node.operand, ind)
            self.emit(ind, f"{t} = None if {v} is None else not {v}")
        elif isinstance(node, And):
            left = self.boolean(node.left, ind)
            self.emit(ind, f"if {left} is False:")
            self.emit(ind + 1, f"{t} = False")
            self.emit(ind, "else:")
            saved = set(self.loaded)
            right = self.boolean(node.right, ind + 1)
            self.emit(
                ind + 1,
                f"{t} = {right} if {left} is True else "
                f"(False if {right} is False else None)",
            )
            self.loaded = saved
        elif isinstance(node, Or):
            left = self.boolean(node.left, ind)
            self.emit(ind, f"if {left} is True:")
            self.emit(ind + 1, f"{t} = True")
            self.emit(ind, "else:")
            saved = set(self.loaded)
            right = self.boolean(node.right, ind + 1)
            self.emit(
                ind + 1,
                f"{t} = {right} if {left} is False else "
                f"(True if {right} is True else None)",
            )
            self.loaded = saved
        elif isinstance(node, IsNull):
            if isinstance(node.operand, Const):
                # Folded: "is" on a literal other than None is a SyntaxWarning.
                return repr(node.operand.value is None)
            v = self.value(node.operand, ind)
            self.emit(ind, f"{t} = {v} is None")
        elif isinstance(node, Eq):
            self.emit(ind, f"{t} = {self.equality(node, ind)}")
        elif isinstance(node, Cmp):
            self.emit(ind, f"{t} = {self.ordering(node, ind)}")
        elif isinstance(node, In):
            v = self.value(node.operand, ind)
            k = self.const(node.values)
            test = f"{v} not in {k}" if node.negated else f"{v} in {k}"
            self.emit(ind, f"{t} = ({test}) if {v}.__class__ is _str else None")
        elif isinstance(node, StrOp):
            v = self.value(node.operand, ind)
            if not node.arg:
                self.emit(ind, f"{t} = False")
            else:
                arg = repr(node.arg)
                test = (
                    f"{arg} in {v}"
                    if node.method == "contains"
                    else (f"{v}.{node.method}({arg})")
                )
                if node.negated:
                    test = f"not ({test})"
                self.emit(ind, f"{t} = ({test}) if {v}.__class__ is _str else False")
        else:  # pragma: no cover - the parser builds no other node
            raise TypeError(f"unexpected node {node!r}")
        return t

    def equality(self, node: Eq, ind: int) -> str:
        left, right = node.left, node.right
        if isinstance(left, Prop) and isinstance(right, Const):
            v = self.value(left, ind)
            c = repr(right.value)
            if right.jtype == STRING:
                fast = f"{v} == {c}"
            elif right.jtype in (INTEGER, LONG):
                fast = f"{_STRING_PARSER[right.jtype]}({v}) == {c}"
            elif right.jtype == DOUBLE:
                fast = f"_dcmp(_jdouble({v}), {c}) == 0"
            else:
                fast = f"_jbool({v}) is {c}"
            return (
                f"None if {v} is None else "
                f"(({fast}) if {v}.__class__ is _str else _equal({v}, {c}))"
            )
        lv = self.value(left, ind)
        rv = self.value(right, ind)
        return f"_equal({lv}, {rv})"

    def ordering(self, node: Cmp, ind: int) -> str:
        left, right, op = node.left, node.right, node.op
        if isinstance(left, Prop) and isinstance(right, Const):
            prop, const, flipped = left, right, False
        elif isinstance(right, Prop) and isinstance(left, Const):
            prop, const, flipped = right, left, True
        else:
            lv = self.value(left, ind)
            rv = self.value(right, ind)
            return f"_ordered({op!r}, {lv}, {rv})"
        v = self.value(prop, ind)
        c = repr(const.value)
        parsed = f"{_STRING_PARSER[const.jtype]}({v})"
        if const.jtype == DOUBLE:
            sign = f"_dcmp({c}, {parsed})" if flipped else f"_dcmp({parsed}, {c})"
            fast = f"{sign} {op} 0"
        else:
            fast = f"{c} {op} {parsed}" if flipped else f"{parsed} {op} {c}"
        general = (
            f"_ordered({op!r}, {c}, {v})" if flipped else f"_ordered({op!r}, {v}, {c})"
        )
        return (
            f"None if {v} is None else "
            f"(({fast}) if {v}.__class__ is _str else {general})"
        )


def _text_head(name: str, var: str) -> list[str]:
    # Inline form of find_property for one identifier (no \x01/\x02 in it).
    pattern = "\x02" + name + "\x01"
    n = len(pattern)
    return [
        f"if {name!r} in f:",
        f"    {var} = f[{name!r}]",
        "else:",
        f"    i = p.rfind({pattern!r})",
        "    if i >= 0:",
        f"        j = p.find('\\x02', i + {n})",
        f"        {var} = p[i + {n}:j] if j >= 0 else p[i + {n}:]",
        f"        if not {var}:",
        f"            {var} = _find(p, {name!r})",
        f"    elif p.startswith({pattern[1:]!r}):",
        f"        j = p.find('\\x02', {n - 1})",
        f"        {var} = (p[{n - 1}:j] if j >= 0 else p[{n - 1}:]) or None",
        "    else:",
        f"        {var} = None",
    ]


def generate(node: Node, text_mode: bool = False) -> tuple[str, dict[str, object]]:
    """Return the source of a factory building the evaluator, and its constants.

    The evaluator takes a properties mapping ``p``; in ``text_mode`` it takes
    the encoded properties string ``p`` and a dict ``f`` of typed values that
    take precedence.
    """
    gen = _Gen(text_mode)
    result = gen.boolean(node, 2)
    signature = "    def _selector(p, f):" if text_mode else "    def _selector(p):"
    names = [*_HELPERS, *gen.consts]
    src = "\n".join(
        [
            f"def _factory({', '.join(names)}):",
            signature,
            *gen.lines,
            f"        return {result}",
            "    return _selector",
        ]
    )
    return src, gen.consts


def build_evaluator(
    node: Node, filename: str = "<selector>", text_mode: bool = False
) -> tuple[Any, str]:
    """Compile ``node`` into an evaluator function; return it and its source."""
    src, consts = generate(node, text_mode)
    namespace: dict[str, Any] = {}
    with warnings.catch_warnings():
        # A warning here means the generator emitted questionable code.
        warnings.simplefilter("error")
        code = compile(src, filename, "exec")
    exec(code, namespace)  # noqa: S102 - source built above
    fn = namespace["_factory"](*_HELPERS.values(), *consts.values())
    return fn, src
