"""Compiled selectors: caching, generated code safety and the pull matcher."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterError, FilterEvaluationError, FilterSyntaxError
from broker_core.filter import build_matcher, cache_info, clear_cache, compile
from broker_core.filter.props import find_property
from broker_core.message import decode_properties, encode_properties


def test_compiled_selectors_are_cached_by_text() -> None:
    clear_cache()
    first = compile("a > 1 AND b = 'x'")
    assert compile("a > 1 AND b = 'x'") is first
    assert compile("a > 1  AND b = 'x'") is not first
    assert cache_info()["size"] == 2
    clear_cache()
    assert compile("a > 1 AND b = 'x'") is not first


def test_syntax_errors_are_cached_and_raised_each_time() -> None:
    clear_cache()
    for _ in range(2):
        with pytest.raises(FilterSyntaxError) as exc:
            compile("a = ")
        assert exc.value.position == 4
    assert cache_info()["size"] == 1


def test_cache_is_bounded() -> None:
    clear_cache()
    capacity = cache_info()["capacity"]
    for i in range(capacity + 10):
        compile(f"a = {i}")
    assert cache_info()["size"] == capacity


def test_selector_reports_properties_and_canonical_text() -> None:
    sel = compile("a > 5 and (b in ('x') or not c)")
    assert sel.properties == {"a", "b", "c"}
    assert str(sel) == "((a > 5) AND ((b IN ('x')) OR NOT (c)))"


def test_hostile_literals_are_embedded_as_data() -> None:
    text = "a = 'x'' ); import os; os._exit(1); (''' OR b = '\\n\\'"
    sel = compile(text)
    assert sel.evaluate({"a": "x' ); import os; os._exit(1); ('"}) is True
    assert sel.evaluate({"b": "\\n\\"}) is True
    assert sel.evaluate({"a": "y", "b": "z"}) is False


def test_non_string_expression_is_rejected() -> None:
    with pytest.raises(FilterError):
        compile(5)  # type: ignore[arg-type]


def test_build_matcher_for_tags() -> None:
    assert build_matcher("TAG", "*")({}) is True
    assert build_matcher(None, None)({"TAGS": "x"}) is True
    m = build_matcher("tag", "TagA || TagB")
    assert m({"TAGS": "TagA"}) and m({"TAGS": "TagB"})
    assert not m({"TAGS": "tagA"}) and not m({})


def test_build_matcher_for_sql92() -> None:
    m = build_matcher("SQL92", "a > 5 AND TAGS = 'x'")
    assert m({"a": "6", "TAGS": "x"})
    assert not m({"a": "5", "TAGS": "x"})
    assert not m({"a": "oops", "TAGS": "x"})  # evaluation error: no match
    assert not m({"TAGS": "x"})  # NULL: no match


@pytest.mark.parametrize(
    ("kind", "expression", "error"),
    [
        ("SQL92", None, FilterError),
        ("SQL92", "  ", FilterError),
        ("SQL92", "a >", FilterSyntaxError),
        ("XPATH", "a", FilterError),
    ],
)
def test_build_matcher_errors(kind: str, expression: str | None, error: type) -> None:
    with pytest.raises(error):
        build_matcher(kind, expression)


_segments = st.lists(st.text(alphabet="ab\x01x", max_size=6), max_size=8)
_names = st.sampled_from(["a", "b", "ab", "x", "a\x01", "", "__CRC32#"])


@settings(max_examples=300, deadline=None)
@given(_segments, _names)
def test_find_property_agrees_with_decode_properties(
    segments: list[str], name: str
) -> None:
    text = "\x02".join(segments)
    assert find_property(text, name) == decode_properties(text).get(name)


@settings(max_examples=300, deadline=None)
@given(_segments, st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers()))
def test_text_evaluator_agrees_with_evaluate(
    segments: list[str], typed: dict[str, int]
) -> None:
    text = "\x02".join(segments)
    sel = compile("a = 'x' OR b IS NULL OR (c > 1 AND NOT a CONTAINS 'b')")
    try:
        expected: object = sel.evaluate({**decode_properties(text), **typed})
    except FilterEvaluationError:
        expected = FilterEvaluationError
    try:
        actual: object = sel.text_evaluator(text, typed)
    except FilterEvaluationError:
        actual = FilterEvaluationError
    assert actual is expected


def test_text_evaluator_on_a_stored_properties_string() -> None:
    text = encode_properties({"a": "7", "TAGS": "t", "b": "x"})
    sel = compile("a > 5 AND b IN ('x','y') AND c IS NULL AND TAGS = 't'")
    assert sel.text_evaluator(text, {}) is True
    assert sel.text_evaluator(text, {"a": 3}) is False
