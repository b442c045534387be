"""Consumer lag over a real store: the queues a group consumes (committed
offsets and its clients' subscriptions) and how far behind each is."""

from __future__ import annotations

from broker_core import Broker, Message
from broker_core.lag import QueueLag, consumer_lag, subscribed_queues


def test_lag_counts_committed_and_subscribed_queues(tmp_path):
    with Broker.open(str(tmp_path / "store")) as b:
        b.create_topic("events", 2)
        b.create_topic("audit", 1)
        b.send_batch([Message("events", b"%d" % i, queue_id=i % 2) for i in range(10)])
        b.send_batch([Message("audit", b"a") for _ in range(3)])
        got = b.pull("analytics", "events", 0, 0, max_messages=4)
        b.commit_offset("analytics", "events", 0, got.next_offset)
        clients = [
            # A consumer of audit that never committed: all 3 are behind.
            {"client_type": "SIMPLE_CONSUMER", "group": "auditors",
             "topics": ["audit"]},
            # Producers and subscriptions to unknown topics count for nothing.
            {"client_type": "PRODUCER", "group": "shop", "topics": ["events"]},
            {"client_type": "PUSH_CONSUMER", "group": "ghost",
             "topics": ["gone"]},
        ]  # fmt: skip
        assert subscribed_queues(b.store, clients) == [
            ("analytics", "events", 0, 4),
            ("analytics", "events", 1, -1),
            ("auditors", "audit", 0, -1),
        ]
        assert consumer_lag(b.store, clients) == [
            QueueLag("analytics", "events", 0, 4, 5, 1),
            QueueLag("analytics", "events", 1, -1, 5, 5),
            QueueLag("auditors", "audit", 0, -1, 3, 3),
        ]
        # Without the clients only committed groups are known.
        assert [q.group for q in consumer_lag(b.store)] == ["analytics"] * 2
