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
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(1))  # a real HTTP/2 server
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        settings.GRPC_LISTEN = f"127.0.0.1:{port}"
        response = Client().get("/healthz")
    finally:
        server.stop(0)
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "ok"


@pytest.mark.django_db
def test_an_endpoint_that_accepts_but_never_answers_is_down(
    client_as, beat_ticked, settings
):
    """A hung or stopped endpoint's kernel still accepts connections: a TCP
    connect said it was up while producers' sends timed out (helper-14)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        settings.GRPC_LISTEN = f"127.0.0.1:{listener.getsockname()[1]}"
        response = client_as("viewer").get("/healthz")
    finally:
        listener.close()
    body = response.json()
    assert response.status_code == 503 and body["down"] == ["grpc"], body
    assert "does not answer" in body["components"]["grpc"]["error"]


@pytest.mark.django_db
def test_healthz_names_stale_beat_and_dead_redis(client_as, settings):
    beat_alive(time.time() - 3600)
    url = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    body = client_as("viewer").get("/healthz").json()
    assert body["components"]["redis"]["status"] == "down"
    assert "beat" in body["down"] and "redis" in body["down"]
    settings.REDIS_URL = url
    health.redis_client().delete(liveness.BEAT_ALIVE_KEY)
    assert (
        "never ticked"
        in client_as("viewer").get("/healthz").json()["components"]["beat"]["error"]
    )


@pytest.mark.django_db
def test_a_stopped_worker_is_named_not_beat(client_as, beat_ticked, settings):
    """Beat ticks, no worker serves the timers queue: /healthz says worker,
    and beat is up; a worker of another queue does not count."""
    health.redis_client().delete(WORKER_KEY)
    worker_alive('["reports"]')
    body = client_as("viewer").get("/healthz").json()
    assert body["components"]["beat"]["status"] == "up", body
    assert "worker" in body["down"] and "beat" not in body["down"]
    assert (
        "no worker serves the timers queue" in (body["components"]["worker"]["error"])
    )
    worker_alive('["node.broker-a"]')  # a node's timers worker in a cluster
    body = client_as("viewer").get("/healthz").json()
    assert body["components"]["worker"]["status"] == "up", body


def test_healthz_needs_no_sign_in_but_overview_does(db):
    assert Client().get("/").status_code == 302


@pytest.mark.django_db
def test_healthz_shows_details_to_signed_in_users_only(beat_ticked, settings):
    """Anonymous probes get each component's status; paths, addresses, hosts
    and errors are for signed-in users (helper-14)."""
    settings.GRPC_LISTEN = "127.0.0.1:1"
    body = Client().get("/healthz").json()
    assert body["down"] == ["grpc"]
    assert all(set(c) == {"status"} for c in body["components"].values()), body
    assert str(settings.BROKER_STORE_DIR) not in str(body)


@pytest.mark.django_db
def test_a_console_only_host_has_no_endpoint_to_check(beat_ticked, settings):
    settings.GRPC_LISTEN = ""  # the nodes' endpoints run on other hosts
    response = Client().get("/healthz")
    body = response.json()
    assert "grpc" not in body["components"], body
    assert response.status_code == 200, body


@pytest.mark.django_db
def test_a_hung_node_and_endpoint_cost_healthz_one_budget(
    beat_ticked, settings, client_as
) -> None:
    """A node's admin API and an endpoint that accept connections and never
    answer (SIGSTOPped): the checks run at once, and /healthz answers within
    its budget naming both (it took 9 s, holding a web worker, helper-14)."""
    import socket

    silent = [socket.socket(), socket.socket()]
    for s in silent:
        s.bind(("127.0.0.1", 0))
        s.listen()
    try:
        settings.GRPC_LISTEN = f"127.0.0.1:{silent[0].getsockname()[1]}"
        settings.BROKER_ADMIN_URL = f"http://127.0.0.1:{silent[1].getsockname()[1]}"
        t = time.monotonic()
        body = client_as("viewer").get("/healthz").json()
        took = time.monotonic() - t
    finally:
        for s in silent:
            s.close()
    assert body["down"] == ["grpc", "store"], body
    assert took < health.CHECKS_BUDGET_S + 1.5, took
