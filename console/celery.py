"""The Celery application: Redis as its broker, tasks found in console apps."""

import os
from typing import Any

from celery import Celery
from celery.signals import (
    setup_logging,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def use_django_logging(**kwargs: Any) -> None:
    """Log through Django's LOGGING (one JSON line per event), not Celery's."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_process_shutdown.connect
def close_store(**kwargs: Any) -> None:
    """Close this pool process's store before it exits.

    Pool processes leave with ``os._exit``, which skips ``atexit``: without
    this, a stop of the whole system would leave the store marked as not shut
    down cleanly and the next start would run an abnormal recovery.
    """
    from console.brokerlink import close_broker

    close_broker()


@worker_ready.connect
def say_alive(sender: Any = None, **kwargs: Any) -> None:
    """Beat of this worker for /healthz and the banner (``core.liveness``)."""
    from console.core.liveness import on_worker_ready

    on_worker_ready(sender, **kwargs)


@worker_shutdown.connect
def stop_saying_alive(**kwargs: Any) -> None:
    from console.core.liveness import on_worker_shutdown

    on_worker_shutdown(**kwargs)
