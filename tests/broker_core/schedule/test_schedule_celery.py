"""Celery beat drives delivery: a real worker (two prefork children) and beat."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.schedule import DelayService

redis = pytest.importorskip("redis")
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.services
@pytest.mark.slow
def test_beat_delivers_on_time_exactly_once(tmp_path: Path) -> None:
    redis_url = "redis://127.0.0.1:6379/13"
    redis.Redis.from_url(redis_url).flushdb()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path),
        "BROKER_STORE_DIR": str(tmp_path / "store"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "DELAY_TICK_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
    }
    py = sys.executable
    subprocess.run(
        [py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    celery = [py, "-m", "celery", "-A", "console"]
    logs = {n: open(tmp_path / f"{n}.log", "w") for n in ("worker", "beat")}
    procs = [
        subprocess.Popen(
            [*celery, "worker", "--concurrency", "2", "-n", "d1@%h"],
            cwd=ROOT,
            env=env,
            stdout=logs["worker"],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*celery, "beat", "-s", str(tmp_path / "beat-schedule")],
            cwd=ROOT,
            env=env,
            stdout=logs["beat"],
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        # Send once the worker has run a tick: startup is not what is measured.
        wait_until = time.time() + 60
        while time.time() < wait_until:
            if "delays.deliver_due" in (tmp_path / "worker.log").read_text():
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
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)
    worker_log = (tmp_path / "worker.log").read_text()
    counts = Counter(m.msg_id for m in got)
    assert set(counts) == set(sent), worker_log[-3000:]
    assert max(counts.values()) == 1
    assert all(m.store_timestamp >= sent[m.msg_id] for m in got)
    assert "delays.deliver_due" in worker_log
    lags = sorted(m.store_timestamp - sent[m.msg_id] for m in got)
    print(
        "lag ms", [lags[int(len(lags) * q)] for q in (0.5, 0.9, 0.95, 0.99)], lags[-1]
    )
