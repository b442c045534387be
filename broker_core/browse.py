"""Messages as an operator reads them: a page of one queue from an offset or a
time, and a message as JSON (its fields, properties and a bounded body).

The console's message and topic pages (the node's ``browse_queue`` and
``get_message`` operations) read messages through here; searches by id, key
or topic go through ``broker_core.search``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import BrokerError, InvalidQueueError
from broker_core.message import MessageExt
from broker_core.store import MessageStore

#: Messages decoded at most per search call (the console's and the admin API's).
SEARCH_SCAN_BUDGET = 50_000
#: Messages at most on one page of a queue.
BROWSE_MAX = 200
#: Body bytes a preview shows by default.
PREVIEW_BYTES = 1024


def summary(m: MessageExt) -> dict[str, Any]:
    """Return the fields every role may see (no body)."""
    return {
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "tags": m.tags,
        "keys": m.keys,
        "body_size": len(m.body),
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "born_host": m.born_host,
        "store_host": m.store_host,
        "reconsume_times": m.reconsume_times,
    }


def user_properties(m: MessageExt) -> dict[str, str]:
    """Return the message's properties, sorted by name."""
    return dict(sorted(m.properties.items()))


def message_json(
    m: MessageExt, preview_bytes: int = PREVIEW_BYTES, with_base64: bool = False
) -> dict[str, Any]:
    """Return ``summary`` and the properties of ``m`` with a body preview.

    ``preview_bytes`` (0: none) of the body are given as UTF-8 text
    (``body_preview``, undecodable bytes replaced; ``body_truncated`` when
    the body is longer); ``with_base64`` adds the whole body as
    ``body_base64``.
    """
    out = summary(m) | {"properties": user_properties(m)}
    if preview_bytes > 0:
        shown = m.body[:preview_bytes]
        out["body_preview"] = shown.decode("utf-8", errors="replace")
        out["body_truncated"] = len(m.body) > preview_bytes
    if with_base64:
        out["body_base64"] = base64.b64encode(m.body).decode()
    return out


def queue_bounds(store: MessageStore, topic: str, queue_id: int) -> tuple[int, int]:
    """Return (min offset, max offset) of a queue.

    Raises ``TopicNotFoundError`` and ``InvalidQueueError`` (no such queue).
    """
    cfg = store.get_topic(topic)
    if not 0 <= queue_id < cfg.queue_nums:
        raise InvalidQueueError(f"queue id {queue_id} is out of range for {topic!r}")
    return store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)


def read_queue(
    store: MessageStore, topic: str, queue_id: int, start: int, count: int
) -> list[MessageExt]:
    """Return up to ``count`` messages of a queue from offset ``start``."""
    return [
        store.read_message(phys)
        for phys, _size, _code in store.get_queue_units(topic, queue_id, start, count)
    ]


def offset_for_time(store: MessageStore, topic: str, queue_id: int, at_ms: int) -> int:
    """Return the first queue offset stored at or after ``at_ms`` (binary
    search; the queue's end if none). Raises as ``queue_bounds``."""
    lo, hi = queue_bounds(store, topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        msgs = read_queue(store, topic, queue_id, mid, 1)
        if not msgs or msgs[0].store_timestamp >= at_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def stored_per_second(store: MessageStore, window_ms: int, now_ms: int) -> float:
    """Messages stored per second over the ``window_ms`` before ``now_ms``, in
    every queue of every topic (system topics included), counted from the
    queues: each busy queue's units since then (a binary search by store
    time); a queue whose last message is older is read once."""
    since = now_ms - window_ms
    count = 0
    for cfg in store.list_topics():
        for qid in range(cfg.queue_nums):
            try:
                lo, hi = queue_bounds(store, cfg.topic_name, qid)
                if hi <= lo:
                    continue
                last = read_queue(store, cfg.topic_name, qid, hi - 1, 1)
                if not last or last[0].store_timestamp < since:
                    continue
                count += hi - offset_for_time(store, cfg.topic_name, qid, since)
            except BrokerError:
                continue  # a queue gone or damaged under the count
    return count * 1000 / window_ms


@dataclass(slots=True)
class QueuePage:
    """Messages of one queue from ``start``, in queue order."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    start: int
    messages: list[MessageExt] = field(default_factory=list)

    @property
    def next_start(self) -> int | None:
        """The offset after this page, None at the queue's end."""
        nxt = self.start + len(self.messages)
        return nxt if nxt < self.max_offset else None


def browse_queue(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int | None = None,
    at_ms: int | None = None,
    count: int = 50,
) -> QueuePage:
    """Return ``count`` (at most ``BROWSE_MAX``) messages of one queue from
    ``offset`` or from time ``at_ms``; neither given: the newest ``count``.

    An offset outside the queue is moved to its nearest end. Raises as
    ``queue_bounds``.
    """
    lo, hi = queue_bounds(store, topic, queue_id)
    count = max(1, min(count, BROWSE_MAX))
    if at_ms is not None:
        start = offset_for_time(store, topic, queue_id, at_ms)
    elif offset is not None:
        start = offset
    else:
        start = max(lo, hi - count)
    start = max(lo, min(start, hi))
    page = read_queue(store, topic, queue_id, start, count)
    return QueuePage(topic, queue_id, lo, hi, start, page)
