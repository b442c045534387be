"""Java String.hashCode and tag subscriptions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.index import KeyHasher, key_hash
from broker_core.tags import java_string_hash, parse_subscription


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", 0),
        ("*", 42),
        ("a", 97),
        ("d", 100),
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("TAG1", 2567159),
        ("Tag2", 2598904),
        ("tag3", 3552217),
        ("hello world", 1794106052),
        ("TopicTest#UNIQKEY", -190702372),
        ("中文", 646394),
        ("😀", 1772899),
        ("polygenelubricants", -2147483648),
    ],
)
def test_java_string_hash(text: str, code: int) -> None:
    assert java_string_hash(text) == code


def test_subscription_parsing() -> None:
    assert parse_subscription("*").match_all
    assert parse_subscription(None).match_all
    assert parse_subscription("").match_all
    f = parse_subscription("TAG1 || Tag2 || tag3")
    assert f.tags == {"TAG1", "Tag2", "tag3"}
    assert f.codes == {2567159, 2598904, 3552217}
    spaced = parse_subscription(" * ")
    assert not spaced.match_all and spaced.tags == {"*"}
    assert parse_subscription("A ||  || B").tags == {"A", "B"}


@settings(max_examples=300)
@given(st.text(max_size=40), st.text(max_size=60), st.text(max_size=60))
def test_index_key_hasher_equals_hash_of_whole_key(
    topic: str, key: str, other: str
) -> None:
    hasher = KeyHasher()
    # Twice each, so that the cached prefix and key hashes are used too.
    for k in (key, other, key, other):
        assert hasher(topic, k) == key_hash(f"{topic}#{k}")
