"""The Celery application: Redis as its broker, tasks found in console apps."""

import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging

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
