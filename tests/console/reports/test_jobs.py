"""Report jobs in a real local SparkSession over a store built by broker_core."""

from __future__ import annotations

from collections import Counter

import pytest

from broker_core import Broker, Message, TransactionService

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark():
    from console.reports.jobs.session import get_session

    session = get_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store")
    sent = Counter()
    sizes = Counter()
    with Broker.open(str(path), segment_size=64 * 1024) as broker:
        for i in range(900):
            topic = ("orders", "payments", "audit")[i % 3]
            body = b"x" * (10 + i % 7)
            broker.send(Message(topic, body, tags="TagA" if i % 2 else "TagB"))
            sent[topic] += 1
            sizes[topic] += len(body)
        with TransactionService(broker) as tx:
            for i in range(5):
                half = tx.send_half("PID_orders", Message("orders", b"half"))
                if i < 2:
                    tx.end_transaction(
                        half.transaction_id, "PID_orders", "COMMIT", "CLIENT"
                    )
                    sent["orders"] += 1
                    sizes["orders"] += 4
    return path, sent, sizes


def test_reader_decodes_every_segment(spark, store):
    from broker_core.logscan import segment_paths
    from console.reports.jobs.reader import read_commit_log

    path, sent, _ = store
    assert len(segment_paths(path)) > 1  # small segments: several tasks
    records = read_commit_log(spark, path)
    user = records.where(~records.topic.startswith("RMQ_SYS_")).count()
    assert user == sum(sent.values())


def test_topic_traffic_matches_what_was_sent(spark, store):
    from console.reports.jobs.reader import read_commit_log
    from console.reports.jobs.transforms import transform_topic_traffic

    path, sent, sizes = store
    rows = transform_topic_traffic(read_commit_log(spark, path)).collect()
    got_messages = Counter()
    got_bytes = Counter()
    for row in rows:
        got_messages[row.topic] += row.messages
        got_bytes[row.topic] += row.bytes
    assert got_messages == sent
    assert got_bytes == sizes


def test_halves_per_group_and_top_tags(spark):
    from console.reports.jobs.reader import SCHEMA
    from console.reports.jobs.transforms import (
        transform_halves_per_group,
        transform_top_tags,
    )

    def row(topic, tags=None, props=None):
        return (topic, 0, 0, 0, 0, 0, 0, 3, tags, None, props or {})

    df = spark.createDataFrame(
        [
            row("RMQ_SYS_TRANS_HALF_TOPIC", props={"PGROUP": "G1", "REAL_TOPIC": "t"}),
            row("RMQ_SYS_TRANS_HALF_TOPIC", props={"PGROUP": "G1", "REAL_TOPIC": "t"}),
            row("RMQ_SYS_TRANS_HALF_TOPIC", props={"PGROUP": "G2", "REAL_TOPIC": "u"}),
            row("t", tags="A"),
            row("t", tags="A"),
            row("t", tags="B"),
            row("SCHEDULE_TOPIC_XXXX", tags="A"),
        ],
        SCHEMA,
    )
    halves = [tuple(r) for r in transform_halves_per_group(df).collect()]
    assert halves == [("G1", "t", 2), ("G2", "u", 1)]
    tags = [tuple(r) for r in transform_top_tags(df).collect()]
    assert tags == [("t", "A", 2), ("t", "B", 1)]
