"""What the Cluster page shows: every live node of the registry and, asked
of every node at once (``nodes.ask_nodes``), the status of each and the
pending halves, consumer lag, delay levels and transaction figures of each
master, aggregated with the node named."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from broker_core.cluster.node_ops import NodeUnavailableError
from broker_core.errors import BrokerError
from console.cluster.nodes import Read, ask_nodes, describe, registry


def plain(value: Any) -> Any:
    """A library value (dataclasses, enums) as the page's plain dicts and
    lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: plain(getattr(value, f.name)) for f in fields}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@dataclass
class NodeView:
    """One node as the cluster page shows it."""

    name: str
    broker_id: int
    role: str
    endpoints: list[str]
    admin: str
    log_end: int
    heartbeat_ms: int
    #: a slave's replication lag in bytes (None: a master or unknown)
    lag_bytes: int | None = None
    slaves: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    @property
    def key(self) -> str:
        return f"{self.name}:{self.broker_id}"

    @property
    def is_master(self) -> bool:
        return self.role in ("SYNC_MASTER", "ASYNC_MASTER")

    @classmethod
    def of(cls, n: Any) -> NodeView:
        """The view of a registry ``NodeInfo``, before the node answers."""
        return cls(
            n.name, n.broker_id, n.role, n.endpoints, n.admin, n.log_end,
            n.heartbeat_ms,
        )  # fmt: skip

    def take_status(self, status: dict[str, Any]) -> dict[str, Any]:
        """Update from the node's ``node_status``; return what a slave
        follows (its master and lag), empty for a master."""
        self.log_end = status.get("log_end", self.log_end)
        self.slaves = status.get("slaves") or []
        following = status.get("following") or {}
        if following:
            self.lag_bytes = following.get("lag_bytes")
        return dict(following)


def take_failures(got: dict[str, Any]) -> dict[str, BrokerError]:
    """Of one node's ``ask_nodes`` answers, the reads that have none and why;
    each is replaced by None, so the rest of the page is built."""
    failed = {r: a for r, a in got.items() if isinstance(a, BrokerError)}
    for read in failed:
        got[read] = None
    return failed


def failure_sentence(label: str, read: str, exc: BrokerError) -> str:
    """What the page says of a read of the node ``label`` with no answer: the
    one wording of a node that did not answer (``nodes.unanswered``), the
    read named; or what the node answered instead."""
    if isinstance(exc, NodeUnavailableError):
        return f"{read}: {describe(exc)}"
    return f"{label} answered {read}: {exc}"


#: What the page asks every node (its status first), and every master besides.
NODE_READS: dict[str, Read] = {"node_status": lambda ops: ops.node_status()}
MASTER_READS: dict[str, Read] = {
    "pending halves": lambda ops: ops.list_halves(state="PENDING", page_size=200),
    "discarded halves": lambda ops: ops.list_halves(state="DISCARDED", page_size=200),
    "consumer_lag": lambda ops: ops.consumer_lag(),
    "delay_stats": lambda ops: ops.delay_stats(),
    "transaction_metrics": lambda ops: ops.transaction_metrics(),
}

#: The transaction figures summed over the masters (``TransactionMetrics``
#: fields that are counts), in the order the page shows them.
TX_TOTALS = (
    "pending",
    "discarded",
    "commits",
    "rollbacks",
    "discards",
    "resumes",
    "checks_sent",
    "checks_answered",
    "checks_failed",
    "checks_commit",
    "checks_rollback",
    "checks_unknown",
    "checks_no_producer",
    "checks_timeout",
    "checks_error",
)


@dataclass
class ClusterState:
    """What the cluster page shows, every node asked at once."""

    nodes: list[NodeView]
    #: pending halves of every master, each with its ``node``
    halves: list[dict[str, Any]] = field(default_factory=list)
    #: discarded halves (checked the most times, no answer) of every master
    discarded: list[dict[str, Any]] = field(default_factory=list)
    #: lag per group, topic and master (``group``, ``topic``, ``node``,
    #: ``queues``, ``lag``, ``max_lag``), most behind first
    lag: list[dict[str, Any]] = field(default_factory=list)
    #: per master, every delay level with messages scheduled and the timers
    #: (``node``, ``kind``, ``level``, ``delay_ms``, ``scheduled``,
    #: ``next_due_ms``, ``oldest_overdue_ms``, ``progress``)
    delays: list[dict[str, Any]] = field(default_factory=list)
    #: "node: reason" for every node (or part of one) that did not answer
    errors: list[str] = field(default_factory=list)
    #: ``TX_TOTALS`` summed over the masters that answered, with ``masters``
    #: (how many were summed) and ``pending_by_topic``; None: none answered
    transactions: dict[str, Any] | None = None


def _lag_from_masters(views: list[NodeView]) -> None:
    """A slave's lag as its master counts it (the master's log end less what
    the slave acknowledged), where the master names it: the slave's own
    figure compares its end with the master's end as it last heard it, which
    reads far too low after a stall."""
    seen: dict[str, dict[str, Any]] = {}
    for v in views:
        if v.is_master:
            for s in v.slaves:
                if s.get("node") and s.get("connected", True):
                    seen[s["node"]] = s
    for v in views:
        if v.is_master or not v.endpoints:
            continue
        s = seen.get(f"{v.name}/{v.broker_id}@{v.endpoints[0]}")
        if s is not None and s.get("lag_bytes") is not None:
            v.lag_bytes = int(s["lag_bytes"])


def cluster_state() -> ClusterState:
    """Every live node of the registry and what its operations report: the
    replication of each; the pending halves, consumer lag and delay levels of
    each master, aggregated with the node named."""
    views: list[NodeView] = []
    calls: dict[str, tuple[str, dict[str, Read]]] = {}
    for n in registry().nodes():
        view = NodeView.of(n)
        views.append(view)
        reads = NODE_READS | (MASTER_READS if view.is_master else {})
        calls[view.key] = (n.admin, reads)
    answers = ask_nodes(calls)
    state = ClusterState(views)
    for view in views:
        got = answers[view.key]
        if isinstance(got, BrokerError):
            view.error = describe(got)
            state.errors.append(view.error)
            continue
        for read, exc in take_failures(got).items():
            state.errors.append(
                failure_sentence(f"{view.name} ({view.role})", read, exc)
            )
        view.take_status(got["node_status"])
        for label, rows in (("pending halves", state.halves),
                            ("discarded halves", state.discarded)):  # fmt: skip
            items = getattr(got.get(label), "items", ())
            rows += [{"node": view.name, **plain(h)} for h in items]
        state.lag += lag_rows(view.name, got.get("consumer_lag"))
        state.delays += delay_rows(view.name, got.get("delay_stats"))
        if view.is_master and got.get("transaction_metrics"):
            state.transactions = _add_metrics(
                state.transactions, got["transaction_metrics"]
            )
    _lag_from_masters(views)
    state.halves.sort(key=lambda r: (r.get("born_timestamp") or 0, r["node"]))
    state.discarded.sort(key=lambda r: (r.get("born_timestamp") or 0, r["node"]))
    state.lag.sort(key=lambda r: (-r["lag"], r["group"], r["topic"], r["node"]))
    state.delays.sort(key=lambda r: (r["kind"] != "level", r["level"], r["node"]))
    return state


def _add_metrics(total: dict[str, Any] | None, metrics: Any) -> dict[str, Any]:
    """``total`` with one master's ``TransactionMetrics`` added."""
    total = total or {
        "masters": 0,
        **dict.fromkeys(TX_TOTALS, 0),
        "pending_by_topic": {},
    }
    total["masters"] += 1
    for key in TX_TOTALS:
        total[key] += int(getattr(metrics, key, 0) or 0)
    for topic, count in (getattr(metrics, "pending_by_topic", None) or {}).items():
        total["pending_by_topic"][topic] = (
            total["pending_by_topic"].get(topic, 0) + count
        )
    return total


def lag_rows(node: str, queues: Any) -> list[dict[str, Any]]:
    """A node's ``consumer_lag`` (``QueueLag`` per queue) summed per group and
    topic."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for q in queues or ():
        row = rows.setdefault(
            (q.group, q.topic),
            {"group": q.group, "topic": q.topic, "node": node, "queues": 0,
             "lag": 0, "max_lag": 0},
        )  # fmt: skip
        row["queues"] += 1
        row["lag"] += q.lag
        row["max_lag"] = max(row["max_lag"], q.lag)
    return list(rows.values())


def delay_rows(node: str, stats: Any) -> list[dict[str, Any]]:
    """A node's ``delay_stats``: the levels with messages waiting, and its
    timers if any are pending."""
    answer = stats.as_json() if stats is not None else {}
    rows = [
        {
            "node": node,
            "kind": "level",
            "level": lv["level"],
            "delay_ms": lv["delay_ms"],
            "scheduled": lv["backlog"],
            "next_due_ms": lv["next_due_ms"],
            "oldest_overdue_ms": lv["oldest_overdue_ms"],
            "progress": lv["progress"],
        }  # fmt: skip
        for lv in answer.get("levels", ())
        if lv["backlog"]
    ]
    timers = answer.get("timers") or {}
    if timers.get("pending"):
        rows.append(
            {"node": node, "kind": "timer", "level": 0, "delay_ms": None,
             "scheduled": timers["pending"], "next_due_ms": timers["next_due_ms"],
             "oldest_overdue_ms": timers["oldest_overdue_ms"], "progress": None}
        )  # fmt: skip
    return rows
