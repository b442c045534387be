"""Who is alive among the background processes, each told apart.

Beat and the timers worker are separate processes that fail separately: the
heartbeat task (``core.beat_heartbeat``) proves only that the two together
work, so it cannot say which one stopped. Here each proves itself:

* beat: the scheduler the console runs (``BeatScheduler``) writes
  ``BEAT_ALIVE_KEY`` on every tick of its loop (at most once a second);
* a worker: a thread started when the worker is ready writes
  ``WORKER_KEY_PREFIX + hostname`` with the queues it consumes every
  ``WORKER_BEAT_S`` seconds, with a time to live of three beats; the key goes
  when the worker stops or dies.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler

log = logging.getLogger(__name__)

BEAT_ALIVE_KEY = "console:beat:alive"
WORKER_KEY_PREFIX = "console:worker:alive:"
WORKER_BEAT_S = 2.0


def _redis() -> Any:
    from console.core.health import redis_client

    return redis_client()


class BeatScheduler(DatabaseScheduler):
    """django-celery-beat's database scheduler that says it is alive."""

    _alive_at = 0.0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = time.time()
        if now - self._alive_at >= 1.0:
            try:
                _redis().set(BEAT_ALIVE_KEY, now, ex=3600)
                self._alive_at = now
            except Exception as exc:  # noqa: BLE001 - Redis down: health says so
                log.debug("beat liveness not written: %s", exc)
        result: float = super().tick(*args, **kwargs)
        return min(result, 1.0)


def beat_age() -> float | None:
    """Seconds since beat last ticked (None: never)."""
    raw = _redis().get(BEAT_ALIVE_KEY)
    return None if raw is None else time.time() - float(raw)


def live_workers() -> dict[str, list[str]]:
    """The live workers: hostname -> the queues each consumes."""
    r = _redis()
    out: dict[str, list[str]] = {}
    for key in r.scan_iter(match=WORKER_KEY_PREFIX + "*", count=100):
        raw = r.get(key)
        if raw is None:
            continue
        name = key.decode()[len(WORKER_KEY_PREFIX) :]
        out[name] = list(json.loads(raw).get("queues", []))
    return out


def timers_workers() -> list[str]:
    """Live workers that run timer ticks: the ``timers`` queue, or a node's
    own queue (``node.<name>``) in a cluster."""
    return sorted(
        name
        for name, queues in live_workers().items()
        if any(q == "timers" or q.startswith("node.") for q in queues)
    )


class WorkerBeat:
    """The worker side: one thread per worker process (the main one)."""

    def __init__(self, hostname: str, queues: list[str]) -> None:
        self.key = WORKER_KEY_PREFIX + hostname
        self.value = json.dumps({"queues": queues})
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, daemon=True, name="worker-liveness"
        )

    def start(self) -> WorkerBeat:
        self.thread.start()
        return self

    def _run(self) -> None:
        while True:
            try:
                _redis().set(self.key, self.value, ex=int(3 * WORKER_BEAT_S))
            except Exception as exc:  # noqa: BLE001 - Redis down: retry
                log.debug("worker liveness not written: %s", exc)
            if self.stop.wait(WORKER_BEAT_S):
                break
        try:
            _redis().delete(self.key)
        except Exception:  # noqa: BLE001 - expires by itself
            pass


_beat: WorkerBeat | None = None


def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    global _beat
    try:
        hostname = str(sender.hostname)
        queues = sorted(sender.app.amqp.queues.consume_from)
    except AttributeError:
        return
    _beat = WorkerBeat(hostname, queues).start()


def on_worker_shutdown(**kwargs: Any) -> None:
    if _beat is not None:
        _beat.stop.set()
        _beat.thread.join(timeout=2)
