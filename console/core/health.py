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
    """The endpoint answers HTTP/2: its server's own handshake completes (a
    TCP connect alone succeeds against a hung or stopped process, whose
    kernel still accepts connections)."""
    import grpc

    host, _, port = settings.GRPC_LISTEN.rpartition(":")
    target = f"{host.strip('[]')}:{port}"
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        pass
    # A connection of its own: a shared one, made while the endpoint was
    # well, would read READY however hung it is now.
    channel = grpc.insecure_channel(
        target, options=[("grpc.use_local_subchannel_pool", 1)]
    )
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise RuntimeError(
            f"the endpoint at {target} accepts connections but does not answer "
            f"within {timeout:g} s (hung or stopped?)"
        ) from None
    finally:
        channel.close()
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


#: How long /healthz waits for all its checks together (they run at once):
#: a hung node or endpoint made one answer take 9 s, holding a web worker.
CHECKS_BUDGET_S = 3.0

_pool = None


def _run(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return {"status": "up", **check()}
    except Exception as exc:  # noqa: BLE001 - any failure means "down"
        return {"status": "down", "error": str(exc) or type(exc).__name__}


def run_checks() -> tuple[bool, dict[str, Any]]:
    """Run every check at once (the database's in this thread, the others on
    a small pool); return (all up, per-component state). A check with no
    answer within ``CHECKS_BUDGET_S`` is down ("no answer")."""
    import concurrent.futures as cf

    global _pool
    if _pool is None:
        _pool = cf.ThreadPoolExecutor(8, thread_name_prefix="healthz")
    todo = checks()
    futures = {
        name: _pool.submit(_run, check)
        for name, check in todo.items()
        if name != "database"
    }
    components: dict[str, Any] = {}
    if "database" in todo:
        components["database"] = _run(todo["database"])
    deadline = time.monotonic() + CHECKS_BUDGET_S
    for name, fut in futures.items():
        try:
            components[name] = fut.result(max(0.0, deadline - time.monotonic()))
        except cf.TimeoutError:
            components[name] = {
                "status": "down",
                "error": f"no answer within {CHECKS_BUDGET_S:g} s",
            }
    components = {name: components[name] for name in todo}  # in order
    healthy = all(c["status"] == "up" for c in components.values())
    return healthy, components
