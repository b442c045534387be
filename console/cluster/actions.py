"""The Cluster page's actions, each one operation of the node it names
(``NodeOperations``) and audited once.

A decision, an offset reset, a delayed message's cancel and a topic's
creation are the single-store pages' own services (``console/<app>/
services.py``) run on the node (``scope.showing``): one implementation, and
one audit object id, ``<node>/<object>`` (``console.audit.services.
audited``), whichever page acted. A promotion changes the node itself: its
object is the node, ``<name>:<broker id>``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from broker_core.cluster.node_ops import NodeUnavailableError
from console.audit.services import audited
from console.cluster.nodes import live_master, live_node, remote_node_ops
from console.cluster.scope import showing


def decide(node: str, transaction_id: str, verb: str, actor: Any, reason: str,
           request: Any = None) -> Any:  # fmt: skip
    """Commit, roll back or resume (a discarded half checked again) a half on
    the master of ``node`` that holds it: the Transactions pages' own action
    (``transactions.services.perform``) on that node, audited as there
    (object ``<node>/<transaction id>``). Raises ``NodeUnavailableError``
    without a live master, the node's ``BrokerError`` otherwise."""
    from console.transactions.services import perform

    if verb not in ("commit", "rollback", "resume"):
        raise ValueError(f"unknown decision {verb!r}")
    live_master(node)
    with showing(node):
        return perform(
            verb, actor=actor, transaction_id=transaction_id, reason=reason,
            request=request,
        )  # fmt: skip


def promote(node_key: str, role: str, actor: Any, reason: str, force: bool = False,
            request: Any = None) -> Any:  # fmt: skip
    """Make the slave ``node_key`` (``name:broker id``) a master (its
    ``promote`` operation), audited (object ``<name>:<id>``, type ``node``).
    The node refuses (``PromotionRefusedError``) while its master still
    heartbeats unless ``force``; its routes follow at its next heartbeat,
    which it sends at once."""
    target = live_node(node_key)
    if target.is_master:
        raise NodeUnavailableError(f"{node_key} is already a master ({target.role})")
    ops = remote_node_ops(target.admin)
    return audited(
        lambda: ops.promote(actor.get_username(), role, force),
        actor=actor,
        request=request,
        action="cluster.promote",
        object_type="node",
        object_id=target.key,
        reason=reason,
        before={"role": target.role, "force": force},
        after=lambda answer: answer,
    )


def put_topic(nodes: list[str], topic: str, queues: int, actor: Any,
              request: Any = None) -> dict[str, str]:  # fmt: skip
    """Create (or resize) ``topic`` with ``queues`` read and write queues on
    each named master: the Topics pages' own actions on each node, audited as
    there (``<node>/<topic>``). Returns node -> "created"/"updated" or the
    reason it failed."""
    from broker_core.errors import BrokerError, TopicExistsError
    from broker_core.metadata import PERM_READ, PERM_WRITE
    from console.topics import services as topics

    out: dict[str, str] = {}
    for name in nodes:
        try:
            live_master(name)
        except NodeUnavailableError as exc:
            out[name] = str(exc)
            continue
        with showing(name):
            try:
                try:
                    topics.create_topic(
                        actor=actor, name=topic, read_queue_nums=queues,
                        write_queue_nums=queues, perm=PERM_READ | PERM_WRITE,
                        message_type="NORMAL", request=request,
                    )  # fmt: skip
                    out[name] = "created"
                except TopicExistsError:
                    topics.update_topic(
                        actor=actor, name=topic, read_queue_nums=queues,
                        write_queue_nums=queues, request=request,
                    )  # fmt: skip
                    out[name] = "updated"
            except BrokerError as exc:
                out[name] = f"failed: {exc}"
    return out


def reset_offset(
    node: str,
    group: str,
    topic: str,
    *,
    actor: Any,
    reason: str,
    to_offset: int | None = None,
    to_ms: int | None = None,
    queue_id: int | None = None,
    request: Any = None,
) -> list[dict[str, Any]]:
    """Reset ``group``'s committed offsets on ``topic`` on the master of
    ``node`` to an offset or a time: the consumer group page's own reset
    (``consumers.services.reset_offsets``) on that node, audited as there
    (``<node>/<group>@<topic>``). Returns each queue's change (``queue_id``,
    ``current``, ``target``, ...)."""
    from console.consumers.services import reset_offsets

    live_master(node)
    with showing(node):
        made = reset_offsets(
            actor=actor, group=group, topic=topic, reason=reason,
            to_offset=to_offset, to_ms=to_ms, queue_id=queue_id, request=request,
        )  # fmt: skip
    return [asdict(c) for c in made]


def cancel_delayed(node: str, msg_id: str, *, actor: Any, reason: str,
                   request: Any = None) -> Any:  # fmt: skip
    """Cancel a delayed message on the master of ``node`` before it is
    delivered: the delay pages' own cancel (``delays.services.
    cancel_scheduled``) on that node, audited as there (``<node>/<id>``)."""
    from console.delays.services import cancel_scheduled

    live_master(node)
    with showing(node):
        return cancel_scheduled(
            actor=actor, msg_id=msg_id, reason=reason, request=request
        )
