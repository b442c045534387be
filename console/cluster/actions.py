"""The Cluster page's actions, each one operation of the node it names
(``NodeOperations``) and audited once.

A decision, an offset reset, a delayed message's cancel and a topic's
creation are the single-store pages' own services (``console/<app>/
services.py``) run on the node (``scope.showing``): one implementation, and
one audit object id, ``<node>/<object>`` (``console.audit.services.
node_object_id``), whichever page acted. The node is looked up within the
audited action (``showing(node, master=True)``: a master's operations, asked
when the service first asks the node), so a node that is not a live master
or does not answer is audited as the action failed. A promotion changes the
node itself: its object is the node, ``<name>:<broker id>``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from broker_core.errors import BrokerError, PromotionRefusedError
from console.audit.services import audited
from console.cluster.nodes import live_node, remote_node_ops
from console.cluster.scope import showing


def decide(node: str, transaction_id: str, verb: str, actor: Any, reason: str,
           request: Any = None) -> Any:  # fmt: skip
    """Commit, roll back or resume (a discarded half checked again) a half on
    the master of ``node`` that holds it: the Transactions pages' own action
    (``transactions.services.perform``) on that node, audited as there
    (object ``<node>/<transaction id>``). Raises ``NodeNotFoundError``
    without a live master, ``NodeUnavailableError`` when it does not answer,
    the node's ``BrokerError`` otherwise: each audited as failed."""
    from console.transactions.services import perform

    if verb not in ("commit", "rollback", "resume"):
        raise ValueError(f"unknown decision {verb!r}")
    with showing(node, master=True):
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
    which it sends at once. A key that is no live node, or a master, is
    refused within the audited action (audited as failed)."""
    found: dict[str, Any] = {}

    def before() -> dict[str, Any]:
        target = found["node"] = live_node(node_key)
        if target.is_master:
            raise PromotionRefusedError(
                f"{node_key} is already a master ({target.role})"
            )
        return {"role": target.role, "force": force}

    def run() -> Any:
        ops = remote_node_ops(found["node"].admin, node_key)
        return ops.promote(actor.get_username(), role, force)

    return audited(
        run,
        actor=actor,
        request=request,
        action="cluster.promote",
        object_type="node",
        object_id=node_key,
        reason=reason,
        before=before,
        after=lambda answer: answer,
        on_node=False,
    )


def put_topic(nodes: list[str], topic: str, queues: int, actor: Any,
              request: Any = None) -> dict[str, str]:  # fmt: skip
    """Create ``topic`` with ``queues`` read and write queues on each named
    master: the Topics pages' own action on each node, audited as there
    (``<node>/<topic>``). A topic that exists on a node is refused there
    (``TopicExistsError``, 409 ``topic_exists``, audited as failed), never
    resized: a change of queues is the topic page's edit. Returns node ->
    "created" or why it failed ("failed (409 topic_exists): ...")."""
    from broker_core.metadata import PERM_READ, PERM_WRITE
    from console.topics import services as topics

    out: dict[str, str] = {}
    for name in nodes:
        with showing(name, master=True):
            try:
                topics.create_topic(
                    actor=actor, name=topic, read_queue_nums=queues,
                    write_queue_nums=queues, perm=PERM_READ | PERM_WRITE,
                    message_type="NORMAL", request=request,
                )  # fmt: skip
                out[name] = "created"
            except BrokerError as exc:
                out[name] = failed(exc)
    return out


def failed(exc: BrokerError) -> str:
    """How a node's refusal is shown: "failed (409 topic_exists): topic
    'orders' already exists"."""
    from console.cluster.nodes import describe

    return f"failed ({exc.http_status} {exc.code}): {describe(exc)}"


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

    with showing(node, master=True):
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

    with showing(node, master=True):
        return cancel_scheduled(
            actor=actor, msg_id=msg_id, reason=reason, request=request
        )
