"""The health banner on every page: a real Celery worker and beat run, the
worker is stopped, and the next page says so, with what it means and what to do."""

from __future__ import annotations

import time

import pytest
import redis

from console.core.health import BEAT_KEY

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
]

WORKER_DOWN = "The timers worker is not running"


def test_the_banner_appears_while_the_worker_is_stopped(
    page, users, sign_in, broker, settings, celery_services, screenshot
) -> None:
    settings.BEAT_HEARTBEAT_INTERVAL = 1  # stale after 3.5 s
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    try:
        celery_services.start(
            settings.REDIS_URL,
            ["-Q", "timers,celery", "--concurrency", "1", "-n", "banner@%h"],
            BROKER_STORE_DIR=str(broker.store.root),
            BEAT_HEARTBEAT_INTERVAL="1",
        )
        end = time.time() + 60
        while True:  # the worker runs beat's heartbeat
            raw = client.get(BEAT_KEY)
            if raw is not None and time.time() - float(raw) < 2:
                break
            assert time.time() < end, celery_services.log("worker")[-2000:]
            time.sleep(0.2)
        sign_in(page, "viewer")
        page.goto("/topics/")
        assert WORKER_DOWN not in page.content()
        worker = celery_services.procs[0]
        worker.terminate()
        worker.wait(timeout=30)
        time.sleep(5)  # beat goes on queueing ticks nobody takes
        page.goto("/topics/")
        banner = page.locator("[data-testid=health-banner]").inner_text()
        assert WORKER_DOWN in banner
        assert "check-backs and delayed deliveries are not happening" in banner
        assert "Procfile: worker" in banner
        # Named for what stopped: beat runs on, and this is no backlog.
        assert "Celery beat is not running" not in banner
        assert "backlog" not in banner
        from django.test import Client

        health = Client().get("/healthz").json()
        assert "worker" in health["down"] and "beat" not in health["down"], health
        screenshot(page, "health-banner")
    finally:
        celery_services.stop()
        client.flushdb()
