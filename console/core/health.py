"""Component checks behind ``/healthz``."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import connection

BEAT_KEY = "console:beat:last_tick"


def beat_stale_after() -> float:
    """Seconds without a heartbeat before beat (or the worker running its
    heartbeat) counts as down: three missed ticks and a half (35 s at 10 s)."""
    return 3.5 * float(settings.BEAT_HEARTBEAT_INTERVAL)


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"vendor": connection.vendor}


def check_redis() -> dict[str, Any]:
    redis_client().ping()
    return {"url": settings.REDIS_URL.split("@")[-1]}


def check_store() -> dict[str, Any]:
    if getattr(settings, "BROKER_ADMIN_URL", ""):
        # The console's store is a node's: its admin API answers for it.
        from console.brokerlink import node_ops

        status = node_ops().store_status()
        return {"node": settings.BROKER_ADMIN_URL, "path": status["path"]}
    path = settings.BROKER_STORE_DIR
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise RuntimeError(f"{path} is not writable")
    return {"path": str(path)}


def check_beat() -> dict[str, Any]:
    """Beat itself: its scheduler writes a key on every tick (``liveness``)."""
    from console.core.liveness import beat_age

    age = beat_age()
    if age is None:
        raise RuntimeError("beat has never ticked")
    if age > beat_stale_after():
        raise RuntimeError(f"beat last ticked {age:.0f}s ago")
    return {"last_tick_age_s": round(age, 1)}


def check_worker() -> dict[str, Any]:
    """A worker that runs the timer ticks (the ``timers`` queue, or a node's
    queue in a cluster) is alive; and the last heartbeat task it ran."""
    from console.core.liveness import timers_workers

    workers = timers_workers()
    raw = redis_client().get(BEAT_KEY)
    ran = None if raw is None else round(time.time() - float(raw), 1)
    if not workers:
        since = "never" if ran is None else f"{ran:.0f}s ago"
        raise RuntimeError(
            f"no worker serves the timers queue (last heartbeat task ran {since})"
        )
    return {"workers": workers, "last_heartbeat_task_age_s": ran}


def check_grpc(timeout: float = 2.0) -> dict[str, Any]:
    host, _, port = settings.GRPC_LISTEN.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        pass
    return {"listen": settings.GRPC_LISTEN}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "database": check_database,
    "redis": check_redis,
    "store": check_store,
    "beat": check_beat,
    "worker": check_worker,
    "grpc": check_grpc,
}


def checks() -> dict[str, Callable[[], dict[str, Any]]]:
    """The checks of this host: without ``GRPC_LISTEN`` (a console-only host
    of a cluster, whose nodes run elsewhere) there is no endpoint to check."""
    if not settings.GRPC_LISTEN:
        return {k: v for k, v in CHECKS.items() if k != "grpc"}
    return CHECKS


def run_checks() -> tuple[bool, dict[str, Any]]:
    """Run every check; return (all up, per-component state)."""
    components: dict[str, Any] = {}
    for name, check in checks().items():
        try:
            components[name] = {"status": "up", **check()}
        except Exception as exc:  # noqa: BLE001 - any failure means "down"
            components[name] = {
                "status": "down",
                "error": str(exc) or type(exc).__name__,
            }
    healthy = all(c["status"] == "up" for c in components.values())
    return healthy, components
