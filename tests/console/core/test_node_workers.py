"""Celery per node with real workers, beat and Redis: beat schedules the delay
delivery once per node on queue node.<name>; each node's worker (its own
store, BROKER_NODE, -Q node.<name>) delivers its own node's delayed message;
a node whose store is a slave skips the timers (its master runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from broker_core import Broker, Message
from broker_core.ha.role import Role, write_role
from broker_core.schedule import DelayService
from tests.support import redis_db

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
REDIS_URL = redis_db(10)
NODES = ("broker-a", "broker-b", "broker-c")


def _delivered(store: Path) -> int:
    with Broker.open(str(store)) as b:
        topic = b.store.topic_config("later")
        if topic is None:
            return 0
        return sum(b.store.max_offset("later", q) for q in range(topic.queue_nums))


def test_each_node_worker_runs_its_own_timers(tmp_path):
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    stores = {n: tmp_path / n for n in NODES}
    for store in stores.values():
        with Broker.open(str(store)) as b:
            delays = DelayService(b)  # its send hook parks the message
            b.send(Message("later", b"due", properties={"DELAY": "1"}))
            delays.close()
        assert _delivered(store) == 0
    write_role(stores["broker-c"], Role.SLAVE, master="10.0.0.1:10912")
    base = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": REDIS_URL,
        "CLUSTER_NODES": ",".join(NODES),
        "DELAY_TICK_INTERVAL": "0.5",
        "TRANSACTION_CHECK_INTERVAL": "5",
        "REPORTS_EXPORT_INTERVAL": "0",
        "PYTHONUNBUFFERED": "1",
        "LOG_TICKS": "1",  # the worker's per-task lines are read below
    }
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT,
                   env=base, check=True, timeout=120)  # fmt: skip
    celery = [py, "-m", "celery", "-A", "console"]
    procs, logs = [], {}
    try:
        for n in NODES:
            env = {**base, "BROKER_STORE_DIR": str(stores[n]), "BROKER_NODE": n}
            logs[n] = tmp_path / f"worker-{n}.log"
            procs.append(subprocess.Popen(
                [*celery, "worker", "--pool", "solo", "-n", f"{n}@%h",
                 "-Q", f"node.{n}", "-l", "info"],
                cwd=ROOT, env=env, stdout=open(logs[n], "w"),
                stderr=subprocess.STDOUT,
            ))  # fmt: skip
        procs.append(subprocess.Popen(
            [*celery, "beat", "-s", str(tmp_path / "beat-schedule")],
            cwd=ROOT, env={**base, "BROKER_STORE_DIR": str(stores["broker-a"])},
            stdout=open(tmp_path / "beat.log", "w"), stderr=subprocess.STDOUT,
        ))  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = {n: _delivered(stores[n]) for n in ("broker-a", "broker-b")}
            if all(done.values()) and "slave" in logs["broker-c"].read_text():
                break
            time.sleep(0.5)
        detail = {n: logs[n].read_text()[-2000:] for n in NODES}
        assert _delivered(stores["broker-a"]) == 1, detail
        assert _delivered(stores["broker-b"]) == 1, detail
        assert _delivered(stores["broker-c"]) == 0, detail
        assert "its master runs the timers" in logs["broker-c"].read_text()
        # Each worker took only its own node's tasks.
        assert "'node': 'broker-b'" not in logs["broker-a"].read_text()
        assert "'node': 'broker-a'" in logs["broker-a"].read_text()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        client.flushdb()
