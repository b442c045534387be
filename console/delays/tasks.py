"""The delivery tick of delayed messages, run by Celery beat every DELAY_TICK_INTERVAL.

Each run delivers for one tick window, sleeping until each due time inside it,
so consecutive runs cover time without gaps. A Redis lock keeps runs from
overlapping: a run waits for the previous one to finish (up to a tick and a
second) rather than skip its window, which would leave a gap of a whole tick.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings
from redis.exceptions import LockError

from console.brokerlink import get_delay_service
from console.core import nodes
from console.core.health import redis_client

LOCK_KEY = "delays:deliver_due"


@shared_task(name="delays.deliver_due")
def deliver_due(node: str | None = None) -> dict[str, Any]:
    """Deliver every delayed message that falls due during this tick window
    (on ``node``'s store: ``console.core.nodes``)."""
    why = nodes.skip_reason(node)
    if why:
        return {"skipped": True, "why": why}
    interval = float(settings.DELAY_TICK_INTERVAL)
    lock = redis_client().lock(
        nodes.lock_key(LOCK_KEY, node),
        timeout=interval * 3 + 10,
        blocking_timeout=interval + 1,
    )
    if not lock.acquire():
        return {"skipped": True}
    try:
        res = get_delay_service().deliver_due(budget_s=max(0.0, interval - 0.02))
    finally:
        try:
            lock.release()
        except LockError:  # expired meanwhile: nothing left to release
            pass
    return {
        "delivered": res.delivered,
        "failures": res.failures,
        "next_due_ms": res.next_due_ms,
    }
