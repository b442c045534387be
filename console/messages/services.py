"""Message operations: browse a queue, look a message up, search, send a test
message and resend one to a consumer group. Messages are read from the store
on demand, never copied into the database."""

from __future__ import annotations

from typing import Any

from broker_core import Message, MessageExt
from broker_core.browse import SEARCH_SCAN_BUDGET, QueuePage
from broker_core.search import MessageQuery, SearchPage
from broker_core.validation import validate_group
from console.audit.services import audited
from console.brokerlink import node_ops


def offset_for_time(topic: str, queue_id: int, at_ms: int) -> int:
    """Return the first queue offset stored at or after ``at_ms``."""
    return node_ops().offset_for_time(topic, queue_id, at_ms)


def browse_queue(
    topic: str,
    queue_id: int,
    offset: int | None = None,
    at_ms: int | None = None,
    count: int = 50,
) -> QueuePage:
    """Return ``count`` messages of one queue from ``offset`` or from time ``at_ms``.

    Neither given: the newest ``count`` messages (``broker_core.browse``).
    """
    return node_ops().browse_queue(topic, queue_id, offset, at_ms, count)


def find_message(msg_id: str, topic: str | None = None) -> MessageExt:
    """Return a message by UNIQ_KEY or offset id; ``MessageNotFoundError`` if none."""
    return node_ops().get_message(msg_id.strip(), topic or None)


#: How each state of ``message_consumers`` reads on the message page.
CONSUME_STATES = {
    "consumed": "past it (acknowledged, or skipped by the group's filter)",
    "pending": "not acknowledged yet (waiting, or delivered and in flight)",
    "dead_lettered": "dead-lettered",
    "resent": "resent from the dead-letter queue, not acknowledged yet",
}


def message_consumers(msg: MessageExt) -> list[dict]:
    """Where ``msg`` stands for each group consuming its queue (the node's
    ``message_consumers``); system topics' copies have none."""
    rows = node_ops().message_consumers(
        msg.topic, msg.queue_id, msg.queue_offset, msg.msg_id
    )
    for row in rows:
        row["label"] = CONSUME_STATES.get(row["state"], row["state"])
    return rows


def search_messages(
    *,
    topic: str = "",
    msg_id: str = "",
    key: str = "",
    tag: str = "",
    sql: str = "",
    queue_id: int | None = None,
    begin_ms: int | None = None,
    end_ms: int | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> SearchPage:
    """Find messages by id, key, or topic and time, filtered by tag and SQL92.

    Delegates to ``broker_core.search``: newest first, at most
    ``SEARCH_SCAN_BUDGET`` candidates a call; ``page.cursor`` continues.
    Raises ``ValidationError`` (nothing to search by, bad cursor),
    ``TopicNotFoundError`` and ``FilterSyntaxError``.
    """
    query = MessageQuery(
        topic=topic.strip() or None,
        msg_id=msg_id.strip() or None,
        key=key.strip() or None,
        queue_id=queue_id,
        begin_ms=begin_ms or None,
        end_ms=end_ms,
        tag=tag.strip() or None,
        sql=sql.strip() or None,
    )
    return node_ops().search_messages(query, limit, cursor or None, SEARCH_SCAN_BUDGET)


def send_test_message(
    *,
    actor: Any,
    topic: str,
    body: bytes,
    tags: str = "",
    keys: str = "",
    properties: dict[str, str] | None = None,
    request: Any = None,
) -> Any:
    """Send one message as a client would (operator), audited. The topic is
    looked up on the node within the action: one it does not have is the
    send's failure (``TopicNotFoundError``), audited, as is a node away."""
    msg = Message(
        topic, body, tags=tags or None, keys=keys or None, properties=properties or None
    )

    def send() -> Any:
        ops = node_ops()
        ops.get_topic(topic)  # TopicNotFoundError: no such topic on the node
        return ops.send(msg)  # sent with DELAY: scheduled

    return audited(
        send,
        actor=actor,
        request=request,
        action="message.send_test",
        object_type="topic",
        object_id=topic,
        after=lambda r: {
            "msg_id": r.msg_id,
            "queue_id": r.queue_id,
            "queue_offset": r.queue_offset,
            "body_size": len(body),
            "tags": tags,
            "keys": keys,
        },
    )


def resend_message(
    *,
    actor: Any,
    msg_id: str,
    group: str,
    reason: str = "",
    request: Any = None,
) -> Any:
    """Redeliver a message to one consumer group through its retry topic.

    As RocketMQ's retry, the copy goes to ``%RETRY%<group>`` with
    ``RETRY_TOPIC`` naming the original topic; the group's consumers of that
    topic (and no other group) receive it there, with the original topic.
    """
    validate_group(group)
    found: list[Any] = []

    def before() -> dict[str, Any]:
        # Inside the audited action: a message the node cannot find, or a
        # node that does not answer, is recorded as this action's failure.
        found.append(find_message(msg_id))
        m = found[0]
        return {
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
        }

    return audited(
        lambda: node_ops().resend(found[0].msg_id, group),
        actor=actor,
        request=request,
        action="message.resend",
        object_type="message",
        # the message's own id (a dead letter is picked by its offset id)
        object_id=lambda: found[0].msg_id if found else msg_id,
        reason=reason,
        before=before,
        after=lambda r: {
            "group": group,
            "retry_topic": f"%RETRY%{group}",
            "queue_offset": r.queue_offset,
        },
    )
