"""The /healthz endpoint answers for every component and names what is down."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from console.core import health, liveness

WORKER_KEY = liveness.WORKER_KEY_PREFIX + "worker@test"


def beat_alive(at: float | None = None) -> None:
    health.redis_client().set(liveness.BEAT_ALIVE_KEY, at or time.time())


def worker_alive(queues: str = '["celery", "timers"]') -> None:
    health.redis_client().set(WORKER_KEY, f'{{"queues": {queues}}}', ex=60)


@pytest.fixture
def beat_ticked():
    r = health.redis_client()
    r.set(health.BEAT_KEY, time.time())
    beat_alive()
    worker_alive()
    yield
    r.delete(health.BEAT_KEY, liveness.BEAT_ALIVE_KEY, WORKER_KEY)


@pytest.mark.django_db
def test_healthz_reports_each_component(beat_ticked, settings):
    settings.GRPC_LISTEN = "127.0.0.1:1"  # nothing listens on port 1
    response = Client().get("/healthz")
    body = response.json()
    assert set(body["components"]) == {
        "database", "redis", "store", "beat", "worker", "grpc"
    }  # fmt: skip
    for name in ("database", "redis", "store", "beat", "worker"):
        assert body["components"][name]["status"] == "up", body
    assert response.status_code == 503
    assert body["down"] == ["grpc"]


@pytest.mark.django_db
def test_healthz_200_when_everything_up(beat_ticked, settings):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        settings.GRPC_LISTEN = f"127.0.0.1:{listener.getsockname()[1]}"
        response = Client().get("/healthz")
    finally:
        listener.close()
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "ok"


@pytest.mark.django_db
def test_healthz_names_stale_beat_and_dead_redis(settings):
    beat_alive(time.time() - 3600)
    url = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    body = Client().get("/healthz").json()
    assert body["components"]["redis"]["status"] == "down"
    assert "beat" in body["down"] and "redis" in body["down"]
    settings.REDIS_URL = url
    health.redis_client().delete(liveness.BEAT_ALIVE_KEY)
    assert (
        "never ticked" in Client().get("/healthz").json()["components"]["beat"]["error"]
    )


@pytest.mark.django_db
def test_a_stopped_worker_is_named_not_beat(beat_ticked, settings):
    """Beat ticks, no worker serves the timers queue: /healthz says worker,
    and beat is up; a worker of another queue does not count."""
    health.redis_client().delete(WORKER_KEY)
    worker_alive('["reports"]')
    body = Client().get("/healthz").json()
    assert body["components"]["beat"]["status"] == "up", body
    assert "worker" in body["down"] and "beat" not in body["down"]
    assert (
        "no worker serves the timers queue" in (body["components"]["worker"]["error"])
    )
    worker_alive('["node.broker-a"]')  # a node's timers worker in a cluster
    body = Client().get("/healthz").json()
    assert body["components"]["worker"]["status"] == "up", body


def test_healthz_needs_no_sign_in_but_overview_does(db):
    assert Client().get("/").status_code == 302


@pytest.mark.django_db
def test_a_console_only_host_has_no_endpoint_to_check(beat_ticked, settings):
    settings.GRPC_LISTEN = ""  # the nodes' endpoints run on other hosts
    response = Client().get("/healthz")
    body = response.json()
    assert "grpc" not in body["components"], body
    assert response.status_code == 200, body
