"""A real Celery worker and beat, against real Redis, run a scheduled task."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from console.core.health import BEAT_KEY

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.services
@pytest.mark.slow
def test_beat_schedules_and_worker_runs_heartbeat(tmp_path):
    redis_url = "redis://127.0.0.1:6379/14"
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "BEAT_HEARTBEAT_INTERVAL": "1",
        "PYTHONUNBUFFERED": "1",
    }
    python = sys.executable
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    celery = [python, "-m", "celery", "-A", "console"]
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("worker", "beat")}
    procs = [
        subprocess.Popen(
            [*celery, "worker", "--concurrency", "1", "--pool", "solo", "-n", "t1@%h"],
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
        started = time.time()
        ticks: list[float] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(set(ticks)) < 2:
            raw = client.get(BEAT_KEY)
            if raw is not None and (not ticks or float(raw) != ticks[-1]):
                ticks.append(float(raw))
            time.sleep(0.2)
        beat_log = (tmp_path / "beat.log").read_text()
        worker_log = (tmp_path / "worker.log").read_text()
        assert len(set(ticks)) >= 2, f"no beat ticks seen\n{beat_log}\n{worker_log}"
        assert all(t >= started for t in ticks)
        assert "core.beat_heartbeat" in worker_log
        # One JSON object per line from the worker's own loggers.
        assert any(line.startswith("{") for line in worker_log.splitlines())
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for fh in logs.values():
            fh.close()
        client.flushdb()
    assert all(proc.returncode is not None for proc in procs)
