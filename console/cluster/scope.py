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
_master: ContextVar[bool] = ContextVar("console_node_master", default=False)

#: The name of the console's own node on a single host with no
#: ``BROKER_NODE`` (audit object ids ``local/<object>``).
LOCAL_NODE = "local"


def enabled() -> bool:
    return bool(getattr(settings, "BROKER_CLUSTER", ""))


def chosen_node() -> str:
    """The node picked for this request ("": none)."""
    return _chosen.get()


def own_node() -> str:
    """The name of the console's own node, the one whose store the pages
    show when no node is picked (``BROKER_ADMIN_URL``'s node or the store at
    ``BROKER_STORE_DIR``): ``BROKER_NODE`` (``broker-a``), else ``local``."""
    return str(getattr(settings, "BROKER_NODE", "") or LOCAL_NODE)


def acting_node() -> str:
    """The node whose store this request acts on, as audit ids name it: the
    picked node (``broker-b``, a slave ``broker-a:1``; ``broker-b:0`` is
    ``broker-b``), else the console's own (``own_node``)."""
    node = _chosen.get()
    if not node:
        return own_node()
    return node.removesuffix(":0") if node.count(":") == 1 else node


def master_required() -> bool:
    """Within ``showing(node, master=True)``: the node must be a master."""
    return _master.get()


@contextmanager
def showing(node: str, master: bool = False) -> Iterator[None]:
    """Within: the request shows ``node``'s store ("": the console's own);
    ``master``: its operations are refused unless ``node`` is a live master
    (the Cluster page's actions), when they are first asked, so that the
    refusal is the action's own (audited as failed)."""
    token = _chosen.set(node)
    mtoken = _master.set(master)
    try:
        yield
    finally:
        _master.reset(mtoken)
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
