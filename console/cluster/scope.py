"""Whose store a request shows: the node picked for it (``picker``), "" for
the console's own. Kept apart from the picker's views so that models can use
it (``NodeScopedManager``) without importing views."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import models

_chosen: ContextVar[str] = ContextVar("console_node", default="")


def enabled() -> bool:
    return bool(getattr(settings, "BROKER_CLUSTER", ""))


def chosen_node() -> str:
    """The node picked for this request ("": none)."""
    return _chosen.get()


@contextmanager
def showing(node: str) -> Iterator[None]:
    """Within: the request shows ``node``'s store ("": the console's own)."""
    token = _chosen.set(node)
    try:
        yield
    finally:
        _chosen.reset(token)


def store_key() -> str:
    """Whose store this request shows, as the console's tables of topics and
    consumer offsets key their rows: the picked node, "" for the console's
    own store (or ``BROKER_ADMIN_URL``'s node)."""
    return _chosen.get()


class NodeScopedManager(models.Manager):  # type: ignore[type-arg]
    """``objects`` of a table that caches one store's figures (topics, consumer
    offsets): only the rows of the store this request shows (``store_key``).
    Rows are written with ``node=store_key()``."""

    def get_queryset(self) -> models.QuerySet:  # type: ignore[type-arg]
        return super().get_queryset().filter(node=store_key())
