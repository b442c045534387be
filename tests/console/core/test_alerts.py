"""The health banner's checks, each against the real thing it watches."""

from __future__ import annotations

import socket

import pytest

from console.core.alerts import current_alerts
from tests.support import skip_by_design

pytestmark = pytest.mark.django_db


def _titles() -> list[str]:
    return [a.title for a in current_alerts()]


def test_redis_down_and_a_nearly_full_disk_are_on_every_page(
    settings, client_as, broker
) -> None:
    if settings.BROKER_ADMIN_URL:
        skip_by_design(
            "the node's own disk limit applies through its admin API "
            "(tests/console/core/test_node_ops.py)"
        )
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    settings.BROKER_STORE_OPTIONS = {"disk_space_warning_ratio": 0.0001}
    assert "Redis is unreachable" in _titles()
    assert any(t.startswith("The store's disk is") for t in _titles())
    page = client_as("viewer").get("/topics/").content.decode()
    assert 'data-testid="health-banner"' in page and "Redis is unreachable" in page
    settings.BROKER_STORE_OPTIONS = {"disk_space_warning_ratio": 1.0}
    assert not any(t.startswith("The store's disk is") for t in _titles())


def test_stuck_halves_are_announced(settings, broker) -> None:
    import time

    from broker_core import Message
    from broker_core.transaction import CheckAnswer
    from console.core.alerts import reset_cache
    from console.core.health import redis_client
    from console.transactions.services import STUCK_KEY, get_transaction_service
    from console.transactions.tasks import run_check

    redis_client().delete(STUCK_KEY)
    settings.TRANSACTION_STUCK_CHECKS = 3
    svc = get_transaction_service()
    h = svc.send_half("pg", Message("Orders", b"x"))
    run_check()  # the periodic check publishes the counts the banner shows
    assert not any("stuck" in t for t in _titles())
    half = svc.locate(h.transaction_id)
    for _ in range(3):  # three checks nobody answered
        now = int(time.time() * 1000)
        svc.record_check(half, CheckAnswer.FAILED, "grpc", "-", now, 0, "no producer")
    reset_cache()
    # Pages never count: until the next periodic check, the banner says nothing.
    assert not any("stuck" in t for t in _titles())
    run_check()
    reset_cache()
    (alert,) = [a for a in current_alerts() if "stuck" in a.title]
    assert alert.title == "1 half messages are stuck"
    assert "checked 3 times or more" in alert.meaning
    assert "counted by the transaction check at" in alert.meaning
    redis_client().delete(STUCK_KEY)


def test_the_banner_names_a_stopped_worker_not_beat_nor_a_backlog(settings) -> None:
    import time

    from console.core.alerts import reset_cache
    from console.core.health import redis_client
    from console.core.liveness import BEAT_ALIVE_KEY, WORKER_KEY_PREFIX

    r = redis_client()
    worker = WORKER_KEY_PREFIX + "w@test"
    r.delete("timers", worker)
    r.set(BEAT_ALIVE_KEY, time.time())
    r.rpush("timers", *[b"{}"] * 30)  # ticks nobody takes
    try:
        reset_cache()
        titles = _titles()
        assert "The timers worker is not running" in titles
        assert "Celery beat is not running" not in titles
        assert not any("backlog" in t for t in titles)
        r.set(worker, '{"queues": ["timers", "celery"]}', ex=60)
        reset_cache()
        titles = _titles()
        assert "The timers worker is not running" not in titles
        assert "The timers queue has a backlog" in titles  # a live, busy worker
        r.set(BEAT_ALIVE_KEY, time.time() - 3600)
        reset_cache()
        assert "Celery beat is not running" in _titles()
    finally:
        r.delete("timers", worker, BEAT_ALIVE_KEY)
        reset_cache()
