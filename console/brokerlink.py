"""The console's one open broker store per process.

``get_broker()`` opens ``settings.BROKER_STORE_DIR`` on first use and returns
the same ``Broker`` afterwards; several processes (web workers, Celery
workers, the gRPC endpoint) may hold the store open at once. The store is
closed at process exit. A forked child opens its own (mapped files and locks
do not survive a fork), and a changed store directory (tests) reopens.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from broker_core import Broker

_lock = threading.Lock()
_broker: Broker | None = None
_key: tuple[int, str] | None = None


def _options() -> dict[str, Any]:
    """``Broker.open`` keyword arguments: flush mode plus BROKER_STORE_OPTIONS."""
    opts: dict[str, Any] = {"flush": getattr(settings, "BROKER_FLUSH", "async")}
    opts.update(getattr(settings, "BROKER_STORE_OPTIONS", {}) or {})
    return opts


def get_broker() -> Broker:
    """Return this process's open ``Broker`` over ``settings.BROKER_STORE_DIR``."""
    global _broker, _key
    key = (os.getpid(), str(Path(settings.BROKER_STORE_DIR).resolve()))
    broker = _broker
    if broker is not None and _key == key:
        return broker
    with _lock:
        if _broker is not None and _key == key:
            return _broker
        if _broker is not None and _key is not None and _key[0] == key[0]:
            _broker.close()
        # After a fork the parent's Broker is dropped, not closed: closing would
        # release locks and unmap files the parent still uses.
        _broker = Broker.open(key[1], **_options())
        _key = key
        return _broker


def close_broker() -> None:
    """Close the store if this process opened it; the next ``get_broker`` reopens."""
    global _broker, _key
    with _lock:
        if _broker is not None and _key is not None and _key[0] == os.getpid():
            _broker.close()
        _broker = None
        _key = None


atexit.register(close_broker)
