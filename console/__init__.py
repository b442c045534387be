"""The operations console: a Django project whose apps live in sub-packages."""

from .celery import app as celery_app

__all__ = ("celery_app",)
