"""One local SparkSession for the whole reports test group, row builders, and
an S3-compatible object store (moto's server) for the reports that use one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support import free_port as _free_port

BUCKET = "reports"


@pytest.fixture(scope="session")
def spark():
    from console.reports.jobs.session import get_session

    session = get_session("local[2]", driver_memory="1g")
    yield session
    session.stop()


def rec(
    topic,
    *,
    queue_id=0,
    queue_offset=0,
    physical_offset=0,
    sysflag=0,
    born_ts=0,
    store_ts=0,
    body_size=1,
    prepared_offset=0,
    tags=None,
    keys=None,
    props=None,
    node="",
):
    """Return one record row in ``RECORD_SCHEMA`` order (a single host's
    record unless ``node`` names one)."""
    return (
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        sysflag,
        born_ts,
        store_ts,
        body_size,
        prepared_offset,
        tags,
        keys,
        props or {},
        node,
    )


@pytest.fixture
def records(spark):
    """Build a records DataFrame from ``rec`` rows."""
    from console.reports.jobs.common import RECORD_SCHEMA

    def build(rows):
        return spark.createDataFrame(rows, RECORD_SCHEMA)

    return build


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """Build a store with plain, transactional and delayed traffic; return facts."""
    from broker_core import Broker, Message
    from broker_core.schedule import DelayService
    from broker_core.transaction import CallableTransport, TransactionService

    path = tmp_path_factory.mktemp("e2e") / "store"
    facts = {"messages": Counter(), "bytes": Counter(), "tags": Counter()}
    opts = {"segment_size": 64 * 1024, "message_delay_level": "1s 2s"}

    def sent(topic, size, tag=None):
        facts["messages"][topic] += 1
        facts["bytes"][topic] += size
        if tag:
            facts["tags"][(topic, tag)] += 1

    with Broker.open(str(path), **opts) as broker:
        for i in range(600):
            topic, body = ("orders", "payments", "audit")[i % 3], b"x" * (5 + i % 20)
            tag = ("paid", "refunded", "new")[i % 4 % 3]
            broker.send(Message(topic, body, tags=tag, keys=f"k{i % 7}"))
            sent(topic, len(body), tag)
        with TransactionService(
            broker, transaction_timeout_ms=0, check_interval_ms=0
        ) as tx:
            ids = [
                tx.send_half("PID_shop", Message("orders", b"half", tags="tx"))
                for _ in range(7)
            ]
            for h in ids[:3]:
                tx.end_transaction(h.transaction_id, "PID_shop", "COMMIT")
                sent("orders", 4, "tx")
            for h in ids[3:5]:
                tx.end_transaction(h.transaction_id, "PID_shop", "ROLLBACK")
            tx.commit(ids[5].transaction_id, "alice")  # an operator commit
            sent("orders", 4, "tx")
            # The last half is checked back once (UNKNOWN): still pending.
            tx.checkers.set_default(CallableTransport(lambda req: None))
            time.sleep(0.05)
            tx.run_check(max_checks=10)
        delays = DelayService(broker)
        broker.send(Message("later", b"L1", properties={"DELAY": "1"}))
        broker.send(Message("later", b"L1", properties={"DELAY": "1"}))
        for _ in range(3):
            broker.send(Message("later", b"T", properties={"TIMER_DELAY_MS": "100"}))
        recalled = broker.send(
            Message("later", b"T", properties={"TIMER_DELAY_MS": "600000"})
        )
        delays.recall(recalled.msg_id)
        time.sleep(1.2)
        delivered = delays.deliver_due()
        assert delivered.delivered == 5
        facts["messages"]["later"] += 5
        facts["bytes"]["later"] += 2 * 2 + 3 * 1
        delays.close()
        ends = {q: broker.store.max_offset("orders", q) for q in range(4)}
        for q in range(4):
            broker.commit_offset("billing", "orders", q, ends[q] // 2)
        facts["lag"] = sum(e - e // 2 for e in ends.values())
    return path, opts, facts


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on a loopback port with one bucket; yields the URI
    prefix for ``REPORTS_*_URI`` (credentials in the environment)."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    saved = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    os.environ["AWS_ACCESS_KEY_ID"] = "reports-test"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "reports-test-secret"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        import pyarrow.fs as pafs

        pafs.S3FileSystem(
            access_key="reports-test",
            secret_key="reports-test-secret",
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        ).create_dir(BUCKET)
        yield f"s3://{BUCKET}/{{}}?endpoint_override=127.0.0.1:{port}&scheme=http"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
