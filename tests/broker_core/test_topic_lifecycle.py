"""A deleted topic stays deleted across restarts and repairs, and a read-only
topic takes no sends (real stores, real restarts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.errors import TopicNotFoundError, TopicNotWritableError
from broker_core.transaction import TransactionService
from broker_core.verify import repair_and_verify, verify_store


def test_a_deleted_topic_does_not_come_back_after_a_restart(tmp_path: Path) -> None:
    """Its records stay in the log; recovery used to find queues "missing"
    for them, rebuild them and give the topic back a config."""
    store = tmp_path / "store"
    with Broker.open(store) as b:
        for i in range(5):
            b.send(Message("Gone", b"old-%d" % i, queue_id=0))
        b.send(Message("Kept", b"kept", queue_id=0))
        b.delete_topic("Gone")
    for _ in range(2):
        with Broker.open(store) as b:
            assert "Gone" not in [t.topic_name for t in b.list_topics()]
            with pytest.raises(TopicNotFoundError):
                b.store.get_topic("Gone")
            assert b.pull("g", "Kept", 0, 0, 10).messages[0].body == b"kept"
    assert verify_store(store).ok
    assert repair_and_verify(store).ok
    # Made again, it starts empty: the old records are not its messages.
    with Broker.open(store) as b:
        b.create_topic("Gone", 1)
        sent = b.send(Message("Gone", b"new", queue_id=0))
        assert sent.queue_offset == 0
    with Broker.open(store) as b:
        got = b.pull("g", "Gone", 0, 0, 10).messages
        assert [m.body for m in got] == [b"new"]
    assert verify_store(store).ok


def test_a_read_only_topic_refuses_sends_and_halves(tmp_path: Path) -> None:
    with Broker.open(tmp_path / "store") as b:
        b.create_topic("RO", 2)
        b.send(Message("RO", b"before"))
        b.update_topic("RO", perm=4)
        with pytest.raises(TopicNotWritableError, match="read-only"):
            b.send(Message("RO", b"after"))
        with pytest.raises(TopicNotWritableError):
            b.send_batch([Message("RO", b"a"), Message("RO", b"b")])
        tx = TransactionService(b)
        with pytest.raises(TopicNotWritableError):
            tx.send_half("pg", Message("RO", b"half"))
        # Still readable; writable again once its permission says so.
        got = [m.body for q in (0, 1) for m in b.pull("g", "RO", q, 0, 10).messages]
        assert got == [b"before"]
        b.update_topic("RO", perm=6)
        b.send(Message("RO", b"again"))
    assert TopicNotWritableError.http_status == 409


def test_a_refused_send_makes_no_topic(tmp_path: Path) -> None:
    """A queue id out of range for a topic the send would have made: refused,
    and the topic is not made (it was, in memory, and saved by the next
    change)."""
    from broker_core.errors import InvalidQueueError

    store = tmp_path / "store"
    with Broker.open(store) as b:
        with pytest.raises(InvalidQueueError):
            b.send(Message("Never", b"x", queue_id=99))
        assert "Never" not in [t.topic_name for t in b.list_topics()]
        b.create_topic("Other", 1)
    with Broker.open(store) as b:
        assert "Never" not in [t.topic_name for t in b.list_topics()]
