"""Message operations: browse a queue, look a message up, search, send a test
message and resend one to a consumer group. Messages are read from the store
on demand, never copied into the database."""

from __future__ import annotations

from typing import Any

from broker_core import Message, MessageExt, MessageInner, browse
from broker_core.browse import SEARCH_SCAN_BUDGET, QueuePage
from broker_core.search import MessageQuery, SearchPage
from broker_core.search import search_messages as core_search
from broker_core.validation import validate_group
from console.audit.services import audited
from console.brokerlink import get_broker, get_delay_service


def offset_for_time(topic: str, queue_id: int, at_ms: int) -> int:
    """Return the first queue offset stored at or after ``at_ms``."""
    return browse.offset_for_time(get_broker().store, topic, queue_id, at_ms)


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
    return browse.browse_queue(
        get_broker().store, topic, queue_id, offset, at_ms, count
    )


def find_message(msg_id: str, topic: str | None = None) -> MessageExt:
    """Return a message by UNIQ_KEY or offset id; ``MessageNotFoundError`` if none."""
    return get_broker().get_message(msg_id.strip(), topic or None)


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
    return core_search(get_broker(), query, limit, cursor or None, SEARCH_SCAN_BUDGET)


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
    """Send one message as a client would (operator), audited."""
    broker = get_broker()
    get_delay_service()  # its send hook parks a test message sent with DELAY
    msg = Message(
        topic, body, tags=tags or None, keys=keys or None, properties=properties or None
    )
    return audited(
        lambda: broker.send(msg),
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

    As RocketMQ's retry, the copy goes to ``%RETRY%<group>``, which only that
    group subscribes to, with ``RETRY_TOPIC`` naming the original topic.
    """
    validate_group(group)
    broker = get_broker()
    original = find_message(msg_id)
    props = dict(original.properties)
    props.setdefault("RETRY_TOPIC", original.topic)
    props["ORIGIN_MESSAGE_ID"] = original.msg_id
    inner = MessageInner(
        topic=f"%RETRY%{group}",
        queue_id=0,
        body=original.body,
        properties=props,
        flag=original.flag,
        reconsume_times=original.reconsume_times + 1,
    )
    return audited(
        lambda: broker.store.put_inner(inner),
        actor=actor,
        request=request,
        action="message.resend",
        object_type="message",
        object_id=original.msg_id,
        reason=reason,
        before={
            "topic": original.topic,
            "queue_id": original.queue_id,
            "queue_offset": original.queue_offset,
        },
        after=lambda r: {
            "group": group,
            "retry_topic": inner.topic,
            "queue_offset": r.queue_offset,
        },
    )
