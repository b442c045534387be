"""A consumer group's retry topic, read by the group's pop consumers.

``%RETRY%<group>`` holds what is sent again to one group (the console's
"resend to a consumer group", ``NodeOps.resend``), each message with
``RETRY_TOPIC`` naming its original topic. As in Apache RocketMQ 5's pop
consumption (``PopMessageProcessor``: the retry topic is popped beside the
topic, first in ``popFromRetryProbability`` = 20 % of the pops, else when the
topic leaves room in the batch), a consumer of group G on topic T also
receives the messages of ``%RETRY%G`` whose ``RETRY_TOPIC`` is T and that T's
filter expression matches, delivered with topic T.

The pop state keeps them apart per original topic: the consumers of G on T
read ``%RETRY%G`` with their own cursor and pending entries, under the key
``%RETRY%G>T`` (``>`` is in no topic name), so a message for another topic
of the group never waits in T's entries. A receipt handle of such an entry
carries ``RETRY_NONCE`` in its nonce: an ack (whose topic is T) finds the
entry again from the handle alone.
"""

from __future__ import annotations

from typing import Any

from broker_core.filter import build_matcher
from broker_core.message import MessageExt

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: Separates the retry topic from the original topic in a pop-state key.
_SEP = ">"
#: Set in the nonce of an entry of the group's retry topic (above the 48
#: random bits): the receipt handle names the retry topic without a new format.
RETRY_NONCE = 1 << 48
#: Percent of pops that look at the retry topic before the topic (Apache's
#: ``popFromRetryProbability``); the others look when the topic leaves room.
POP_FROM_RETRY_PERCENT = 20
#: Properties of a retry-topic record that are bookkeeping, not the message's.
_BOOKKEEPING = frozenset(
    {
        "RETRY_TOPIC",
        "ORIGIN_MESSAGE_ID",
        "DLQ_ORIGIN_QUEUE",
        "DLQ_ORIGIN_OFFSET",
        "DLQ_REASON",
    }
)


def retry_topic(group: str) -> str:
    """The retry topic of ``group``: ``%RETRY%<group>``."""
    return RETRY_PREFIX + group


def reads_retry(topic: str) -> bool:
    """Whether the consumers of ``topic`` also read their group's retry topic
    (not when they read a retry or dead-letter topic itself)."""
    return not topic.startswith((RETRY_PREFIX, DLQ_PREFIX))


def retry_key(group: str, topic: str) -> str:
    """The pop-state key of ``group``'s retry topic read for ``topic``."""
    return retry_topic(group) + _SEP + topic


def key_for(group: str, topic: str, nonce: int) -> str:
    """The pop-state key of an entry named by a receipt handle given with
    ``topic``: the retry key when the nonce says so, else ``topic``."""
    return retry_key(group, topic) if nonce & RETRY_NONCE else topic


def source(key: str) -> str:
    """The topic a pop-state key reads from (the retry topic for a retry key)."""
    if key.startswith(RETRY_PREFIX):
        return key.partition(_SEP)[0]
    return key


def origin(key: str) -> str | None:
    """The original topic of a retry key; None for a plain topic."""
    if key.startswith(RETRY_PREFIX) and _SEP in key:
        return key.partition(_SEP)[2]
    return None


def is_retry_key(key: str) -> bool:
    return origin(key) is not None


def keeps(
    messages: list[MessageExt], topic: str, expression: str, expression_type: str
) -> list[MessageExt]:
    """The retry-topic messages for the consumers of ``topic`` with this
    filter: ``RETRY_TOPIC`` is ``topic`` and the expression matches."""
    match = build_matcher(expression_type, expression)
    return [
        m
        for m in messages
        if m.properties.get("RETRY_TOPIC") == topic and match(m.properties)
    ]


class RetriedMessage:
    """A retry-topic message as its group's consumers see it: the original
    topic, without the retry bookkeeping properties; everything else is the
    stored message's (id, body, timestamps, hosts)."""

    __slots__ = ("_m", "topic", "properties")

    def __init__(self, message: MessageExt, topic: str) -> None:
        self._m = message
        self.topic = topic
        self.properties = {
            k: v for k, v in message.properties.items() if k not in _BOOKKEEPING
        }

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)
