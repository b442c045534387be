"""A real Celery worker and beat, against real Redis, run a scheduled task."""

from __future__ import annotations

import time

import pytest
import redis

from console.core.health import BEAT_KEY
from tests.support import redis_db


@pytest.mark.services
@pytest.mark.slow
def test_beat_schedules_and_worker_runs_heartbeat(celery_services):
    redis_url = redis_db(14)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        celery_services.start(
            redis_url,
            ["--concurrency", "1", "--pool", "solo", "-n", "t1@%h"],
            BEAT_HEARTBEAT_INTERVAL="1",
        )
        started = time.time()
        ticks: list[float] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(set(ticks)) < 2:
            raw = client.get(BEAT_KEY)
            if raw is not None and (not ticks or float(raw) != ticks[-1]):
                ticks.append(float(raw))
            time.sleep(0.2)
        beat_log = celery_services.log("beat")
        worker_log = celery_services.log("worker")
        assert len(set(ticks)) >= 2, f"no beat ticks seen\n{beat_log}\n{worker_log}"
        assert all(t >= started for t in ticks)
        assert "core.beat_heartbeat" in worker_log
        # One JSON object per line from the worker's own loggers.
        assert any(line.startswith("{") for line in worker_log.splitlines())
    finally:
        celery_services.stop()
        client.flushdb()
    assert all(proc.returncode is not None for proc in celery_services.procs)


@pytest.mark.services
@pytest.mark.slow
def test_ticks_queued_during_a_worker_outage_expire(celery_services, tmp_path):
    """No worker takes the timers queue for a while: beat's ticks pile up in
    Redis, each carrying its expiry; when a timers worker returns it drops the
    stale ones instead of running them all late, and the queue drains."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    redis_url = redis_db(12)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        # The only worker serves another queue: the timers queue has none.
        celery_services.start(
            redis_url,
            ["--concurrency", "1", "--pool", "solo", "-Q", "reports", "-n", "r1@%h"],
            DELAY_TICK_INTERVAL="1",
            BROKER_STORE_DIR=str(tmp_path / "store"),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and client.llen("timers") < 8:
            time.sleep(0.2)
        queued = [json.loads(raw) for raw in client.lrange("timers", 0, -1)]
        ticks = [m for m in queued if m["headers"]["task"] == "delays.deliver_due"]
        assert len(ticks) >= 6, celery_services.log("beat")[-2000:]
        assert all(m["headers"].get("expires") for m in ticks), ticks[0]["headers"]
        time.sleep(2)  # every tick queued so far is now stale
        stale = client.llen("timers")
        log = open(tmp_path / "timers.log", "w")  # noqa: SIM115
        timers = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", "worker", "-Q",
             "timers", "--concurrency", "1", "--pool", "solo", "-n", "t1@%h"],
            cwd=ROOT, env=celery_services.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        celery_services.procs.append(timers)
        celery_services._logs.append(log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and client.llen("timers") > 2:
            time.sleep(0.2)
        time.sleep(1)
        text = (tmp_path / "timers.log").read_text()
        assert client.llen("timers") <= 2, text[-3000:]
        ran = sum(
            1
            for line in text.splitlines()
            if "delays.deliver_due" in line and "succeeded" in line
        )
        # The stale ticks were dropped: only the fresh ones ran.
        assert ran < stale / 2, (ran, stale, text[-3000:])
    finally:
        celery_services.stop()
        client.flushdb()
