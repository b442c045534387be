"""Tag hash codes and the tag subscription filter (as in RocketMQ).

The consume queue stores ``TAGS.hashCode()`` (Java ``String.hashCode``); a pull
matches the hash first, then the exact tag, as RocketMQ's broker and client do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache

SUB_ALL = "*"


def java_string_hash(text: str) -> int:
    """Return Java's ``String.hashCode()`` of ``text`` (UTF-16 code units, int32)."""
    if text.isascii():
        units: tuple[int, ...] | bytes = text.encode("ascii")
    else:
        raw = text.encode("utf-16-be")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    h = 0
    for u in units:
        h = (31 * h + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """Return the consume-queue tag field for a ``TAGS`` value (0 when absent)."""
    if not tags:
        return 0
    return java_string_hash(tags)


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag subscription: ``*`` or ``a || b || c``."""

    expression: str
    tags: frozenset[str] = field(default_factory=frozenset)
    codes: frozenset[int] = field(default_factory=frozenset)

    @property
    def match_all(self) -> bool:
        return not self.tags

    def matches_code(self, code: int) -> bool:
        """Return whether a consume-queue tag field passes the hash test."""
        return not self.tags or code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        """Return whether a message's exact ``TAGS`` passes (the client re-filter)."""
        return not self.tags or (tag is not None and tag in self.tags)


@lru_cache(maxsize=1024)
def parse_subscription(expression: str | None) -> TagFilter:
    """Parse a tag subscription the way ``FilterAPI.buildSubscriptionData`` does.

    ``None``, empty or exactly ``*`` subscribes to everything; otherwise the
    expression is split on ``||``, parts trimmed, empty parts dropped.
    """
    if not expression or expression == SUB_ALL:
        return TagFilter(SUB_ALL)
    parts = [p.strip() for p in expression.split("||")]
    tags = frozenset(p for p in parts if p)
    if not tags:
        return TagFilter(SUB_ALL)
    return TagFilter(expression, tags, frozenset(java_string_hash(t) for t in tags))
