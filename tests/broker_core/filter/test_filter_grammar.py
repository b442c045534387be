"""SQL92 selector grammar: tokens, precedence, derived forms and syntax errors."""

from __future__ import annotations

import pytest

from broker_core.errors import FilterError, FilterSyntaxError
from broker_core.filter import compile
from broker_core.filter.lexer import T, tokenize
from broker_core.filter.nodes import DOUBLE, INTEGER, LONG, Const
from broker_core.filter.parser import parse


def ev(expression: str, **props: object) -> bool | None:
    return compile(expression).evaluate(props)


# -- lexer ---------------------------------------------------------------------


def test_keywords_are_case_insensitive_and_win_over_identifiers() -> None:
    kinds = [(t.kind, t.text) for t in tokenize("a is NoT nUlL and b")][:-1]
    assert kinds == [
        (T.ID, "a"),
        (T.KEYWORD, "IS"),
        (T.KEYWORD, "NOT"),
        (T.KEYWORD, "NULL"),
        (T.KEYWORD, "AND"),
        (T.ID, "b"),
    ]
    assert ev("a is not null aNd b = 'x'", a="1", b="x") is True


def test_identifiers_allow_dollar_underscore_and_digits_and_are_case_sensitive() -> (
    None
):
    assert ev("$a_1 = 'x' AND _B2 = 'y'", **{"$a_1": "x", "_B2": "y"}) is True
    assert ev("abc = 'x'", ABC="x") is None


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("7", T.DECIMAL, "7"),
        ("7L", T.DECIMAL, "7L"),
        ("1.", T.FLOAT, "1."),
        (".5", T.FLOAT, ".5"),
        ("1.5e-3", T.FLOAT, "1.5e-3"),
        ("2E+4", T.FLOAT, "2E+4"),
        ("010.5", T.FLOAT, "010.5"),
        ("'it''s'", T.STRING, "it's"),
        ("'\\'", T.STRING, "\\"),
        ("''", T.STRING, ""),
    ],
)
def test_literal_tokens(text: str, kind: T, value: str) -> None:
    tokens = tokenize(text)
    assert [(t.kind, t.text) for t in tokens] == [(kind, value), (T.EOF, "")]


def test_leading_zero_integer_lexes_as_two_tokens_and_is_rejected() -> None:
    assert [t.text for t in tokenize("010")][:-1] == ["0", "10"]
    with pytest.raises(FilterSyntaxError) as exc:
        compile("a = 010")
    assert exc.value.position == 5


def test_comments_and_all_whitespace_kinds_are_skipped() -> None:
    text = (
        "a\t=\f'x' -- trailing comment\r\n/* block\n comment */ AND\nb = 'y' -- at end"
    )
    assert ev(text, a="x", b="y") is True


def test_integer_literal_types_follow_int_and_long_ranges() -> None:
    assert parse("a = 2147483647").right.jtype == INTEGER  # type: ignore[union-attr]
    assert parse("a = 2147483648").right.jtype == LONG  # type: ignore[union-attr]
    assert parse("a = 5L").right == Const(5, INTEGER, 4)  # type: ignore[union-attr]
    assert parse("a = 9223372036854775807").right.jtype == LONG  # type: ignore[union-attr]
    # Negation keeps the literal's type: -2147483648 is a negated Long.
    neg = parse("a = -2147483648").right  # type: ignore[union-attr]
    assert (neg.value, neg.jtype) == (-2147483648, LONG)  # type: ignore[union-attr]
    assert parse("a = 1.0").right.jtype == DOUBLE  # type: ignore[union-attr]


# -- precedence and structure ----------------------------------------------------


def test_and_binds_tighter_than_or() -> None:
    assert ev("a = '1' OR a = '2' AND b = '3'", a="1", b="x") is True
    assert ev("(a = '1' OR a = '2') AND b = '3'", a="1", b="x") is False


def test_not_binds_tighter_than_comparisons() -> None:
    # NOT a = 'x' is (NOT a) = 'x': a boolean compared with a string, never TRUE.
    assert ev("NOT a = 'x'", a="y") is False
    assert ev("NOT (a = 'x')", a="y") is True
    # (NOT a) is NULL for a missing a, so the comparison is NULL.
    assert ev("NOT a = 'x'") is None


def test_comparisons_chain_left_associatively() -> None:
    assert ev("a = 'x' = TRUE", a="x") is True
    assert ev("a = 'x' = FALSE", a="x") is False
    assert ev("a = 'x' <> FALSE", a="x") is True


def test_derived_forms_match_their_definitions() -> None:
    props = [{"a": str(v)} for v in (1, 2, 5, 9, 10)] + [{}]
    pairs = [
        ("a BETWEEN 2 AND 9", "a >= 2 AND a <= 9"),
        ("a NOT BETWEEN 2 AND 9", "a < 2 OR a > 9"),
        ("a <> 5", "NOT (a = 5)"),
        ("a IS NOT NULL", "NOT (a IS NULL)"),
    ]
    for left, right in pairs:
        for p in props:
            assert ev(left, **p) is ev(right, **p), (left, p)


def test_between_followed_by_and_continues_the_conjunction() -> None:
    assert ev("a BETWEEN 1 AND 3 AND b = 'y'", a="2", b="y") is True
    assert ev("a BETWEEN 1 AND 3 AND b = 'y'", a="2", b="n") is False


def test_unary_plus_is_identity_and_minus_negates_numbers_only() -> None:
    assert ev("a = +5", a="5") is True
    assert ev("a = - -5", a="5") is True
    assert ev("a > -3.5", a="-3") is True
    # Unary minus of a string or boolean value is NULL.
    assert ev("-a > 1", a="5") is None
    assert ev("a = -'x'", a="x") is False


def test_boolean_literals_and_null_as_conditions() -> None:
    assert ev("TRUE") is True
    assert ev("FALSE") is False
    assert ev("NULL") is None
    assert ev("NOT NULL") is None
    assert ev("true AND NOT false") is True
    assert ev("NULL IS NULL") is True
    assert ev("5 IS NULL") is False


def test_constant_comparisons() -> None:
    assert ev("1 = 1") is True
    assert ev("'a' = 'a'") is True
    assert ev("1 < 2.5") is True
    assert ev("5 = TRUE") is False


# -- syntax errors: position and expectation --------------------------------------

ERRORS = [
    # (expression, position, fragment of `expected`)
    ("", 0, "identifier"),
    ("a =", 3, "identifier"),
    ("a = 1 b", 6, "end of expression"),
    ("a = 1)", 5, "end of expression"),
    ("(a = 1", 6, "')'"),
    ("a != 1", 2, "identifier, literal"),
    ("a == 1", 3, "identifier"),
    ('a = "x"', 4, "single quotes"),
    ("a = 'x", 4, "closing quote"),
    ("a = 1 /* open", 6, "*/"),
    ("a LIKE 'x'", 2, "end of expression"),
    ("a.b = 1", 1, "identifier, literal"),
    ("a IN ()", 6, "string literal"),
    ("a IN (1, 2)", 6, "string literal"),
    ("a IN ('x' 'y')", 10, "',' or ')'"),
    ("a IN 'x'", 5, "'('"),
    ("a CONTAINS b", 11, "string literal"),
    ("a NOT STARTSWITH 5", 17, "string literal"),
    ("a NOT = 1", 6, "BETWEEN, IN"),
    ("a IS 5", 5, "NULL or NOT NULL"),
    ("a IS NOT 5", 9, "NULL"),
    ("a BETWEEN 1 OR 2", 12, "AND"),
    ("a = 1 AND", 9, "identifier"),
    ("a = 9223372036854775808", 4, "integer <= 9223372036854775807"),
    ("a = -9223372036854775808", 5, "integer <= 9223372036854775807"),
    ("a > 1e999", 4, "finite"),
]


@pytest.mark.parametrize(("text", "position", "expected"), ERRORS)
def test_syntax_errors_report_position_and_expectation(
    text: str, position: int, expected: str
) -> None:
    with pytest.raises(FilterSyntaxError) as exc:
        compile(text)
    assert exc.value.position == position
    assert expected in exc.value.expected
    assert f"position {position}" in str(exc.value)
    assert isinstance(exc.value, FilterError)


SEMANTIC_ERRORS = (
    [
        ("a", 0, "condition"),  # never: a bare identifier is a boolean cast (valid)
    ][:0]
    + [
        ("5", 0, "condition"),
        ("'x'", 0, "condition"),
        ("a = 1 AND 5", 10, "condition"),
        ("NOT 'x'", 4, "condition"),
        ("-a", 0, "condition"),
        ("a = NULL", 4, "IS NULL"),
        ("NULL <> a", 0, "IS NULL"),
        ("TRUE = 'x'", 7, "TRUE or FALSE"),
        ("FALSE = 1", 8, "TRUE or FALSE"),
        ("a > 'x'", 4, "number"),
        ("'x' < a", 0, "number"),
        ("a >= TRUE", 5, "number"),
        ("a <= NULL", 5, "number"),
        ("a > (b = 1)", 7, "number"),
        ("a > 1 > 2", 2, "number"),
        ("a BETWEEN 'x' AND 5", 10, "number"),
        ("a BETWEEN 5 AND 1", 10, "lower bound"),
        ("a BETWEEN -1 AND -5", 10, "lower bound"),
        ("5 IN ('x')", 0, "property"),
        ("(a = 1) IN ('x')", 3, "property"),
    ]
)


@pytest.mark.parametrize(("text", "position", "expected"), SEMANTIC_ERRORS)
def test_parse_time_checks_raise_syntax_errors(
    text: str, position: int, expected: str
) -> None:
    with pytest.raises(FilterSyntaxError) as exc:
        compile(text)
    assert exc.value.position == position, str(exc.value)
    assert expected in exc.value.expected


def test_valid_forms_that_rocketmq_accepts() -> None:
    for text in (
        "a",
        "(a)",
        "NOT a",
        "a AND b",
        "TRUE = a",
        "5 = TRUE",
        "a = -NULL",
        "a BETWEEN b AND c",
        "(a) IN ('x')",
        "a CONTAINS 'x' CONTAINS 'y'",
        "a > -b",
        "a BETWEEN 1 AND 1",
    ):
        compile(text)


def test_zero_float_literals_are_valid_unlike_rocketmq() -> None:
    for text in ("a = 0.0", "a = 0.", "a = .0", "a = 0E0", "a > 1e-400"):
        compile(text)
    assert ev("a = 0.0", a="0") is True
    assert ev("a > 0.0", a="-1") is False


def test_nesting_limit_is_a_syntax_error_not_a_crash() -> None:
    assert ev("(" * 60 + "a = '1'" + ")" * 60, a="1") is True
    assert ev("NOT " * 60 + "a = '1'", a="1") is True
    with pytest.raises(FilterSyntaxError) as exc:
        compile("(" * 100 + "a = 1" + ")" * 100)
    assert "nested" in str(exc.value) and exc.value.position == 64
    with pytest.raises(FilterSyntaxError):
        compile("- " * 100 + "a > 1")


def test_long_flat_chains_compile_and_huge_ones_fail_cleanly() -> None:
    assert ev(" OR ".join(f"a = {i}" for i in range(500)), a="499") is True
    with pytest.raises(FilterSyntaxError) as exc:
        compile(" OR ".join(f"a = {i}" for i in range(5000)))
    # refused by its length before it is parsed (parser.MAX_EXPRESSION_LENGTH)
    assert "characters long" in str(exc.value)
    with pytest.raises(FilterSyntaxError) as exc:
        compile("a = 1 OR " * 1500 + "a = 2")  # under the length limit
    assert "too complex" in str(exc.value)
    # Refused before compiling, at once (it took up to 0.5 s, the GIL held).
    import time

    t = time.monotonic()
    with pytest.raises(FilterSyntaxError, match="too complex"):
        compile(" AND ".join(f"b{i} = {i}" for i in range(520)))
    assert time.monotonic() - t < 0.5


def test_now_is_an_ordinary_identifier() -> None:
    assert ev("now = 'x'", now="x") is True
    assert ev("now > 5") is None
