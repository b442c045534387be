"""Celery beat drives delivery: a real worker (two prefork children) and beat."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.schedule import DelayService
from tests.support import redis_db

redis = pytest.importorskip("redis")


@pytest.mark.services
@pytest.mark.slow
def test_beat_delivers_on_time_exactly_once(tmp_path: Path, celery_services) -> None:
    redis_url = redis_db(13)
    redis.Redis.from_url(redis_url).flushdb()
    celery_services.start(
        redis_url,
        ["--concurrency", "2", "-n", "d1@%h"],
        BROKER_STORE_DIR=str(tmp_path / "store"),
        DELAY_TICK_INTERVAL="1",
    )
    try:
        # Send once the worker has run a tick: startup is not what is measured.
        wait_until = time.time() + 60
        while time.time() < wait_until:
            if "delays.deliver_due" in celery_services.log("worker"):
                break
            time.sleep(0.2)
        with Broker.open(tmp_path / "store") as b:
            svc = DelayService(b)
            sent = {}
            base = int(time.time() * 1000) + 1500
            for i in range(200):
                r = svc.send_delayed(
                    Message("Orders", b"t"), deliver_at_ms=base + i * 20
                )
                sent[r.msg_id] = base + i * 20
            deadline = time.time() + 40
            got: list = []
            while time.time() < deadline:
                if b.store.topic_config("Orders") is not None:
                    got = [
                        m
                        for q in range(4)
                        for m in b.pull("t", "Orders", q, 0, 1000).messages
                    ]
                if len(got) >= len(sent):
                    break
                time.sleep(0.2)
            svc.close()
    finally:
        celery_services.stop()
    worker_log = celery_services.log("worker")
    counts = Counter(m.msg_id for m in got)
    assert set(counts) == set(sent), worker_log[-3000:]
    assert max(counts.values()) == 1
    assert all(m.store_timestamp >= sent[m.msg_id] for m in got)
    assert "delays.deliver_due" in worker_log
    lags = sorted(m.store_timestamp - sent[m.msg_id] for m in got)
    print(
        "lag ms", [lags[int(len(lags) * q)] for q in (0.5, 0.9, 0.95, 0.99)], lags[-1]
    )
