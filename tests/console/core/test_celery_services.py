"""A real Celery worker and beat, against real Redis, run a scheduled task."""

from __future__ import annotations

import time

import pytest
import redis

from console.core.health import BEAT_KEY


@pytest.mark.services
@pytest.mark.slow
def test_beat_schedules_and_worker_runs_heartbeat(celery_services):
    redis_url = "redis://127.0.0.1:6379/14"
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
