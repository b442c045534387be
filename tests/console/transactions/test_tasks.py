"""The transaction check beat task, run through Celery's task API on real Redis."""

from __future__ import annotations

import pytest

from broker_core import Message
from broker_core.transaction import CallableTransport, TransactionState
from console.brokerlink import get_transaction_service
from console.core.health import redis_client
from console.transactions.tasks import LOCK_KEY, run_check


@pytest.fixture
def svc(broker, settings):
    settings.TRANSACTION_OPTIONS = {"transaction_timeout_ms": 0}
    settings.TRANSACTION_CHECK_INTERVAL = 5.0
    redis_client().delete(LOCK_KEY)
    return get_transaction_service()


def test_task_checks_due_halves_and_returns_a_summary(svc):
    svc.checkers.set_default(CallableTransport(lambda req: "COMMIT"))
    r = svc.send_half("PID_orders", Message("orders", b"x"))
    summary = run_check.apply().get()
    assert summary["status"] == "COMPLETED"
    assert summary["checks_sent"] == 1 and summary["answers"] == {"COMMIT": 1}
    assert svc.state(r.transaction_id) is TransactionState.COMMITTED
    assert redis_client().get(LOCK_KEY) is None


def test_one_run_at_a_time_across_workers(svc):
    lock = redis_client().lock(LOCK_KEY, timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert run_check.apply().get() == {"status": "BUSY"}
    finally:
        lock.release()


def test_beat_schedules_the_check_with_an_expiry(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["transactions-run-check"]
    assert entry["task"] == "transactions.run_check"
    # expire_seconds: what the database scheduler keeps (test_beat_expiry.py)
    assert entry["options"]["expire_seconds"] == settings.TRANSACTION_CHECK_INTERVAL
    assert entry["schedule"].total_seconds() == settings.TRANSACTION_CHECK_INTERVAL
