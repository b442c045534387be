"""The log records of transactions: what is written, and how a record is read back.

The commit log is the only source of truth. A transaction leaves these records:

* the half: ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, transaction value NOT (so it has a
  unit in the half queue, whose queue offset is RocketMQ's ``tranStateTableOffset``),
  properties ``REAL_TOPIC``, ``REAL_QID``, ``PGROUP``, ``TRAN_MSG``, ``UNIQ_KEY``,
  ``__transactionId__``;
* on commit, the message in its real topic and queue, transaction value COMMIT,
  ``prepared_transaction_offset`` = the half's log offset;
* op records in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, body ``"<halfQueueOffset>,"``
  (RocketMQ 5.1 format), each with ``TRANS_OFFSET`` (the half's log offset, as in
  RIP-82) and ``TRAN_PREPARED_QUEUE_OFFSET``. The tag says what happened:
  ``d`` outcome (COMMIT/ROLLBACK, RocketMQ's remove tag), ``c`` one check-back
  (delivered or not: one that reached no producer does not add to the count),
  ``x`` discard after the maximum checks or the file retention, ``r`` resume;
* on discard, a copy of the half in ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.dispatch import DispatchRequest
from broker_core.message import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
    MessageExt,
    MessageInner,
    reset_transaction_value,
)
from broker_core.validation import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANS_OFFSET = "TRANS_OFFSET"
# This broker's op properties.
PROPERTY_OUTCOME = "TRAN_OUTCOME"
PROPERTY_SOURCE = "TRAN_SOURCE"
PROPERTY_OPERATOR = "TRAN_OPERATOR"
PROPERTY_CHECK_AT = "TRAN_CHECK_AT"
PROPERTY_CHECK_TRANSPORT = "TRAN_CHECK_TRANSPORT"
PROPERTY_CHECK_TARGET = "TRAN_CHECK_TARGET"
PROPERTY_CHECK_ANSWER = "TRAN_CHECK_ANSWER"
PROPERTY_CHECK_LATENCY_US = "TRAN_CHECK_LATENCY_US"
PROPERTY_DETAIL = "TRAN_DETAIL"
#: Why a check produced no answer: no_producer, timeout or error.
PROPERTY_CHECK_FAILURE = "TRAN_CHECK_FAILURE"
#: "false" on a check that reached nobody (no producer of the group online):
#: recorded, but its ``TRANSACTION_CHECK_TIMES`` is the count before it.
PROPERTY_CHECK_DELIVERED = "TRAN_CHECK_DELIVERED"

#: ``PROPERTY_CHECK_FAILURE`` of a check that reached nobody.
FAILURE_NO_PRODUCER = "no_producer"

TAG_OUTCOME = "d"
TAG_CHECK = "c"
TAG_DISCARD = "x"
TAG_RESUME = "r"
#: A checker's answer that arrived after the check was sent (gRPC producers
#: answer with EndTransaction): COMMIT, ROLLBACK or UNKNOWN, with its latency.
TAG_ANSWER = "a"

# Event kinds produced by ``classify``.
HALF, COMMIT_MSG, OUTCOME, CHECK, DISCARD, RESUME, ANSWER = (
    "HALF",
    "COMMIT_MSG",
    "OUTCOME",
    "CHECK",
    "DISCARD",
    "RESUME",
    "ANSWER",
)

#: Properties that exist only on the half and are removed from the committed message.
_HALF_ONLY = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_TRANSACTION_PREPARED)


def clean_value(value: object, limit: int = 512) -> str:
    """Return ``value`` as a property value: no separators, non-empty, bounded."""
    if (
        type(value) is str
        and 0 < len(value) <= limit
        and "\x01" not in value
        and "\x02" not in value
        and not value[0].isspace()
        and not value[-1].isspace()
    ):
        return value
    text = str(value).replace("\x01", " ").replace("\x02", " ").strip()
    return (text or "-")[:limit]


@dataclass(slots=True)
class TxEvent:
    """One transaction record as the state table and the index read it."""

    kind: str
    log_offset: int
    next_offset: int
    store_timestamp: int
    half_offset: int
    queue_offset: int
    properties: dict[str, str]
    born_timestamp: int = 0


@dataclass(slots=True)
class HalfView:
    """A half just sent by this process: the ``MessageExt`` fields an outcome needs,
    kept so that the usual send-then-commit does not read the half back."""

    topic: str
    properties: dict[str, str]
    body: bytes
    flag: int
    sysflag: int
    born_timestamp: int
    born_host: str
    reconsume_times: int
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    offset_msg_id: str


def classify(req: DispatchRequest) -> TxEvent | None:
    """Return the transaction event of a dispatched record, None for other records."""
    topic = req.topic
    props = req.properties
    if topic == TRANS_HALF_TOPIC:
        if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() != "true":
            return None
        return TxEvent(
            HALF,
            req.commit_log_offset,
            req.next_offset,
            req.store_timestamp,
            req.commit_log_offset,
            req.consume_queue_offset,
            props,
            req.born_timestamp,
        )
    if topic == TRANS_OP_HALF_TOPIC:
        tag = props.get(PROPERTY_TAGS)
        kind = {
            TAG_OUTCOME: OUTCOME,
            TAG_CHECK: CHECK,
            TAG_DISCARD: DISCARD,
            TAG_RESUME: RESUME,
            TAG_ANSWER: ANSWER,
        }.get(tag or "")
        raw = props.get(PROPERTY_TRANS_OFFSET)
        if kind is None or raw is None:
            return None  # a RocketMQ-format op without the half's log offset
        try:
            half = int(raw)
            qoff = int(props.get(PROPERTY_PREPARED_QUEUE_OFFSET, "-1"))
        except ValueError:
            return None
        return TxEvent(
            kind,
            req.commit_log_offset,
            req.next_offset,
            req.store_timestamp,
            half,
            qoff,
            props,
        )
    if req.sysflag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE:
        return TxEvent(
            COMMIT_MSG,
            req.commit_log_offset,
            req.next_offset,
            req.store_timestamp,
            req.prepared_transaction_offset,
            -1,
            props,
        )
    return None


def half_inner(
    real_topic: str,
    real_qid: int,
    body: bytes,
    properties: dict[str, str],
    producer_group: str,
    uniq_key: str,
    flag: int,
    born_timestamp: int,
) -> MessageInner:
    """Build the half of a transactional message."""
    props = {k: v for k, v in properties.items() if k != PROPERTY_DELAY}
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PROPERTY_PRODUCER_GROUP] = producer_group
    props[PROPERTY_UNIQ_KEY] = uniq_key
    props[PROPERTY_TRANSACTION_ID] = uniq_key
    props[PROPERTY_REAL_TOPIC] = real_topic
    props[PROPERTY_REAL_QID] = str(real_qid)
    return MessageInner(
        TRANS_HALF_TOPIC,
        0,
        body,
        props,
        flag=flag,
        sysflag=TRANSACTION_NOT_TYPE,
        born_timestamp=born_timestamp,
    )


def commit_inner(half: MessageExt | HalfView) -> MessageInner:
    """Build the message a commit writes to the half's real topic and queue."""
    props = half.properties
    real_topic = props[PROPERTY_REAL_TOPIC]
    real_qid = int(props.get(PROPERTY_REAL_QID, "0"))
    out = {k: v for k, v in props.items() if k not in _HALF_ONLY}
    return MessageInner(
        real_topic,
        real_qid,
        half.body,
        out,
        flag=half.flag,
        sysflag=reset_transaction_value(half.sysflag, TRANSACTION_COMMIT_TYPE),
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.commit_log_offset,
    )


def op_inner(
    tag: str,
    half_offset: int,
    queue_offset: int,
    real_topic: str,
    extra: dict[str, str | None],
) -> MessageInner:
    """Build an op record about the half at ``half_offset``."""
    props = {
        PROPERTY_TAGS: tag,
        PROPERTY_TRANS_OFFSET: str(half_offset),
        PROPERTY_PREPARED_QUEUE_OFFSET: str(queue_offset),
        PROPERTY_REAL_TOPIC: real_topic,
    }
    props.update({k: clean_value(v) for k, v in extra.items() if v is not None})
    return MessageInner(TRANS_OP_HALF_TOPIC, 0, f"{queue_offset},".encode(), props)


def discard_copy(half: MessageExt, check_times: int) -> MessageInner:
    """Build the copy of a half a discard puts in ``TRANS_CHECK_MAX_TIME_TOPIC``."""
    inner = half.to_inner()
    inner.topic = TRANS_CHECK_MAX_TIME_TOPIC
    inner.queue_id = 0
    inner.sysflag = reset_transaction_value(inner.sysflag, TRANSACTION_NOT_TYPE)
    inner.properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(check_times)
    return inner


def immunity_ms(properties: dict[str, str], timeout_ms: int) -> int:
    """Return how long after its birth a half is first checked (the check's rule).

    ``CHECK_IMMUNITY_TIME_IN_SECONDS`` in seconds when it parses and is not
    negative, else the transaction timeout.
    """
    raw = properties.get(PROPERTY_CHECK_IMMUNITY)
    if raw is None:
        return timeout_ms
    try:
        value = int(raw.strip())
    except ValueError:
        return timeout_ms
    return value * 1000 if value >= 0 else timeout_ms


def end_immunity_ms(raw: str, timeout_ms: int) -> int:
    """RocketMQ 5.1.1's end-transaction rule: ``max(seconds * 1000, timeout)``."""
    try:
        value = int(raw.strip()) * 1000
    except ValueError:
        value = 0
    return max(value, timeout_ms)
