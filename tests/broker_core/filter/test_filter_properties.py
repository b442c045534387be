"""Property-based tests: literal round trips and generated code vs a tree walker."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterEvaluationError, FilterSyntaxError
from broker_core.filter import compile, javatypes
from broker_core.filter.lexer import T, tokenize
from broker_core.filter.nodes import (
    DOUBLE,
    INTEGER,
    LONG,
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
from broker_core.filter.parser import parse


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@settings(deadline=None)
@given(st.text())
def test_string_literal_round_trip(text: str) -> None:
    tokens = tokenize(quote(text))
    assert tokens[0].kind is T.STRING and tokens[0].text == text
    assert tokens[1].kind is T.EOF
    assert compile(f"a = {quote(text)}").evaluate({"a": text}) is True
    assert compile(f"a IN ({quote(text)}, 'zz')").evaluate({"a": text}) is True


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_integer_literal_round_trip(value: int) -> None:
    node = parse(f"a = {value}")
    assert isinstance(node, Eq) and isinstance(node.right, Const)
    assert node.right.value == value
    assert node.right.jtype == (INTEGER if value < 2**31 else LONG)
    assert compile(f"a = {value}").evaluate({"a": str(value)}) is True
    assert compile(f"a = {value}L").evaluate({"a": value}) is True


@settings(deadline=None)
@given(st.integers(min_value=-(2**63) + 1, max_value=-1))
def test_negative_integer_literal_round_trip(value: int) -> None:
    node = parse(f"a = {value}")
    assert isinstance(node, Eq) and isinstance(node.right, Const)
    assert node.right.value == value
    assert compile(f"a = {value}").evaluate({"a": str(value)}) is True


@settings(deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=0.0))
def test_float_literal_round_trip(value: float) -> None:
    text = repr(value)
    if "." not in text and "e" not in text:
        text += ".0"
    node = parse(f"a = {text}")
    assert isinstance(node, Eq) and isinstance(node.right, Const)
    assert node.right.jtype == DOUBLE and node.right.value == value
    # Double.valueOf of the same text yields the same double.
    assert compile(f"a = {text}").evaluate({"a": text}) is True
    assert javatypes.java_double(text) == value


# -- generated code agrees with a direct tree walker ----------------------------


def walk(node: Node, p: Mapping[str, object]) -> object:
    """Evaluate ``node`` by RocketMQ's SQL92 rules, one node at a time."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Prop):
        return p.get(node.name)
    if isinstance(node, Neg):
        return javatypes.negate(walk(node.operand, p))
    if isinstance(node, BoolCast):
        v = walk(node.operand, p)
        return None if v is None else (v if isinstance(v, bool) else False)
    if isinstance(node, Not):
        v = walk(node.operand, p)
        return None if v is None else not v
    if isinstance(node, And):
        lv = walk(node.left, p)
        if lv is False:
            return False
        rv = walk(node.right, p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    if isinstance(node, Or):
        lv = walk(node.left, p)
        if lv is True:
            return True
        rv = walk(node.right, p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    if isinstance(node, Eq):
        return javatypes.equal(walk(node.left, p), walk(node.right, p))
    if isinstance(node, IsNull):
        return walk(node.operand, p) is None
    if isinstance(node, Cmp):
        return javatypes.ordered(node.op, walk(node.left, p), walk(node.right, p))
    if isinstance(node, In):
        v = walk(node.operand, p)
        if not isinstance(v, str):
            return None
        return (v in node.values) != node.negated
    assert isinstance(node, StrOp)
    v = walk(node.operand, p)
    if not isinstance(v, str) or not node.arg:
        return False
    hit = {"contains": node.arg in v}.get(node.method)
    if hit is None:
        hit = getattr(v, node.method)(node.arg)
    return hit != node.negated


NAMES = ["a", "b", "c"]
NUMBERS = ["0", "1", "7", "2.5", "-3", "3000000000", "0.0", "1e3"]
STRINGS = ["'x'", "'1'", "'true'", "''", "'2.5'"]
VALUES = st.sampled_from(
    ["1", "7", "2.5", "-3", "x", "true", "TRUE", "", "3000000000", "NaN", 1, 7, 2.5]
    + [True, False, 3000000000]
)

operand = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(NUMBERS),
    st.sampled_from(NAMES).map(lambda n: "-" + n),
)


@st.composite
def comparison(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.integers(0, 7))
    if kind == 0:
        op = draw(st.sampled_from([">", ">=", "<", "<="]))
        return f"{draw(operand)} {op} {draw(operand)}"
    if kind == 1:
        rhs = draw(
            st.one_of(st.sampled_from(NUMBERS + STRINGS + ["TRUE", "FALSE"]), operand)
        )
        return f"{name} {draw(st.sampled_from(['=', '<>']))} {rhs}"
    if kind == 2:
        return f"{name} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 3:
        items = ", ".join(
            draw(st.lists(st.sampled_from(STRINGS), min_size=1, max_size=3))
        )
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}IN ({items})"
    if kind == 4:
        op = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]))
        neg = draw(st.sampled_from(["", "NOT "]))
        subject = draw(st.one_of(operand, st.sampled_from(STRINGS)))
        return f"{subject} {neg}{op} {draw(st.sampled_from(STRINGS))}"
    if kind == 5:
        lo, hi = sorted(draw(st.lists(st.integers(-5, 10), min_size=2, max_size=2)))
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {lo} AND {hi}"
    if kind == 6:
        return name
    return draw(st.sampled_from(["TRUE", "FALSE", "NULL"]))


conditions = st.recursive(
    comparison(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"
        ),
        inner.map(lambda c: f"NOT ({c})"),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(conditions, st.dictionaries(st.sampled_from(NAMES), VALUES))
def test_generated_code_agrees_with_tree_walker(
    text: str, props: dict[str, object]
) -> None:
    selector = compile(text)
    try:
        expected: object = walk(selector.tree, props)
    except FilterEvaluationError:
        expected = FilterEvaluationError
    try:
        actual: object = selector.evaluate(props)
    except FilterEvaluationError:
        actual = FilterEvaluationError
    assert actual is expected or actual == expected, (text, props, selector.source)


TOKENS = [
    "a", "b", "(", ")", ",", "=", "<>", ">", ">=", "<", "<=", "+", "-", "NOT", "AND",
    "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS", "STARTSWITH",
    "ENDSWITH", "0", "5", "2147483648", "1.5", ".5", "'x'", "''", "'1'",
]  # fmt: skip


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=9),
    st.dictionaries(st.sampled_from(["a", "b"]), VALUES),
)
def test_any_token_sequence_compiles_or_fails_cleanly(
    tokens: list[str], props: dict[str, object]
) -> None:
    try:
        selector = compile(" ".join(tokens))
    except FilterSyntaxError:
        return
    try:
        result = selector.evaluate(props)
    except FilterEvaluationError:
        return
    assert result in (True, False, None)
    assert selector.text_evaluator("", props) is result
