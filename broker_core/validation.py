"""Input validation: topic and group names and message limits."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from broker_core.errors import (
    EmptyBodyError,
    IllegalKeyError,
    IllegalMessageGroupError,
    IllegalMessageIdError,
    IllegalPropertyError,
    IllegalTagError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    ReservedPropertyError,
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
    if not _NAME.fullmatch(topic):
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


def validate_read_topic(topic: str) -> None:
    """Validate a topic a client routes to or receives from: legal, and not
    one of the broker's own (uncommitted halves, delayed messages before
    their time, transaction op records, a group's retry topic); a group's
    dead-letter topic may be read, as Apache RocketMQ allows."""
    validate_topic(topic)
    if is_system_topic(topic) or topic.startswith(("RMQ_SYS_", "%RETRY%")):
        raise TopicNotAllowedError(
            f"the topic {topic[:200]!r} is the broker's own: clients may not read it"
        )


def validate_group(group: str) -> None:
    """Raise ``InvalidGroupError`` unless ``group`` is a legal consumer group name."""
    if not isinstance(group, str) or not group.strip():
        raise InvalidGroupError("The specified group is blank.")
    if not _NAME.fullmatch(group):
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
        raise EmptyBodyError("the message body is empty")
    if n > max_size:
        raise MessageTooLargeError(
            f"the message body size {n} exceeds the maximum {max_size}"
        )


def validate_properties_size(encoded: bytes, max_size: int) -> None:
    """Raise ``PropertiesTooLargeError`` for encoded properties over the limit."""
    if len(encoded) > max_size or len(encoded) > 0xFFFF:
        raise PropertiesTooLargeError(
            f"the properties size {len(encoded)} exceeds the maximum {max_size}"
        )


#: RocketMQ's system property names (``MessageConst.STRING_HASH_SET``), plus the
#: ones it sets outside that set and this broker's own: no user property may
#: use them, as the Apache proxy answers ``ILLEGAL_MESSAGE_PROPERTY_KEY``.
RESERVED_PROPERTIES = frozenset(
    {
        # MessageConst.STRING_HASH_SET
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC",
        "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
        "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
        "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO",
        "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT",
        "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DEL_MS",
        "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
        # set by RocketMQ outside that set
        "__SHARDINGKEY", "__transactionId__", "TRANSACTION_CHECK_TIMES",
        "INNER_MULTI_DISPATCH", "INNER_NUM", "INNER_BASE", "TRACE_CONTEXT",
        "PROPERTY_FORWARD_QUEUE_ID", "REDIRECT", "__STARTDELIVERTIME",
        "CHECK_IMMUNITY_TIME_IN_SECONDS", "SHARDING_KEY", "PRIORITY",
        "LITE_TOPIC", "MSG_REGION_ID",
        # this broker's own
        "DELAY_SRC", "TRANS_OFFSET", "TRAN_CHECK_ANSWER", "TRAN_CHECK_AT",
        "TRAN_CHECK_LATENCY_US", "TRAN_CHECK_TARGET", "TRAN_CHECK_TRANSPORT",
        "TRAN_DETAIL", "TRAN_OPERATOR", "TRAN_OUTCOME", "TRAN_SOURCE",
        "DLQ_ORIGIN_QUEUE", "DLQ_ORIGIN_OFFSET",
    }
)  # fmt: skip
#: Names RocketMQ reserves for the client's own use, never stored.
RESERVED_PREFIX = "__RMQ.TRANSIENT."
#: System properties the ``Broker`` facade takes from its caller, the way the
#: Java client's ``setDelayTimeLevel``/``setDeliverTimeMs``/message groups set
#: them: the facade is the application's own API; network and console entries
#: accept none of them as user properties.
FACADE_PROPERTIES = frozenset(
    {"DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "__SHARDINGKEY"}
)


def _has_separator(text: str) -> bool:
    return "\x00" in text or "\x01" in text or "\x02" in text


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control(text: str) -> bool:
    """An ISO control character (U+0000-U+001F, U+007F-U+009F), as Apache
    RocketMQ's proxy refuses in tags and keys (``containControlCharacter``)."""
    return _CONTROL.search(text) is not None


def validate_properties(
    props: Mapping[str, object] | None, allowed: frozenset[str] = frozenset()
) -> None:
    """Refuse properties that could change what the broker decides.

    A name or value holding ``\\x00``, ``\\x01`` or ``\\x02`` (the codec's
    separators: they would inject other properties), an empty name or value, a
    value that is not a string, and a reserved system name not in ``allowed``.
    Raises ``IllegalPropertyError`` or ``ReservedPropertyError``.
    """
    if not props:
        return
    for name, value in props.items():
        if value is None:
            continue  # not stored: the facade skips a None value
        if not isinstance(name, str) or not name:
            raise IllegalPropertyError("a property name is empty or not text")
        if not isinstance(value, str):
            raise IllegalPropertyError(f"the value of property {name!r} is not text")
        if _has_separator(name) or _has_separator(value):
            raise IllegalPropertyError(
                f"property {name!r} contains a control character (\\x00, \\x01 "
                "or \\x02) the property codec uses as a separator"
            )
        if not value:
            raise IllegalPropertyError(f"property {name!r} has an empty value")
        if (name in RESERVED_PROPERTIES and name not in allowed) or name.startswith(
            RESERVED_PREFIX
        ):
            raise ReservedPropertyError(
                f"the property name {name!r} is reserved for the system "
                "(RocketMQ MessageConst); choose another name"
            )


def validate_tag(tag: str | None) -> None:
    """Refuse a tag with a separator byte, a ``|`` (no tag filter could ever
    match it) or only whitespace, as Apache RocketMQ's proxy does
    (``IllegalTagError``)."""
    if tag is None or tag == "":
        return
    if not isinstance(tag, str) or _has_control(tag) or "|" in tag:
        raise IllegalTagError(
            f"the tag {tag[:200]!r} contains a control character or '|'"
        )
    if not tag.strip():
        raise IllegalTagError("the tag is only whitespace")


_MESSAGE_ID = re.compile(r"^[0-9A-Za-z_.:-]{1,128}$")


def validate_message_id(msg_id: str) -> None:
    """Refuse a client message id that is not 1-128 id characters."""
    if not isinstance(msg_id, str) or not _MESSAGE_ID.fullmatch(msg_id):
        raise IllegalMessageIdError(
            f"the message id {msg_id!r} is not 1-128 characters of [0-9A-Za-z_.:-]"
        )


def validate_message_group(group: str) -> None:
    """Refuse a message group with a separator byte (``IllegalMessageGroupError``):
    it is stored as the ``__SHARDINGKEY`` property."""
    if _has_separator(group):
        raise IllegalMessageGroupError("the message group contains a control character")


def validate_keys(keys: str | Sequence[str] | None) -> None:
    """Refuse a key with a control character, or of whitespace only
    (``IllegalKeyError``), as Apache RocketMQ's proxy does; an empty key is
    none. A space inside a key separates two keys (``KEYS`` is a
    space-separated list, as in RocketMQ)."""
    if not keys:
        return
    for key in [keys] if isinstance(keys, str) else keys:
        if not isinstance(key, str) or _has_control(key):
            raise IllegalKeyError(
                f"the key {str(key)[:200]!r} contains a control character"
            )
        if key and not key.strip():
            raise IllegalKeyError("a key is only whitespace")
