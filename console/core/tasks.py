"""Housekeeping tasks run by Celery beat."""

import time

from celery import shared_task

from console.core.health import BEAT_KEY, redis_client


@shared_task(name="core.beat_heartbeat")
def beat_heartbeat() -> float:
    """Record that beat scheduled and a worker ran a task just now."""
    now = time.time()
    redis_client().set(BEAT_KEY, now, ex=3600)
    return now
