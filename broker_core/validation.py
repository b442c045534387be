"""Input validation: topic and group names (§3.7) and message limits."""

from __future__ import annotations

import re

from broker_core.errors import (
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    TopicNotAllowedError,
)

TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
CID_SYS_TRANS = "CID_RMQ_SYS_TRANS"

SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        TRANS_HALF_TOPIC,
        "RMQ_SYS_TRACE_TOPIC",
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
RETRY_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def validate_topic(topic: str) -> None:
    """Raise ``InvalidTopicError`` unless ``topic`` is a legal topic name."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidTopicError("The specified topic is blank.")
    if not _NAME.match(topic):
        raise InvalidTopicError(
            f"The specified topic[{topic}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    limit = (
        RETRY_DLQ_TOPIC_MAX_LENGTH
        if topic.startswith(("%RETRY%", "%DLQ%"))
        else TOPIC_MAX_LENGTH
    )
    if len(topic) > limit:
        raise InvalidTopicError(
            f"The specified topic is longer than topic max length {limit}."
        )


def validate_send_topic(topic: str) -> None:
    """Validate a client send's topic: legal and not a forbidden system topic."""
    validate_topic(topic)
    if is_not_allowed_send_topic(topic):
        raise TopicNotAllowedError(f"Sending message to topic[{topic}] is forbidden.")


def validate_group(group: str) -> None:
    """Raise ``InvalidGroupError`` unless ``group`` is a legal consumer group name."""
    if not isinstance(group, str) or not group.strip():
        raise InvalidGroupError("The specified group is blank.")
    if not _NAME.match(group):
        raise InvalidGroupError(
            f"The specified group[{group}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroupError(
            f"The specified group is longer than group max length {GROUP_MAX_LENGTH}."
        )


def validate_body(body: object, max_size: int) -> None:
    """Raise unless ``body`` is bytes of 1 to ``max_size`` bytes."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidMessageError("the message body must be bytes")
    n = len(body)
    if n == 0:
        raise InvalidMessageError("the message body is empty")
    if n > max_size:
        raise MessageTooLargeError(
            f"the message body size {n} exceeds the maximum {max_size}"
        )


def validate_properties_size(encoded: bytes, max_size: int) -> None:
    """Raise ``MessageTooLargeError`` for encoded properties over the limit."""
    if len(encoded) > max_size or len(encoded) > 0xFFFF:
        raise MessageTooLargeError(
            f"the properties size {len(encoded)} exceeds the maximum {max_size}"
        )
