"""The transaction check, run by Celery beat every TRANSACTION_CHECK_INTERVAL seconds.

Thin: a Redis lock keeps one run at a time across workers (the store's own
check lock backs it up across hosts sharing nothing but the store), then
``TransactionService.run_check`` does the work within a budget shorter than the
interval, so a run ends before the next is scheduled. Each run then publishes
the stuck-half counts the health banner shows.
"""

from __future__ import annotations

import importlib
from typing import Any

from celery import shared_task
from django.conf import settings
from redis.exceptions import LockError

from console.brokerlink import get_transaction_service
from console.core import nodes
from console.core.health import redis_client
from console.transactions.services import publish_stuck_counts

LOCK_KEY = "transactions:run_check"


@shared_task(name="transactions.run_check")
def run_check(node: str | None = None) -> dict[str, Any]:
    """Check back the half messages that are due (on ``node``'s store:
    ``console.core.nodes``); return the run's summary."""
    why = nodes.skip_reason(node)
    if why:
        return {"status": "SKIPPED", "why": why}
    interval = float(settings.TRANSACTION_CHECK_INTERVAL)
    budget = max(1.0, interval * 0.8)
    lock = redis_client().lock(
        nodes.lock_key(LOCK_KEY, node), timeout=budget + 30, blocking=False
    )
    if not lock.acquire():
        return {"status": "BUSY"}
    try:
        # Modules that register extra check-back transports (the gRPC checker).
        # Those with an ``install`` hook put the live producers first (the
        # endpoint's relay), before each group's own checker (its webhook).
        service = get_transaction_service()
        for name in getattr(settings, "TRANSACTION_TRANSPORT_MODULES", ()):
            module = importlib.import_module(name)
            install = getattr(module, "install", None)
            if install is not None:
                install(service, settings.REDIS_URL)
        result = service.run_check(time_budget_s=budget)
        # The health banner shows these; counting here keeps it off page requests.
        service.refresh_index(2.0)
        publish_stuck_counts(redis_client())
    finally:
        try:
            lock.release()
        except LockError:  # expired meanwhile: nothing left to release
            pass
    return result.as_dict()


@shared_task(name="transactions.sample", ignore_result=True)
def sample() -> None:
    """Sample the transaction counters for the overview's per-minute charts,
    by the clock rather than whenever someone opens the page."""
    from console.transactions.services import sample_metrics

    sample_metrics()
