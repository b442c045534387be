"""Everything the console does to one node, as one protocol.

``NodeOperations`` lists the operations. ``NodeOps`` runs them on a store
this process has open: the node's admin API runs them for a console
elsewhere (``POST /v1/ops/<name>``, the API's only route besides
``/metrics``), and a console that opens the store itself (tests,
development) runs them in place. ``RemoteNodeOps`` has the same methods and
sends each call to a node's admin API, so the console's pages are written
once and cannot tell a local store from a node on another host: arguments and
answers cross as the library's own types (``opscodec``), errors as the
library's own exceptions. A node that does not answer, or answers with an
error that is not the library's, is ``NodeUnavailableError`` (with the HTTP
``status`` when it answered one).

Only the methods in ``READS``, ``WRITES`` and ``NODE_WRITES`` can be called
remotely; a slave refuses ``WRITES`` (``ReplicaReadOnlyError``), as its store
does; ``NODE_WRITES`` change the node itself (``promote``: a slave made a
master), so a slave takes them. Writes carry the operator's name where the
node records one (transaction outcomes, a promotion); the console audits
every write on its side.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import platform
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import broker_core
from broker_core import browse, offset_reset
from broker_core.clients import client_rows
from broker_core.cluster import opscodec
from broker_core.cluster.argtypes import check_call, keywords_of
from broker_core.endpoint.config import EndpointConfig
from broker_core.errors import (
    BrokerError,
    GroupNotConsumingError,
    InvalidArgumentError,
    PromotionRefusedError,
    StoreError,
    ValidationError,
)
from broker_core.groups import GroupConfig
from broker_core.lag import QueueLag, consumer_lag, lag_of, subscribed_queues
from broker_core.message import (
    Message,
    MessageExt,
    MessageInner,
    PutResult,
    SendResult,
)
from broker_core.metadata import TopicConfig
from broker_core.offset_reset import ResetChange
from broker_core.search import MessageQuery, SearchPage
from broker_core.search import search_messages as core_search
from broker_core.transaction.transports import MAX_WEBHOOK_TIMEOUT_S
from broker_core.validation import validate_group

READS = frozenset(
    {
        "list_halves",
        "get_half",
        "transaction_metrics",
        "producer_group_counts",
        "checkers",
        "offset_for_time",
        "browse_queue",
        "get_message",
        "message_consumers",
        "node_runtime",
        "search_messages",
        "topics_with_depths",
        "get_topic",
        "queue_ranges",
        "clients",
        "consumer_lag",
        "group_queues",
        "groups",
        "preview_reset",
        "delay_stats",
        "list_scheduled",
        "store_status",
        "node_status",
    }
)
WRITES = frozenset(
    {
        "commit",
        "rollback",
        "resume",
        "configure_checker",
        "remove_checker",
        "send",
        "resend",
        "create_topic",
        "update_topic",
        "delete_topic",
        "apply_reset",
        "put_group",
        "recall",
    }
)
#: Writes to the node itself, which a slave takes (they make it a master).
NODE_WRITES = frozenset({"promote"})
#: Every operation (``NodeOperations``' methods).
OPERATIONS = READS | WRITES | NODE_WRITES
#: How deeply a call's ``args`` and ``kwargs`` may nest (lists and objects)
MAX_DEPTH = 32
#: A message's ``flag``: a 32-bit signed integer in its record, as RocketMQ's
_FLAG_RANGE = (-(1 << 31), (1 << 31) - 1)


def _half_queries() -> Callable[..., Any]:
    """Where ``list_halves``' keywords go (``TransactionService.list_halves``)."""
    from broker_core.transaction.queries import HalfQueries

    return HalfQueries.list_halves


def _store_update_topic() -> Callable[..., Any]:
    """Where ``update_topic``'s keywords go (``Broker.update_topic``)."""
    from broker_core.store import MessageStore

    return MessageStore.update_topic


class NodeControl(Protocol):
    """What only a node's server knows of the node (``AdminServer``): its
    status (role, replication, counters) and its promotion."""

    def node(self) -> dict[str, Any]: ...

    def promote(self, operator: str, role: str, force: bool) -> dict[str, Any]: ...


@runtime_checkable
class NodeOperations(Protocol):
    """Every operation the console does to one node (module doc).

    Reads: transactions (``list_halves``, ``get_half``,
    ``transaction_metrics``, ``producer_group_counts``, ``checkers``),
    messages (``offset_for_time``, ``browse_queue``, ``get_message``,
    ``message_consumers``, ``search_messages``), topics
    (``topics_with_depths``, ``get_topic``, ``queue_ranges``), consumers
    (``clients``, ``consumer_lag``, ``group_queues``, ``groups``,
    ``preview_reset``), delays (``delay_stats``, ``list_scheduled``) and the
    node (``store_status``, ``node_runtime``, ``node_status``). Writes:
    ``commit``, ``rollback``, ``resume``, ``configure_checker``,
    ``remove_checker``, ``send``, ``resend``, ``create_topic``,
    ``update_topic``, ``delete_topic``, ``apply_reset``, ``put_group``,
    ``recall``; and ``promote``, which a slave takes.
    """

    # -- transactions
    def list_halves(self, **filters: Any) -> Any: ...
    def get_half(self, transaction_id: str) -> Any: ...
    def commit(self, transaction_id: str, operator: str) -> Any: ...
    def rollback(self, transaction_id: str, operator: str) -> Any: ...
    def resume(self, transaction_id: str, operator: str) -> Any: ...
    def transaction_metrics(self) -> Any: ...
    def producer_group_counts(self) -> list[tuple[str, int, int]]: ...
    def checkers(self) -> dict[str, dict[str, Any]]: ...
    def configure_checker(
        self, group: str, url: str, secret: str, timeout_s: float
    ) -> None: ...
    def remove_checker(self, group: str) -> None: ...

    # -- messages
    def offset_for_time(self, topic: str, queue_id: int, at_ms: int) -> int: ...
    def browse_queue(
        self, topic: str, queue_id: int, offset: int | None, at_ms: int | None,
        count: int,
    ) -> browse.QueuePage: ...  # fmt: skip
    def get_message(self, msg_id: str, topic: str | None = None) -> MessageExt: ...
    def search_messages(
        self, query: MessageQuery, limit: int, cursor: str | None, budget: int
    ) -> SearchPage: ...
    def send(self, message: Message) -> SendResult: ...
    def resend(self, msg_id: str, group: str) -> PutResult: ...

    # -- topics
    def topics_with_depths(self) -> list[tuple[TopicConfig, list[int]]]: ...
    def get_topic(self, name: str) -> TopicConfig: ...
    def create_topic(
        self, name: str, read_queue_nums: int, write_queue_nums: int, perm: int,
        message_type: str,
    ) -> TopicConfig: ...  # fmt: skip
    def update_topic(self, name: str, **changes: Any) -> TopicConfig: ...
    def delete_topic(self, name: str) -> None: ...
    def queue_ranges(self, name: str) -> list[dict[str, int]]: ...

    # -- consumers
    def clients(self, group: str | None = None) -> list[dict[str, Any]]: ...
    def consumer_lag(self) -> list[QueueLag]: ...
    def group_queues(self, group: str) -> list[dict[str, Any]]: ...
    def message_consumers(
        self, topic: str, queue_id: int, queue_offset: int, msg_id: str
    ) -> list[dict[str, Any]]: ...
    def groups(self) -> dict[str, Any]: ...
    def put_group(
        self, group: str, fifo: bool, max_delivery_attempts: int | None
    ) -> GroupConfig: ...
    def preview_reset(
        self, group: str, topic: str, to_offset: int | None = None,
        to_ms: int | None = None, queue_id: int | None = None,
    ) -> list[ResetChange]: ...  # fmt: skip
    def apply_reset(
        self, group: str, topic: str, to_offset: int | None = None,
        to_ms: int | None = None, queue_id: int | None = None,
    ) -> list[ResetChange]: ...  # fmt: skip

    # -- delays
    def delay_stats(self) -> Any: ...
    def list_scheduled(
        self, kind: str | None, level: int | None, limit: int, start: int
    ) -> Any: ...
    def recall(self, msg_id: str) -> Any: ...

    # -- the node
    def store_status(self) -> dict[str, Any]: ...
    def node_runtime(self) -> dict[str, Any]: ...
    def node_status(self) -> dict[str, Any]: ...
    def promote(
        self, operator: str, role: str = "ASYNC_MASTER", force: bool = False
    ) -> dict[str, Any]: ...


class NodeOps:
    """The operations over a store open in this process.

    ``broker``, ``tx`` (``TransactionService``) and ``delays``
    (``DelayService``) are given as functions, so that a page that needs only
    topics never builds the transaction index; ``clients(group)`` returns
    the clients the node's endpoint knows (``broker_core.clients`` rows).
    ``max_delivery_attempts`` is what the node's endpoint gives a group with
    no setting of its own (``serve --max-delivery-attempts``). ``control``
    is the node's server (``AdminServer``: ``node_status``, ``promote``);
    without one, the store is no cluster node (``node_status`` says what the
    store knows, ``promote`` is refused).
    """

    def __init__(
        self,
        broker: Callable[[], Any],
        tx: Callable[[], Any],
        delays: Callable[[], Any],
        clients: Callable[[str | None], list[dict[str, Any]]],
        max_delivery_attempts: int = EndpointConfig.max_attempts,
        topics_changed: Callable[[], None] | None = None,
        control: NodeControl | None = None,
    ) -> None:
        self._broker = broker
        self._tx = tx
        self._delays = delays
        self._clients = clients
        self._max_delivery_attempts = max_delivery_attempts
        #: called after a topic is created, changed or deleted (a cluster
        #: node registers again at once: routes follow without waiting for
        #: its next heartbeat)
        self._topics_changed = topics_changed or (lambda: None)
        self._control = control

    def with_control(self, control: NodeControl) -> NodeOps:
        """These operations with the node's server as their ``control``."""
        twin = copy.copy(self)
        twin._control = control
        return twin

    @staticmethod
    def clients_file(store_root: str | Path) -> Callable[[str | None], list[dict]]:
        """``clients`` read from ``<store>/clients.json``, which the endpoint
        rewrites atomically (its workers' lists merged)."""
        path = Path(store_root) / "clients.json"

        def read(group: str | None = None) -> list[dict[str, Any]]:
            try:
                clients = json.loads(path.read_text()).get("clients", [])
            except (OSError, ValueError, AttributeError):
                return []
            return client_rows(clients if isinstance(clients, list) else [], group)

        return read

    # -- transactions ---------------------------------------------------------
    @keywords_of(_half_queries)
    def list_halves(self, **filters: Any) -> Any:
        """One page of halves (``TransactionService.list_halves``); a bad
        sort, state or page is ``ValidationError``."""
        try:
            return self._tx().list_halves(**filters)
        except ValueError as exc:
            raise ValidationError(f"list_halves: {exc}") from None

    def get_half(self, transaction_id: str) -> Any:
        return self._tx().get_half(transaction_id)

    def commit(self, transaction_id: str, operator: str) -> Any:
        return self._tx().commit(transaction_id, operator=operator)

    def rollback(self, transaction_id: str, operator: str) -> Any:
        return self._tx().rollback(transaction_id, operator=operator)

    def resume(self, transaction_id: str, operator: str) -> Any:
        return self._tx().resume(transaction_id, operator=operator)

    def transaction_metrics(self) -> Any:
        return self._tx().metrics()

    def producer_group_counts(self) -> list[tuple[str, int, int]]:
        """(producer group, state, halves) for every group with halves: one
        pass over the index's (producer_group, state, born_ts) index."""
        svc = self._tx()
        svc.refresh_index(2.0)
        return [
            (str(g), int(s), int(n))
            for g, s, n in svc.index.query(
                "SELECT producer_group, state, COUNT(*) FROM halves "
                "GROUP BY producer_group, state"
            )
        ]

    def checkers(self) -> dict[str, dict[str, Any]]:
        """The check-back transport configured per producer group."""
        return dict(self._tx().checkers.configured())

    def configure_checker(
        self, group: str, url: str, secret: str, timeout_s: float
    ) -> None:
        """Persist ``group``'s webhook checker. A URL that is not http(s)
        with a host, and a timeout that is not a positive number of seconds,
        are ``InvalidArgumentError`` (nothing stored)."""
        validate_group(group)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            want = "an http:// or https:// URL with a host"
            raise _bad("configure_checker", "url", want, url[:200])
        if not 0 < timeout_s <= MAX_WEBHOOK_TIMEOUT_S:  # NaN too
            want = f"seconds above 0, at most {MAX_WEBHOOK_TIMEOUT_S:g}"
            raise _bad("configure_checker", "timeout_s", want, timeout_s)
        try:
            self._tx().checkers.configure(
                group, "webhook", url=url, secret=secret, timeout_s=timeout_s
            )
        except ValueError as exc:  # the webhook's own check of its settings
            raise ValidationError(f"configure_checker: {exc}") from None

    def remove_checker(self, group: str) -> None:
        self._tx().checkers.remove(group)

    # -- messages -------------------------------------------------------------
    def offset_for_time(self, topic: str, queue_id: int, at_ms: int) -> int:
        return browse.offset_for_time(self._broker().store, topic, queue_id, at_ms)

    def browse_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int | None,
        at_ms: int | None,
        count: int,
    ) -> browse.QueuePage:
        return browse.browse_queue(
            self._broker().store, topic, queue_id, offset, at_ms, count
        )

    def get_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        return self._broker().get_message(msg_id, topic)

    def search_messages(
        self, query: MessageQuery, limit: int, cursor: str | None, budget: int
    ) -> SearchPage:
        return core_search(self._broker(), query, limit, cursor, budget)

    def send(self, message: Message) -> SendResult:
        """Send as a client would (a DELAY or timer message is scheduled: the
        delay service's send hook is installed with it)."""
        low, high = _FLAG_RANGE
        if not low <= message.flag <= high:
            want = f"a 32-bit int ({low} to {high})"
            raise _bad("send", "message: field flag", want, message.flag)
        self._delays()
        return self._broker().send(message)

    def resend(self, msg_id: str, group: str) -> PutResult:
        """Redeliver a message to one consumer group through its retry topic
        (``%RETRY%<group>``), with ``RETRY_TOPIC`` naming the original topic
        (kept from a dead letter's copy), as RocketMQ's retry. The group's
        gRPC consumers of that topic read it there (``endpoint.retrytopic``)."""
        validate_group(group)
        broker = self._broker()
        original = broker.get_message(msg_id)
        props = dict(original.properties)
        props.setdefault("RETRY_TOPIC", original.topic)
        props["ORIGIN_MESSAGE_ID"] = original.msg_id
        inner = MessageInner(
            topic=f"%RETRY%{group}",
            queue_id=0,
            body=original.body,
            properties=props,
            flag=original.flag,
            reconsume_times=original.reconsume_times + 1,
        )
        return broker.store.put_inner(inner)

    # -- topics ---------------------------------------------------------------
    def topics_with_depths(self) -> list[tuple[TopicConfig, list[int]]]:
        """Every topic's settings and each queue's end offset."""
        broker = self._broker()
        store = broker.store
        return [
            (cfg, [store.max_offset(cfg.topic_name, q) for q in range(cfg.queue_nums)])
            for cfg in broker.list_topics()
        ]

    def get_topic(self, name: str) -> TopicConfig:
        return self._broker().store.get_topic(name)

    def create_topic(
        self,
        name: str,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int,
        message_type: str,
    ) -> TopicConfig:
        cfg = self._broker().create_topic(
            name, read_queue_nums, write_queue_nums, perm, message_type
        )
        self._topics_changed()
        return cfg

    @keywords_of(_store_update_topic, skip=("topic",))
    def update_topic(self, name: str, **changes: Any) -> TopicConfig:
        cfg = self._broker().update_topic(name, **changes)
        self._topics_changed()
        return cfg

    def delete_topic(self, name: str) -> None:
        self._broker().delete_topic(name)
        self._topics_changed()

    def queue_ranges(self, name: str) -> list[dict[str, int]]:
        """Each queue's min and max offset."""
        store = self._broker().store
        cfg = store.get_topic(name)
        out = []
        for q in range(cfg.queue_nums):
            lo, hi = store.min_offset(name, q), store.max_offset(name, q)
            out.append(
                {"queue_id": q, "min_offset": lo, "max_offset": hi, "depth": hi - lo}
            )
        return out

    # -- consumers ------------------------------------------------------------
    def clients(self, group: str | None = None) -> list[dict[str, Any]]:
        return self._clients(group)

    def consumer_lag(self) -> list[QueueLag]:
        """Every group's lag per queue it consumes."""
        return consumer_lag(self._broker().store, self._clients(None))

    def group_queues(self, group: str) -> list[dict[str, Any]]:
        """A group's queues: committed, max, lag and when it last consumed."""
        store = self._broker().store
        out = []
        for g, topic, qid, committed in subscribed_queues(store, self._clients(None)):
            if g != group:
                continue
            hi, lag = lag_of(store, topic, qid, committed)
            last_ms = None
            if committed > store.min_offset(topic, qid):
                units = store.get_queue_units(topic, qid, committed - 1, 1)
                if units:
                    last_ms = store.read_message(units[0][0]).store_timestamp
            out.append(
                {
                    "topic": topic,
                    "queue_id": qid,
                    "committed_offset": committed,
                    "max_offset": hi,
                    "lag": lag,
                    "last_consumed_ms": last_ms,
                }
            )
        return out

    def message_consumers(
        self, topic: str, queue_id: int, queue_offset: int, msg_id: str
    ) -> list[dict[str, Any]]:
        """Each group consuming the queue that holds a message, and where the
        message stands for it: ``dead_lettered`` (a copy in ``%DLQ%<group>``),
        ``consumed`` (the group's committed offset is past it: acknowledged,
        or skipped by the group's filter) or ``pending`` (not yet delivered,
        or delivered and not yet acknowledged; ``ahead``: messages of the
        queue before it not committed either, None when the group has
        committed nothing on the queue), ``resent`` (dead-lettered, resent
        through ``%RETRY%<group>`` and not acknowledged there yet; once it is,
        ``consumed``); and ``retried`` when a copy went through
        ``%RETRY%<group>``."""
        broker = self._broker()
        store = broker.store
        rows = []
        for g, t, qid, committed in subscribed_queues(store, self._clients(None)):
            if t != topic or qid != queue_id:
                continue
            dlq = _newest_copy(broker, f"%DLQ%{g}", msg_id)
            retry = _newest_copy(broker, f"%RETRY%{g}", msg_id)
            if dlq is not None and (
                retry is None or retry.commit_log_offset < dlq.commit_log_offset
            ):
                state = "dead_lettered"
            elif dlq is not None and retry is not None:
                # Resent from the dead-letter queue (a copy in the retry
                # topic after the dead letter): where that copy stands.
                done = store.committed_offset(g, retry.topic, retry.queue_id)
                state = "consumed" if done > retry.queue_offset else "resent"
            elif committed > queue_offset:
                state = "consumed"
            else:
                # Not acknowledged up to it: not yet delivered, or delivered
                # and not acknowledged yet (a pop consumer's in-flight
                # message; its group may have committed nothing at all yet).
                state = "pending"
            copies = {"%DLQ%": dlq, "%RETRY%": retry}
            rows.append(
                {
                    "group": g,
                    "state": state,
                    "committed_offset": committed,
                    "ahead": max(0, queue_offset - committed)
                    if committed >= 0
                    else None,
                    "dead_letter_id": dlq.offset_msg_id if dlq else None,
                    "retried": copies["%RETRY%"] is not None,
                }
            )
        return rows

    def groups(self) -> dict[str, Any]:
        """Every consumer group's settings (``groups``: ``GroupConfig`` by
        name) and the delivery attempts a group gets without a setting of its
        own (``default_max_delivery_attempts``)."""
        return {
            "groups": self._broker().list_groups(),
            "default_max_delivery_attempts": self._max_delivery_attempts,
        }

    def put_group(
        self, group: str, fifo: bool, max_delivery_attempts: int | None
    ) -> GroupConfig:
        """Create or replace a group's settings (``Broker.put_group``; None:
        the endpoint's default). Raises ``ValidationError``."""
        return self._broker().put_group(group, fifo, max_delivery_attempts)

    def preview_reset(
        self,
        group: str,
        topic: str,
        to_offset: int | None = None,
        to_ms: int | None = None,
        queue_id: int | None = None,
    ) -> list[ResetChange]:
        """What a reset would change on each queue (``offset_reset``).
        Raises ``TopicNotFoundError``, ``GroupNotConsumingError`` (the group
        has no committed offset and no client subscribed to ``topic`` here)
        and the reset's own ``ValidationError``s."""
        store = self._broker().store
        store.get_topic(topic)
        if not any(
            g == group and t == topic
            for g, t, _q, _c in subscribed_queues(store, self._clients(None))
        ):
            raise GroupNotConsumingError(
                f"{group!r} does not consume {topic!r} on this node"
            )
        return offset_reset.preview_reset(
            self._broker().store,
            group,
            topic,
            to_offset=to_offset,
            to_ms=to_ms,
            queue_id=queue_id,
        )

    def apply_reset(
        self,
        group: str,
        topic: str,
        to_offset: int | None = None,
        to_ms: int | None = None,
        queue_id: int | None = None,
    ) -> list[ResetChange]:
        """Reset as ``preview_reset`` says, worked out here at the moment of
        the reset (never targets a caller computed); the changes made."""
        changes = self.preview_reset(group, topic, to_offset, to_ms, queue_id)
        return offset_reset.apply_reset(self._broker(), group, topic, changes)

    # -- delays ---------------------------------------------------------------
    def delay_stats(self) -> Any:
        return self._delays().stats()

    def list_scheduled(
        self, kind: str | None, level: int | None, limit: int, start: int
    ) -> Any:
        """Pending scheduled messages (``DelayService.list_scheduled``):
        ``kind`` "level", "timer" or None (both), ``level`` a delay level (0:
        timers; None: every one), ``limit`` and ``start`` no negative
        numbers; anything else is ``InvalidArgumentError``."""
        if kind not in (None, "level", "timer"):
            raise _bad("list_scheduled", "kind", "'level' | 'timer' | None", kind)
        if level is not None and level < 0:
            raise _bad("list_scheduled", "level", "an int >= 0 | None", level)
        if limit < 0:
            raise _bad("list_scheduled", "limit", "an int >= 0", limit)
        if start < 0:
            raise _bad("list_scheduled", "start", "an int >= 0", start)
        return self._delays().list_scheduled(kind, level, limit, start)

    def recall(self, msg_id: str) -> Any:
        return self._delays().recall(msg_id)

    # -- health ---------------------------------------------------------------
    def store_status(self) -> dict[str, Any]:
        """The store's directory, how full its disk is (0..1, None if unknown)
        and the fill at which appends are refused."""
        store = self._broker().store
        guard = store.disk_guard
        try:
            used, _free, total = guard.usage()
        except OSError:
            used, total = 0.0, 0
        return {
            "path": str(store.root),
            "disk_used": used if total else None,
            "disk_limit": float(guard.ratio),
        }

    def node_runtime(self) -> dict[str, Any]:
        """What a single node's page shows: ``store_runtime`` (version, rate,
        disk), the store's path and log end, its configuration, its counts of
        topics, groups and online clients."""
        from dataclasses import asdict

        store = self._broker().store
        config = asdict(store.config)
        config.pop("delay_levels_ms", None)  # message_delay_level says it
        clients = self._clients(None)
        return store_runtime(store) | {
            "path": str(store.root),
            "log_end": store.max_physical_offset(),
            "topics": sum(1 for _ in store.list_topics()),
            "groups": len({g for g, _t, _q, _c in subscribed_queues(store, clients)}),
            "clients_online": sum(1 for c in clients if c.get("online")),
            "config": config,
        }

    def node_status(self) -> dict[str, Any]:
        """The node as its cluster sees it: ``node``, ``cluster``, ``role``,
        ``log_end``, replication (a master's ``slaves`` with their lag, a
        slave's ``following`` master and lag), ``registry_error``, the
        endpoint's ``counters`` and ``runtime`` (``store_runtime``). Without
        a node's server: the store's own (an ``ASYNC_MASTER`` outside any
        cluster, the counters of its endpoint's ``clients.json``, the tails
        it cut)."""
        if self._control is not None:
            return self._control.node()
        from broker_core.ha.replica import cut_tails

        store = self._broker().store
        try:
            data = json.loads((Path(store.root) / "clients.json").read_text())
            counters = dict(data.get("counters") or {})
        except (OSError, ValueError, AttributeError, TypeError):
            counters = {}
        return {
            "node": "",
            "cluster": "",
            "role": "ASYNC_MASTER",
            "log_end": store.max_physical_offset(),
            "counters": counters,
            "runtime": store_runtime(store),
            "cut_tails": cut_tails(store.root)[:20],
        }

    def promote(
        self, operator: str, role: str = "ASYNC_MASTER", force: bool = False
    ) -> dict[str, Any]:
        """Make this slave a master with ``role`` (``ASYNC_MASTER`` or
        ``SYNC_MASTER``), recorded with ``operator``'s name: refused
        (``PromotionRefusedError``) for a master, a store outside a cluster,
        and while its master still heartbeats in the registry unless
        ``force``; ``RouteUnavailableError`` when the registry cannot tell.
        Answers ``node``, ``role``, ``operator``, ``log_end``."""
        if self._control is None:
            raise PromotionRefusedError("this store is not a cluster node")
        return self._control.promote(operator, role, force)

    # -- the admin API's side ---------------------------------------------------
    def call(self, name: str, body: dict[str, Any], writable: bool = True) -> Any:
        """Run ``name`` with the encoded ``{"args", "kwargs"}`` of ``body``;
        the encoded answer. ``KeyError`` for a name that is not an operation."""
        if name not in OPERATIONS:
            raise KeyError(name)
        if name in WRITES and not writable:  # NODE_WRITES: a slave takes them
            from broker_core.errors import ReplicaReadOnlyError

            raise ReplicaReadOnlyError(f"{name}: this node is a slave (read-only)")
        args = body.get("args") or []
        kwargs = body.get("kwargs") or {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise opscodec.CodecError("args: a list; kwargs: an object")
        if opscodec.depth(args) > MAX_DEPTH or opscodec.depth(kwargs) > MAX_DEPTH:
            raise opscodec.CodecError(
                f"{name}: the arguments nest too deeply (more than {MAX_DEPTH} levels)"
            )
        try:
            args = opscodec.decode(args)
            kwargs = opscodec.decode(kwargs)
        except (TypeError, ValueError, AttributeError) as exc:
            # A tagged value whose fields do not build its type.
            raise opscodec.CodecError(f"{name}: {exc}") from None
        fn = getattr(self, name)
        # Every argument against the operation's signature and annotations,
        # before it runs (``argtypes``): a float where it takes an int never
        # reaches the store.
        check_call(name, fn, args, kwargs)
        return opscodec.encode(fn(*args, **kwargs))


def _bad(name: str, param: str, want: str, given: Any) -> InvalidArgumentError:
    """A value of the right type that ``name`` cannot take, as ``argtypes``
    words a value of the wrong type."""
    return InvalidArgumentError(
        f"{param}: must be {want}, not {given!r} (argument of {name})"
    )


def store_runtime(store: Any) -> dict[str, Any]:
    """A node's version and Python, the messages its store took per second
    over the last minute, its disk (the filesystem's size, free bytes and
    fill, None when unknown; the fill at which appends are refused) and the
    log's first offset: on a single node's page and, through the admin API's
    ``node_status``, on the cluster's page of each node."""
    guard = store.disk_guard
    try:
        used, free, total = guard.usage()
    except OSError:
        used, free, total = 0.0, 0, 0
    return {
        "version": broker_core.__version__,
        "python": platform.python_version(),
        "stored_per_s_1m": browse.stored_per_second(
            store, 60_000, int(time.time() * 1000)
        ),
        "disk_total_bytes": total,
        "disk_free_bytes": free,
        "disk_used": used if total else None,
        "disk_limit": float(guard.ratio),
        "log_start": store.commitlog.first_offset(),
    }


def _newest_copy(broker: Any, topic: str, msg_id: str) -> Any:
    """The newest record of ``topic`` (a group's retry or dead-letter topic)
    carrying message ``msg_id`` (its ``UNIQ_KEY``); None if there is none."""
    if broker.store.topic_config(topic) is None:
        return None
    return max(
        broker.records_with_id(topic, msg_id),
        key=lambda m: m.commit_log_offset,
        default=None,
    )


class NodeUnavailableError(StoreError):
    """The node's admin API did not answer (down, refused, timed out, no
    admin API, a host the token is not sent to) or answered something that is
    not an operation's result; ``status`` is the HTTP status it answered
    (None: no answer)."""

    code = "node_unavailable"

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def check_host(url: str, allowed: Iterable[str]) -> None:
    """Refuse (``NodeUnavailableError``) an admin URL whose host is not in
    ``allowed`` (host names, addresses or networks; empty: any), so that the
    token is never sent there."""
    allowed = [a for a in allowed if a]
    if not allowed:
        return
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in allowed:
        if host == entry.lower():
            return
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return
            except ValueError:
                continue
    raise NodeUnavailableError(
        f"{url}: {host} is not in CLUSTER_ADMIN_HOSTS, so the admin token is "
        "not sent there"
    )


def _remote(name: str) -> Callable[..., Any]:
    def call(self: RemoteNodeOps, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, list(args), kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``NodeOps.{name}`` on the remote node."
    return call


class RemoteNodeOps:
    """``NodeOperations`` of a node reached through its admin API (module
    doc): each method is ``POST <url>/v1/ops/<name>``.

    ``allowed_hosts`` (``CLUSTER_ADMIN_HOSTS``) is checked before every call:
    a URL outside it gets ``NodeUnavailableError`` and never the token.
    """

    def __init__(
        self,
        url: str,
        token: str,
        timeout: float = 5.0,
        context: ssl.SSLContext | None = None,
        write_timeout: float = 30.0,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        #: how long a read (``READS``) and a write may take
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.context = context
        self.allowed_hosts = tuple(allowed_hosts)

    def within(self, seconds: float) -> RemoteNodeOps:
        """The same node, every call (read or write) answered within
        ``seconds`` at most (a fan-out's share of its one deadline)."""
        twin = copy.copy(self)
        twin.timeout = min(self.timeout, seconds)
        twin.write_timeout = min(self.write_timeout, seconds)
        return twin

    list_halves = _remote("list_halves")
    get_half = _remote("get_half")
    commit = _remote("commit")
    rollback = _remote("rollback")
    resume = _remote("resume")
    transaction_metrics = _remote("transaction_metrics")
    producer_group_counts = _remote("producer_group_counts")
    checkers = _remote("checkers")
    configure_checker = _remote("configure_checker")
    remove_checker = _remote("remove_checker")
    offset_for_time = _remote("offset_for_time")
    browse_queue = _remote("browse_queue")
    get_message = _remote("get_message")
    search_messages = _remote("search_messages")
    send = _remote("send")
    resend = _remote("resend")
    topics_with_depths = _remote("topics_with_depths")
    get_topic = _remote("get_topic")
    create_topic = _remote("create_topic")
    update_topic = _remote("update_topic")
    delete_topic = _remote("delete_topic")
    queue_ranges = _remote("queue_ranges")
    clients = _remote("clients")
    consumer_lag = _remote("consumer_lag")
    group_queues = _remote("group_queues")
    message_consumers = _remote("message_consumers")
    groups = _remote("groups")
    put_group = _remote("put_group")
    preview_reset = _remote("preview_reset")
    apply_reset = _remote("apply_reset")
    delay_stats = _remote("delay_stats")
    list_scheduled = _remote("list_scheduled")
    recall = _remote("recall")
    store_status = _remote("store_status")
    node_runtime = _remote("node_runtime")
    node_status = _remote("node_status")
    promote = _remote("promote")

    def _call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not self.url:
            raise NodeUnavailableError(
                "the node advertises no admin API (--admin-listen)"
            )
        check_host(self.url, self.allowed_hosts)
        data = json.dumps(
            {"args": opscodec.encode(args), "kwargs": opscodec.encode(kwargs)}
        ).encode()
        req = urllib.request.Request(
            f"{self.url}/v1/ops/{name}",
            data=data,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
            },
        )
        write = name not in READS
        wait = self.write_timeout if write else self.timeout
        try:
            with urllib.request.urlopen(req, timeout=wait, context=self.context) as r:
                payload = json.loads(r.read())
        except TimeoutError:
            if write:
                raise NodeUnavailableError(
                    f"node {self.url}: {name}: no answer within {wait:g} s; the "
                    "node may still carry it out: look before trying again"
                ) from None
            raise NodeUnavailableError(
                f"node {self.url}: {name}: no answer within {wait:g} s"
            ) from None
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read())
            except ValueError:
                payload = {}
            err = payload.get("broker_error") if isinstance(payload, dict) else None
            if isinstance(err, dict):
                raise opscodec.decode_error(err) from None
            detail = payload.get("error") if isinstance(payload, dict) else None
            raise NodeUnavailableError(
                f"node {self.url}: {name} answered {exc.code}: {detail or exc.reason}",
                exc.code,
            ) from None
        except (OSError, ValueError) as exc:
            raise NodeUnavailableError(f"node {self.url}: {name}: {exc}") from None
        if not isinstance(payload, dict) or "result" not in payload:
            raise NodeUnavailableError(f"node {self.url}: {name}: no result")
        return opscodec.decode(payload["result"])


def run_remote(
    ops: NodeOps, name: str, body: dict[str, Any], writable: bool
) -> tuple[int, dict[str, Any]]:
    """The admin API's answer to ``POST /v1/ops/<name>``: (status, payload).

    A library error is 4xx/5xx with ``broker_error`` (``RemoteNodeOps``
    raises it again on the console's side)."""
    try:
        return 200, {"result": ops.call(name, body, writable)}
    except KeyError:
        return 404, {"error": f"no operation {name!r}"}
    except opscodec.CodecError as exc:
        return 400, {"error": str(exc)}
    except BrokerError as exc:
        return exc.http_status, {
            "error": str(exc),
            "broker_error": opscodec.encode_error(exc),
        }


def _conforms(local: NodeOps, remote: RemoteNodeOps) -> list[NodeOperations]:
    """Both kinds of node are ``NodeOperations`` (checked by mypy)."""
    return [local, remote]
