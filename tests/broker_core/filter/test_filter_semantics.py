"""SQL92 selector evaluation: three-valued logic and RocketMQ's coercions."""

from __future__ import annotations

import itertools
import math

import pytest

from broker_core.errors import FilterEvaluationError
from broker_core.filter import compile

Value = object


def ev(expression: str, **props: Value) -> bool | None:
    return compile(expression).evaluate(props)


# Conditions that evaluate to TRUE, FALSE and NULL for properties {t, f}.
TRUTH = {True: "t = 'y'", False: "f = 'y'", None: "missing = 'y'"}
PROPS = {"t": "y", "f": "n"}
VALUES = [True, False, None]


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


@pytest.mark.parametrize(("a", "b"), list(itertools.product(VALUES, VALUES)))
def test_three_valued_and_or(a: bool | None, b: bool | None) -> None:
    assert ev(f"{TRUTH[a]} AND {TRUTH[b]}", **PROPS) is _and(a, b)
    assert ev(f"{TRUTH[a]} OR {TRUTH[b]}", **PROPS) is _or(a, b)


@pytest.mark.parametrize("a", VALUES)
def test_three_valued_not(a: bool | None) -> None:
    assert ev(f"NOT ({TRUTH[a]})", **PROPS) is (None if a is None else not a)


def test_and_skips_right_side_after_false_but_or_does_not_after_null() -> None:
    # The right side would raise (a = 'abc' cannot be an Integer).
    assert ev("f = 'y' AND a > 1", f="n", a="abc") is False
    assert ev("t = 'y' OR a > 1", t="y", a="abc") is True
    with pytest.raises(FilterEvaluationError):
        ev("missing = 'y' AND a > 1", a="abc")
    with pytest.raises(FilterEvaluationError):
        ev("missing = 'y' OR a > 1", a="abc")


def test_matches_counts_only_true_and_swallows_evaluation_errors() -> None:
    sel = compile("a > 1")
    assert sel.matches({"a": "2"}) is True
    assert sel.matches({"a": "0"}) is False
    assert sel.matches({}) is False
    assert sel.matches({"a": "abc"}) is False
    with pytest.raises(FilterEvaluationError):
        sel.evaluate({"a": "abc"})


# -- equality and nulls --------------------------------------------------------------


def test_equality_with_one_null_side_is_asymmetric_like_rocketmq() -> None:
    assert ev("a = 'x'") is None  # left null
    assert ev("'x' = a") is False  # right null
    assert ev("a = b") is True  # both null
    assert ev("a <> 'x'") is None
    assert ev("a IS NULL") is True
    assert ev("a IS NOT NULL") is False
    assert ev("a IS NULL", a="") is False


def test_bare_identifier_is_true_only_for_a_boolean_true() -> None:
    assert ev("a", a="true") is False  # broker strings are never TRUE
    assert ev("a") is None
    assert ev("a", a=True) is True
    assert ev("a", a=False) is False
    assert ev("a", a=1) is False
    assert ev("NOT a", a="true") is True


# -- string property vs literal (the broker's case) --------------------------------

COERCIONS = [
    # Integer literal: Integer.valueOf(value).
    ("a > 3", "4", True),
    ("a > 3", "+4", True),
    ("a = 3", "03", True),
    ("a = -3", "-3", True),
    ("a = 3", "\u0663", True),  # Arabic-Indic digit three: Character.digit accepts it
    ("a > 3", "2147483647", True),
    ("a < 0", "-2147483648", True),
    # Long literal: Long.valueOf(value).
    ("a < 3000000000", "2999999999", True),
    ("a = 3000000000", "3000000000", True),
    ("a > -2147483648", "-2147483648", False),
    ("a > -2147483648", "3000000000", True),  # negated Long literal parses as Long
    # Double literal: Double.valueOf(value).
    ("a > 3.0", "3.5", True),
    ("a = 3.0", "3", True),
    ("a = 3.5", " 3.5 ", True),  # Double.valueOf trims
    ("a = 3.5", "3.5f", True),
    ("a = 3.5", "3.5D", True),
    ("a = 1.0", "1e0", True),
    ("a = 3.0", "0x1.8p1", True),
    ("a > 1.0", "Infinity", True),
    ("a < 1.0", "-Infinity", True),
    ("a > 1.0", "NaN", True),  # Double.compareTo puts NaN above everything
    ("a = 0.0", "-0.0", False),  # and -0.0 below 0.0
    ("a < 0.0", "-0.0", True),
    ("a = 0.0", "0", True),
    # Boolean literal: Boolean.valueOf(value), true iff "true" ignoring case.
    ("a = TRUE", "true", True),
    ("a = TRUE", "TRUE", True),
    ("a = TRUE", "TrUe", True),
    ("a = TRUE", "1", False),
    ("a = FALSE", "0", True),
    ("a = FALSE", "yes", True),
    ("a = FALSE", "true", False),
    ("a <> TRUE", "x", True),
    # String literal: exact, case-sensitive.
    ("a = 'x'", "x", True),
    ("a = 'x'", "X", False),
    ("a <> 'x'", "y", True),
    # Both sides strings with an ordering operator: both parsed as doubles.
    ("a > b", ("2.5", "10"), False),
    ("a <= b", ("1e1", "10"), True),
    # Both sides strings with =: string equality, no parsing.
    ("a = b", ("1", "1.0"), False),
    ("a = b", ("x", "x"), True),
]


@pytest.mark.parametrize(("text", "value", "expected"), COERCIONS)
def test_string_property_coercions(text: str, value: Value, expected: bool) -> None:
    props = {"a": value[0], "b": value[1]} if isinstance(value, tuple) else {"a": value}
    assert ev(text, **props) is expected


COERCION_ERRORS = [
    ("a > 3", "3.5"),  # Integer.valueOf rejects decimals
    ("a > 3", "3000000000"),  # out of int range
    ("a > 3", "abc"),
    ("a > 3", ""),
    ("a > 3", " 3"),  # parseInt does not trim
    ("a > 3", "3_0"),  # no underscores, which Python's int() accepts
    ("a > 3", "+"),
    ("a = 3", "1.0"),
    ("a > 3000000000", "9223372036854775808"),
    ("a > 3.0", "abc"),
    ("a > 3.0", "inf"),  # Java spells it Infinity
    ("a > 3.0", "1_0.5"),
    ("a > 3.0", "\u0663.0"),  # Double.valueOf takes ASCII digits only
    ("a > 3.0", "Infinityf"),
    ("a > b", ("x", "1")),
    ("a >= b", ("1", "x")),
    ("a BETWEEN 1 AND 5", "one"),
]


@pytest.mark.parametrize(("text", "value"), COERCION_ERRORS)
def test_string_property_conversion_failures_raise(text: str, value: Value) -> None:
    props = {"a": value[0], "b": value[1]} if isinstance(value, tuple) else {"a": value}
    with pytest.raises(FilterEvaluationError):
        ev(text, **props)
    assert compile(text).matches(props) is False


def test_ordering_with_a_null_operand_is_null() -> None:
    for text in ("a > 1", "a >= 1.5", "1 < a", "a BETWEEN 1 AND 2", "a > b"):
        assert ev(text) is None, text
    assert ev("a > b", a="1") is None
    assert ev("a NOT BETWEEN 1 AND 2") is None


# -- typed values (console search over system fields) ----------------------------

TYPED = [
    ("a = 5", 5, True),
    ("a > 4.5", 5, True),
    ("a = 5.0", 5, True),
    ("a = 3000000000", 3000000000, True),
    ("a > 5", 3000000000, True),
    ("a = 5", 5.0, True),
    ("a < 2", 1.5, True),
    ("a = '5'", 5, True),  # String parsed into the value's type
    ("a = '5'", 3000000000, False),
    ("a = '3000000000'", 3000000000, True),
    ("a = '2.5'", 2.5, True),
    ("a = TRUE", True, True),
    ("a = 'TRUE'", True, True),
    ("TRUE = a", "true", True),  # RocketMQ throws ClassCastException here
    ("a = FALSE", False, True),
    ("a = 1", True, False),  # Boolean vs number: compare returns -1
    ("a < 1", True, True),
    ("a > 1", True, False),
    ("a >= 0", False, False),
    ("a IN ('5')", 5, None),  # IN needs a string value
    ("a NOT IN ('5')", 5, None),
    ("a CONTAINS '5'", 5, False),
    ("a NOT CONTAINS '5'", 5, False),
    ("-a = -5", 5, True),
    ("-a = -2.5", 2.5, True),
    ("-a < 0", -2147483648, True),  # Java int negation wraps around
]


@pytest.mark.parametrize(("text", "value", "expected"), TYPED)
def test_typed_property_values(text: str, value: Value, expected: bool | None) -> None:
    assert ev(text, a=value) is expected


def test_typed_value_conversion_failure_raises() -> None:
    with pytest.raises(FilterEvaluationError):
        ev("a = 'x'", a=5)
    with pytest.raises(FilterEvaluationError):
        ev("a = 'x'", a=5.0)
    with pytest.raises(FilterEvaluationError):
        ev("a = 1", a=[1])


def test_long_vs_double_comparison_widens_to_double() -> None:
    # Java widens the Long to a double; 2**53 + 1 becomes 2**53.
    assert ev("a = 9007199254740992.0", a=2**53 + 1) is True


def test_boolean_subexpression_compared_with_values() -> None:
    assert ev("(a > 1) = TRUE", a="2") is True
    assert ev("(a > 1) = 1", a="2") is False
    assert ev("(a > 1) = (b > 1)", a="2", b="3") is True
    assert ev("(a > 1) = 'true'", a="2") is True


# -- IN and string operators ---------------------------------------------------


def test_in_and_not_in() -> None:
    assert ev("a IN ('x', 'y')", a="y") is True
    assert ev("a IN ('x', 'y')", a="Y") is False
    assert ev("a NOT IN ('x', 'y')", a="z") is True
    assert ev("a NOT IN ('x', 'y')", a="x") is False
    assert ev("a IN ('x')") is None
    assert ev("a NOT IN ('x')") is None
    assert ev("a IN ('it''s')", a="it's") is True


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("a CONTAINS 'ell'", "hello", True),
        ("a CONTAINS 'xyz'", "hello", False),
        ("a NOT CONTAINS 'xyz'", "hello", True),
        ("a STARTSWITH 'he'", "hello", True),
        ("a STARTSWITH 'He'", "hello", False),
        ("a NOT STARTSWITH 'lo'", "hello", True),
        ("a ENDSWITH 'lo'", "hello", True),
        ("a NOT ENDSWITH 'lo'", "hello", False),
        ("a CONTAINS ''", "hello", False),  # empty search string is FALSE
        ("a NOT CONTAINS ''", "hello", False),
        ("a STARTSWITH ''", "hello", False),
        ("a CONTAINS 'x'", None, False),  # null value: FALSE for both forms
        ("a NOT CONTAINS 'x'", None, False),
        ("a NOT ENDSWITH 'x'", None, False),
    ],
)
def test_string_operators(text: str, value: str | None, expected: bool) -> None:
    props = {} if value is None else {"a": value}
    assert ev(text, **props) is expected


def test_nan_and_infinity_in_typed_doubles() -> None:
    assert ev("a > 1.0", a=math.nan) is True
    assert ev("a = a", a=math.nan) is True
    assert ev("a < 1.0", a=-math.inf) is True


@pytest.mark.parametrize(
    ("text", "a", "expected"),
    [
        ("5 CONTAINS '5'", "1", False),  # a number is not a string
        ("-5 STARTSWITH '-'", "1", False),
        ("1.5 ENDSWITH '5'", "1", False),
        ("'abc' CONTAINS 'b'", "1", True),
        ("'abc' NOT ENDSWITH 'b'", "1", True),
        ("TRUE CONTAINS 'x'", "1", False),
        ("NULL NOT CONTAINS 'x'", "1", False),
        ("(a > 1) CONTAINS 'x'", "1", False),
        ("-a STARTSWITH '1'", "1", False),
        ("-5 = -a", 5, True),
        ("2.5 > a", "1", True),
    ],
)
def test_literals_and_expressions_on_the_left(
    text: str, a: object, expected: bool
) -> None:
    assert ev(text, a=a) is expected
