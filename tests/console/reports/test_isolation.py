"""Reports cannot starve the broker: with the deployment of the Procfile (a
"timers" worker for the check, delay delivery and heartbeat; a "reports" worker
for Spark), timers that fall due while all four reports run are delivered as
punctually as on an idle system."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis

from broker_core import Broker, Message
from broker_core.schedule import install_send_hook

pytestmark = [pytest.mark.services, pytest.mark.spark, pytest.mark.slow]

TIMERS = 20
TOPIC = "PunctualTimers"


def _manage(env: dict, *args: str) -> str:
    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _delivered(b: Broker) -> list:
    cfg = b.store.topic_config(TOPIC)
    out = []
    for q in range(cfg.queue_nums if cfg else 0):
        off = 0
        while True:
            r = b.pull("probe", TOPIC, q, off, max_messages=64)
            out += r.messages
            if r.next_offset == off:
                break
            off = r.next_offset
    return out


def test_timers_stay_punctual_while_all_reports_run(celery_services, tmp_path):
    redis_url = "redis://127.0.0.1:6379/13"
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = tmp_path / "store"
    try:
        celery_services.start(
            redis_url,
            ["-Q", "timers,celery", "--concurrency", "2", "-n", "timers@%h"],
            more_workers={
                "reports": ["-Q", "reports", "--concurrency", "1", "-n", "reports@%h"]
            },
            BROKER_STORE_DIR=str(store),
            DELAY_TICK_INTERVAL="1",
            REPORTS_EXPORT_INTERVAL="0",
            SPARK_MASTER="local[2]",
        )
        env = celery_services.env
        _manage(env, "seed_demo", "--messages", "3000")
        with Broker.open(store) as b:
            install_send_hook(b)  # TIMER_DELIVER_MS parks the message
            b.create_topic(TOPIC, 2)
            start = int(time.time() * 1000)
            for i in range(TIMERS):
                due = start + 8000 + i * 1000
                b.send(
                    Message(
                        TOPIC, str(due).encode(),
                        properties={"TIMER_DELIVER_MS": str(due)},
                    )
                )  # fmt: skip
            # All four reports at once, while the timers fall due.
            _manage(
                env, "shell", "-c",
                "from console.reports.catalog import REPORTS\n"
                "from console.reports.services import request_run\n"
                "for n in REPORTS: request_run(n)",
            )  # fmt: skip
            deadline = time.monotonic() + 120
            got = _delivered(b)
            while len(got) < TIMERS and time.monotonic() < deadline:
                time.sleep(0.5)
                got = _delivered(b)
        runs = json.loads(
            _manage(
                env, "shell", "-c",
                "import json\n"
                "from console.reports.models import ReportRun\n"
                "print(json.dumps([[r.report, r.status, "
                "r.started_at and r.started_at.timestamp(), "
                "r.finished_at and r.finished_at.timestamp()] "
                "for r in ReportRun.objects.all()]))",
            ).strip().splitlines()[-1]
        )  # fmt: skip
    finally:
        celery_services.stop()
        client.flushdb()
    assert len(got) == TIMERS, celery_services.log("worker")[-3000:]
    late_ms = sorted(m.store_timestamp - int(m.body) for m in got)
    # The reports really ran while the timers fell due.
    first_due, last_due = (start + 8000) / 1000, (start + 8000 + TIMERS * 1000) / 1000
    assert len(runs) == 4
    busy = [r for r in runs if r[2] and r[2] < last_due and (r[3] or 1e12) > first_due]
    assert busy, (runs, celery_services.log("reports")[-3000:])
    # Delivery runs every second (DELAY_TICK_INTERVAL): late by under a tick
    # plus scheduling noise, never by a report's duration.
    assert late_ms[0] >= 0 and late_ms[-1] < 2500, late_ms
