"""One node of the cluster as its page shows it: status and replication, the
endpoint's counters, topics, clients, consumer lag per queue, delay levels
and pending halves, every read of its operations asked at once
(``nodes.ask_nodes``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import BrokerError
from broker_core.metadata import PERM_READ, PERM_WRITE
from console.cluster.nodes import Read, ask_nodes, describe, find
from console.cluster.state import (
    NodeView,
    delay_rows,
    failure_sentence,
    plain,
    take_failures,
)

#: What the page asks every node, and a master besides: a slave's delay
#: progress and halves are its master's copies, delivered and decided there.
#: A node none of whose reads answers is shown as not answering; one whose
#: status alone fails shows the rest.
NODE_READS: dict[str, Read] = {
    "node_status": lambda ops: ops.node_status(),
    "topics_with_depths": lambda ops: ops.topics_with_depths(),
    "clients": lambda ops: ops.clients(),
    "consumer_lag": lambda ops: ops.consumer_lag(),
}
MASTER_READS: dict[str, Read] = {
    "delay_stats": lambda ops: ops.delay_stats(),
    # One row is enough: a state-only filter counts its total exactly.
    "pending halves": lambda ops: ops.list_halves(state="PENDING", page_size=1),
}

#: The endpoint counters of ``node_status``: key, label, what it counts.
COUNTERS = [
    ("sent", "Messages sent", "stored from producers' SendMessage calls"),
    ("received", "Messages received", "handed to consumers by ReceiveMessage"),
    ("acked", "Messages acked", "acknowledged by consumers"),
    ("checks_sent", "Transaction checks sent", "asked of producers for a half"),
    ("retries_deduplicated", "Retries deduplicated",
     "resent by a client and stored once"),
    ("send_jobs", "Send jobs",
     "batches of sends stored on the writer thread: sends that found the log busy"),
    ("ack_jobs", "Ack jobs",
     "batches of acks on the consumer thread: acks that found the pop state busy"),
    ("send_loop_batches", "Send batches",
     "appends of the sends that arrived together (one per event-loop turn)"),
    ("ack_loop_batches", "Ack batches",
     "pop-state transactions of the acks that arrived together"),
]  # fmt: skip

#: Each section of the page and the read it comes from.
SECTIONS = {
    "status": "node_status",
    "topics": "topics_with_depths",
    "clients": "clients",
    "lag": "consumer_lag",
    "delays": "delay_stats",
    "halves": "pending halves",
}


@dataclass
class NodeDetail:
    """What the page of one node shows."""

    node: NodeView
    #: how long ago the node last heartbeated to the registry
    heartbeat_age_ms: int = 0
    #: a slave's master (its HA address) as the node reports it
    master: str = ""
    #: the node's last failure to heartbeat to the route registry
    registry_error: str = ""
    #: the node's version, Python, messages stored per second over the last
    #: minute and disk (``broker_core.cluster.node_ops.store_runtime``); empty
    #: when its status did not answer or an older node does not say
    runtime: dict[str, Any] = field(default_factory=dict)
    #: ``label``, ``help``, ``key``, ``value`` (None: not reported)
    counters: list[dict[str, Any]] = field(default_factory=list)
    #: ``topic``, ``read_queues``, ``write_queues``, ``perm``, ``depth``
    topics: list[dict[str, Any]] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)
    #: per group, topic and queue: committed offset, queue end, lag
    lag: list[dict[str, Any]] = field(default_factory=list)
    delays: list[dict[str, Any]] = field(default_factory=list)
    #: the master's pending halves (None: a slave, or not answered)
    pending_halves: int | None = None
    #: the controller's view (``leading``, ``term``, ``lease_left_s``,
    #: ``error``; None: no controller)
    controller: dict[str, Any] | None = None
    #: the tails it cut on rejoining as a slave (ASYNC loss), newest first
    cut_tails: list[dict[str, Any]] = field(default_factory=list)
    #: section -> why it is missing (its read did not answer or failed)
    missing: dict[str, str] = field(default_factory=dict)
    #: what did not answer, as sentences for the page
    errors: list[str] = field(default_factory=list)


def parse_key(key: str) -> tuple[str, int] | None:
    """``name:broker_id`` -> (name, id); None for anything else."""
    name, sep, bid = key.rpartition(":")
    if not sep or not name or not bid.isdigit():
        return None
    return name, int(bid)


def node_detail(key: str) -> NodeDetail | None:
    """The live node ``key`` (``name:broker_id``) and what its operations
    answer, every read at once; None when the registry has no such node.
    Raises ``NodeUnavailableError`` when the registry does not answer."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    info = find(*parsed)
    if info is None:
        return None
    view = NodeView.of(info)
    reads = NODE_READS | (MASTER_READS if view.is_master else {})
    got = ask_nodes({view.key: (info.admin, reads)}, status_first=False)[view.key]
    detail = NodeDetail(view)
    detail.heartbeat_age_ms = max(0, int(time.time() * 1000) - info.heartbeat_ms)
    assert isinstance(got, dict)  # with status_first=False, always per read
    if all(isinstance(got[r], BrokerError) for r in reads):
        view.error = describe(got["node_status"])
        detail.errors.append(view.error)
        detail.missing = {s: view.error for s, r in SECTIONS.items() if r in reads}
        return detail
    for read, exc in take_failures(got).items():
        detail.errors.append(failure_sentence(view.key, read, exc))
        for section, r in SECTIONS.items():
            if r == read:
                detail.missing[section] = describe(exc)
    if "status" not in detail.missing:
        _status(detail, got["node_status"])
    detail.topics = _topic_rows(got.get("topics_with_depths"))
    detail.clients = sorted(
        got.get("clients") or (),
        key=lambda c: (not c.get("online"), c.get("group") or "", c["client_id"]),
    )
    detail.lag = sorted(
        (plain(q) for q in got.get("consumer_lag") or ()),
        key=lambda q: (q["group"], q["topic"], q["queue_id"]),
    )
    detail.delays = delay_rows(view.name, got.get("delay_stats"))
    if view.is_master and "halves" not in detail.missing:
        detail.pending_halves = got["pending halves"].total
    return detail


def _status(detail: NodeDetail, status: dict[str, Any]) -> None:
    """Fill the node's replication, registry error and counters from its
    ``node_status``."""
    following = detail.node.take_status(status)
    detail.master = following.get("master") or ""
    detail.registry_error = status.get("registry_error") or ""
    detail.controller = status.get("controller") or None
    detail.cut_tails = list(status.get("cut_tails") or [])
    detail.runtime = dict(status.get("runtime") or {})
    counters = status.get("counters") or {}
    detail.counters = [
        {"key": key, "label": label, "help": help_, "value": counters.get(key)}
        for key, label, help_ in COUNTERS
    ]


def _topic_rows(topics: Any) -> list[dict[str, Any]]:
    """A node's ``topics_with_depths``, each topic's queue depths summed."""
    rows = []
    for cfg, depths in topics or ():
        perm = cfg.perm or 0
        rows.append(
            {
                "topic": cfg.topic_name,
                "read_queues": cfg.read_queue_nums,
                "write_queues": cfg.write_queue_nums,
                "perm": ("R" if perm & PERM_READ else "-")
                + ("W" if perm & PERM_WRITE else "-"),
                "depth": sum(depths),
            }
        )
    return sorted(rows, key=lambda r: r["topic"])
