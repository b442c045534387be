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
from broker_core.cluster.node_ops import NodeOperations, NodeOps

_lock = threading.Lock()
_broker: Broker | None = None
_key: tuple[int, str] | None = None
_services: dict[str, Any] = {}


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
            _close_services()
            _broker.close()
        _services.clear()
        # After a fork the parent's Broker is dropped, not closed: closing would
        # release locks and unmap files the parent still uses.
        _broker = Broker.open(key[1], **_options())
        # Every sending process must park DELAY and timer sends, whichever
        # service it later uses: install the schedule hook with the store.
        from broker_core.schedule import install_send_hook

        install_send_hook(_broker)
        _key = key
        return _broker


def get_delay_service() -> Any:
    """Return this process's ``DelayService`` over ``get_broker()``.

    Creating it installs the send hook that parks ``DELAY`` and timer sends, so
    a test message with a delay level is scheduled, not delivered at once.
    Delivery itself is left to the scheduled task (``deliver_due``).
    """
    broker = get_broker()
    with _lock:
        service = _services.get("delay")
        if service is None or service.broker is not broker:
            from broker_core.schedule import DelayService

            service = _services["delay"] = DelayService(broker)
        return service


def get_transaction_service() -> Any:
    """Return this process's ``TransactionService`` over ``get_broker()``.

    Settings: ``TRANSACTION_OPTIONS`` (``TransactionConfig`` fields). The check
    itself runs in the scheduled task; the console only queries and resolves.
    """
    broker = get_broker()
    with _lock:
        service = _services.get("transaction")
        if service is None or service.broker is not broker:
            from broker_core.transaction import TransactionService

            options = getattr(settings, "TRANSACTION_OPTIONS", {}) or {}
            service = _services["transaction"] = TransactionService(broker, **options)
        return service


def local_node_ops() -> NodeOps:
    """The console's operations over the store this process opens
    (``settings.BROKER_STORE_DIR``)."""
    return NodeOps(
        get_broker,
        get_transaction_service,
        get_delay_service,
        NodeOps.clients_file(settings.BROKER_STORE_DIR),
    )


def node_ops() -> NodeOperations:
    """The operations of the node whose store the console's pages show.

    On a cluster, the node the operator picked for this request
    (``console.cluster.picker``). Else, with ``BROKER_ADMIN_URL`` set, that
    node's admin API
    (``RemoteNodeOps``, its token in ``CLUSTER_ADMIN_TOKEN_FILE``): the
    console opens no store file. Without it, the store at
    ``BROKER_STORE_DIR``, opened here. The pages cannot tell the difference.
    """
    from console.cluster.picker import node_ops_of
    from console.cluster.scope import chosen_node

    node = chosen_node()
    if node:
        return node_ops_of(node)
    url = getattr(settings, "BROKER_ADMIN_URL", "")
    if not url:
        return local_node_ops()
    from console.cluster.nodes import remote_node_ops
    from console.cluster.scope import own_node

    return remote_node_ops(url, own_node())


def _close_services() -> None:
    for service in _services.values():
        close = getattr(service, "close", None)
        if close is not None:
            close()
    _services.clear()


def close_broker() -> None:
    """Close the store if this process opened it; the next ``get_broker`` reopens."""
    global _broker, _key
    with _lock:
        if _broker is not None and _key is not None and _key[0] == os.getpid():
            _close_services()
            _broker.close()
        _services.clear()
        _broker = None
        _key = None


atexit.register(close_broker)
