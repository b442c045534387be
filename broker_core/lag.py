"""Consumer lag over a store: which queues each group consumes, and how far
behind each queue's end its committed offset is (RocketMQ's
``ConsumerProgress``: broker offset, consumer offset, diff).

The console's consumer pages and the Cluster page (the node's
``consumer_lag`` operation) both read it from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Client types that consume (the endpoint's ``ClientInfo.client_type``).
CONSUMER_TYPES = frozenset({"SIMPLE_CONSUMER", "PUSH_CONSUMER"})


@dataclass(slots=True)
class QueueLag:
    """One queue of a group: its committed offset (-1: never committed), the
    queue's end and the messages between them."""

    group: str
    topic: str
    queue_id: int
    committed_offset: int
    max_offset: int
    lag: int


def subscribed_queues(
    store: Any, clients: Iterable[Mapping[str, Any]] = ()
) -> list[tuple[str, str, int, int]]:
    """Return every (group, topic, queue id, committed offset or -1) a group
    consumes, by group, topic and queue.

    A group consumes every queue of a topic it has committed an offset on, or
    that one of its consumer ``clients`` (the endpoint's client records, as in
    ``clients.json``) subscribes to: a queue the group never read from is
    listed with -1, its whole depth lag. Topics the store no longer has are
    left out.
    """
    offsets: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in store.all_offsets().items():
        topic, _, group = key.partition("@")
        offsets.setdefault((group, topic), {}).update(
            {int(q): int(o) for q, o in queues.items()}
        )
    for c in clients:
        if not isinstance(c, Mapping) or c.get("client_type") not in CONSUMER_TYPES:
            continue
        for topic in (c.get("topics") or ()) if c.get("group") else ():
            offsets.setdefault((str(c["group"]), str(topic)), {})
    out = []
    for (group, topic), committed in sorted(offsets.items()):
        cfg = store.topic_config(topic)
        if cfg is None:
            continue
        for qid in sorted(set(range(cfg.read_queue_nums)) | set(committed)):
            out.append((group, topic, qid, committed.get(qid, -1)))
    return out


def lag_of(store: Any, topic: str, queue_id: int, committed: int) -> tuple[int, int]:
    """Return (max offset, lag) of a queue: a queue never consumed
    (``committed`` -1) lags by its whole depth."""
    hi = store.max_offset(topic, queue_id)
    start = committed if committed >= 0 else store.min_offset(topic, queue_id)
    return hi, max(0, hi - start)


def consumer_lag(
    store: Any, clients: Iterable[Mapping[str, Any]] = ()
) -> list[QueueLag]:
    """Return the lag of every queue every group consumes
    (``subscribed_queues``), by group, topic and queue."""
    out = []
    for group, topic, qid, committed in subscribed_queues(store, clients):
        hi, lag = lag_of(store, topic, qid, committed)
        out.append(QueueLag(group, topic, qid, committed, hi, lag))
    return out
