"""Celery per node: which node a timer task is for, and whether this worker
may run it.

With ``CLUSTER_NODES`` set (``broker-a,broker-b``), beat schedules the
transaction check and the delay delivery once per node, each on the queue
``node.<name>`` with ``node=<name>``; the worker on that node's host
(``BROKER_NODE=<name>``, ``celery worker -Q node.<name>``, its own
``BROKER_STORE_DIR``) takes them, so a slow node never delays another. A task
that reaches the wrong worker, or a node whose store is a slave (its master
runs them), is skipped and says why.
"""

from __future__ import annotations

from django.conf import settings


def queue(node: str) -> str:
    return f"node.{node}"


def skip_reason(node: str | None) -> str | None:
    """Why this worker must not run a timer task for ``node``, or None."""
    here = getattr(settings, "BROKER_NODE", "")
    if node and here and node != here:
        return f"the task is for {node}; this worker serves {here}"
    if node and not here:
        return f"the task is for {node}; this worker has no BROKER_NODE"
    from broker_core.ha.role import is_slave

    if is_slave(settings.BROKER_STORE_DIR):
        return "this node's store is a slave: its master runs the timers"
    return None


def lock_key(base: str, node: str | None) -> str:
    """A per-node lock: nodes' runs must not wait for each other."""
    return f"{base}:{node}" if node else base
