"""The Cluster page's message search: one node, or every broker's serving
node at once, through each node's ``search_messages``; bodies are not
shown (the results link to the message's own page)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker_core import browse
from broker_core.cluster.node_ops import NodeOperations, NodeUnavailableError
from broker_core.errors import BrokerError
from broker_core.search import MessageQuery
from console.cluster.nodes import ask_nodes, describe, live_node, ops_of, registry

#: ``search_node``'s node for "every broker" (its serving node each).
EVERY_NODE = "*"


@dataclass
class NodeSearch:
    """What one node found: its messages (each with ``node``), or why none."""

    node: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: the node's reason when it found nothing (an unknown id or topic)
    note: str = ""


def _search(ops: NodeOperations, topic: str, key: str, msg_id: str, limit: int
            ) -> list[dict[str, Any]]:  # fmt: skip
    """The page's search on one node: by message id, or by key in ``topic``
    (every topic without one), or the newest of ``topic``; rows without
    bodies. Raises ``ValidationError`` when none is given, the node's
    ``TopicNotFoundError`` for a topic it lacks."""
    if not (topic or key or msg_id):
        from broker_core.errors import ValidationError

        raise ValidationError("give a topic, a key or a message id")
    query = MessageQuery(topic=topic or None, key=key or None, msg_id=msg_id or None)
    page = ops.search_messages(query, limit, None, browse.SEARCH_SCAN_BUDGET)
    return [browse.message_json(m, 0) for m in page.messages]


def _not_found(exc: BrokerError) -> bool:
    """A node's "no such topic or message": nothing found there, not a fault."""
    return exc.http_status == 404 and not isinstance(exc, NodeUnavailableError)


def search_every_node(
    *, topic: str = "", key: str = "", msg_id: str = "", limit: int = 50
) -> NodeSearch:
    """Search every broker's serving node (its master, or its slave while the
    master is away) at once, as ``search_node`` searches one: a message is
    found wherever it is stored without the operator knowing the node. A node
    that does not answer is named in ``note``; one without the topic is not."""
    try:
        serving = registry().serving()
    except Exception as exc:  # noqa: BLE001 - redis errors, a bad URL
        raise NodeUnavailableError(f"route registry: {exc}") from exc

    def read(ops: NodeOperations) -> Any:
        return _search(ops, topic, key, msg_id, limit)

    got = ask_nodes({n.key: (n.admin, {"search_messages": read})
                     for n in serving.values()})  # fmt: skip
    found = NodeSearch("every node")
    notes = []
    for n in sorted(serving.values(), key=lambda n: n.name):
        answer = got.get(n.key)
        if isinstance(answer, dict):
            answer = answer.get("search_messages")
        if isinstance(answer, BrokerError):
            if isinstance(answer, NodeUnavailableError):
                notes.append(describe(answer))  # names the node
            elif not _not_found(answer):
                notes.append(f"{n.key}: {answer}")
            continue
        found.messages += [{"node": n.name, "node_key": n.key, **m}
                           for m in answer or ()]  # fmt: skip
    found.messages.sort(key=lambda m: -int(m.get("store_timestamp") or 0))
    found.messages = found.messages[:limit]
    found.note = "; ".join(notes)
    return found


def search_node(
    node: str, *, topic: str = "", key: str = "", msg_id: str = "", limit: int = 50
) -> NodeSearch:
    """Search one live node, master or slave (``name:broker_id``), by message
    id, or by key in ``topic``, or the newest of ``topic``. Raises
    ``NodeUnavailableError`` when the node does not answer, the node's
    ``BrokerError`` when it refuses the query; a topic or message it does
    not have is a ``note``."""
    target = live_node(node)
    found = NodeSearch(target.key)
    try:
        rows = _search(ops_of(target.key), topic, key, msg_id, limit)
    except BrokerError as exc:
        if not _not_found(exc):
            raise
        found.note = str(exc)
        return found
    found.messages = [{"node": target.name, "node_key": target.key, **m} for m in rows]
    if msg_id and not rows:
        found.note = f"msg_id: no message {msg_id!r} on this node"
    return found
