"""The /healthz endpoint answers for every component and names what is down."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from console.core import health


@pytest.fixture
def beat_ticked():
    health.redis_client().set(health.BEAT_KEY, time.time())
    yield
    health.redis_client().delete(health.BEAT_KEY)


@pytest.mark.django_db
def test_healthz_reports_each_component(beat_ticked, settings):
    settings.GRPC_LISTEN = "127.0.0.1:1"  # nothing listens on port 1
    response = Client().get("/healthz")
    body = response.json()
    assert set(body["components"]) == {"database", "redis", "store", "beat", "grpc"}
    for name in ("database", "redis", "store", "beat"):
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
    health.redis_client().set(health.BEAT_KEY, time.time() - 3600)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    body = Client().get("/healthz").json()
    assert body["components"]["redis"]["status"] == "down"
    assert "beat" in body["down"] and "redis" in body["down"]
    settings.REDIS_URL = "redis://127.0.0.1:6379/15"
    health.redis_client().delete(health.BEAT_KEY)
    assert (
        "never ticked" in Client().get("/healthz").json()["components"]["beat"]["error"]
    )


def test_healthz_needs_no_sign_in_but_overview_does(db):
    assert Client().get("/").status_code == 302
