"""A node's figures in Prometheus' text format: ``GET /metrics`` on the admin API.

Scraped with the node's admin token (Prometheus: ``authorization:
{credentials_file: /etc/broker/admin.token}``), from the admin port of every
node (``serve --admin-listen``) and of ``serve --admin-only``. Each scrape
reads the node as its ``node_status`` operation does, plus the transaction gauges and
counters, the delay backlog, the store's disk and the consume queues it can
check (``store_damaged``); nothing is kept between scrapes (the counters
are the node's own since it started, or, for the transaction counters, since
its index was built from the log).

Names start with ``rocketmq_broker_``; every series carries ``cluster`` and
``node`` labels (empty for a node outside a cluster). What each alert in
docs/cluster.md "Monitoring" watches is listed there.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker_core.errors import BrokerError
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC

log = logging.getLogger(__name__)

P = "rocketmq_broker_"
#: the content type of the answer (text format 0.0.4)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NodeCollector(Collector):
    """Collects one node's figures from its admin API object (``AdminServer``)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def collect(self) -> Iterator[Metric]:
        api = self.api
        node = api.node()
        base = {"cluster": node.get("cluster") or "", "node": node.get("node") or ""}
        keys, vals = list(base), list(base.values())

        def gauge(name: str, doc: str, value: float, **labels: str) -> Metric:
            g = GaugeMetricFamily(P + name, doc, labels=[*keys, *labels])
            g.add_metric([*vals, *labels.values()], value)
            return g

        role = str(node.get("role") or "")
        yield gauge("info", "The node's role (1 per node).", 1, role=role)
        yield gauge(
            "may_write",
            "1 if this node takes writes now (a master, not fenced, under the "
            "controller holding its lease).",
            1 if api.ep.writable() else 0,
        )
        yield gauge(
            "commitlog_end_bytes", "The commit log's end (bytes).", node["log_end"]
        )
        try:
            disk = shutil.disk_usage(api.ep.store.root)
        except OSError:
            disk = None
        if disk is not None:
            yield gauge("disk_free_bytes", "Free bytes on the store's disk.", disk.free)
            yield gauge("disk_size_bytes", "Size of the store's disk.", disk.total)
        events = CounterMetricFamily(
            P + "endpoint_events",
            "The gRPC endpoint's counters since it started (sent, received, "
            "acked, ...).",
            labels=[*keys, "event"],
        )
        for name, n in sorted((node.get("counters") or {}).items()):
            if isinstance(n, int | float):
                events.add_metric([*vals, str(name)], n)
        yield events
        yield from self._replication(node, keys, vals)
        yield from self._controller(node, keys, vals)
        cut = sum(
            int(c.get("client_messages") or 0) for c in node.get("cut_tails") or []
        )
        yield gauge(
            "cut_tail_messages",
            "Client messages this store held as a master and cut when it "
            "rejoined (kept under ha/cut; lost to consumers).",
            cut,
        )
        yield from self._transactions(keys, vals)
        stats = self._delay_stats()
        damaged = self._damaged_queues(role, stats)
        yield from self._delays(stats, damaged, keys, vals)
        yield from self._damage(damaged, keys, vals)

    @staticmethod
    def _replication(
        node: dict[str, Any], keys: list[str], vals: list[str]
    ) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            P + "slave_lag_bytes",
            "A master's view of each slave: bytes it has not acknowledged.",
            labels=[*keys, "slave"],
        )
        up = GaugeMetricFamily(
            P + "slave_connected",
            "A master's view of each slave: 1 connected, 0 gone (kept 10 min).",
            labels=[*keys, "slave"],
        )
        stalled = GaugeMetricFamily(
            P + "slave_stalled_seconds",
            "Seconds since a connected slave last acknowledged while behind "
            "(0: keeping up).",
            labels=[*keys, "slave"],
        )
        for s in node.get("slaves") or []:
            name = str(s.get("node") or s.get("address") or "")
            lag.add_metric([*vals, name], s.get("lag_bytes") or 0)
            up.add_metric([*vals, name], 1 if s.get("connected") else 0)
            stalled.add_metric([*vals, name], s.get("stalled_s") or 0)
        yield lag
        yield up
        yield stalled
        following = node.get("following")
        if following:
            for name, doc, value in (
                ("follower_connected", "A slave: 1 connected to its master.",
                 1 if following.get("connected") else 0),
                ("follower_lag_bytes", "A slave: bytes behind its master's end.",
                 following.get("lag_bytes") or 0),
            ):  # fmt: skip
                g = GaugeMetricFamily(P + name, doc, labels=keys)
                g.add_metric(vals, value)
                yield g

    @staticmethod
    def _controller(
        node: dict[str, Any], keys: list[str], vals: list[str]
    ) -> Iterator[Metric]:
        ctl = node.get("controller")
        if not ctl:
            return
        for name, doc, value in (
            ("controller_leading", "1 while this node leads its name's term.",
             1 if ctl.get("leading") else 0),
            ("controller_lease_left_seconds", "Seconds of lease this leader has left.",
             ctl.get("lease_left_s") or 0),
            ("controller_term", "The term's fencing token (0: not leading).",
             ctl.get("term") or 0),
        ):  # fmt: skip
            g = GaugeMetricFamily(P + name, doc, labels=keys)
            g.add_metric(vals, value)
            yield g
        isr = node.get("isr")
        if isinstance(isr, list):
            g = GaugeMetricFamily(
                P + "in_sync_slaves", "Slaves in the published in-sync set.",
                labels=keys,
            )  # fmt: skip
            g.add_metric(vals, len(isr))
            yield g

    def _transactions(self, keys: list[str], vals: list[str]) -> Iterator[Metric]:
        tx = getattr(self.api.ep, "tx", None)
        if tx is None:
            return
        try:
            m = tx.metrics()  # the index caught up with the log (at most 2 s)
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape stands
            log.warning("metrics: transaction figures unavailable: %s", exc)
            return
        pending = GaugeMetricFamily(
            P + "halves_pending", "Pending half messages per topic.",
            labels=[*keys, "topic"],
        )  # fmt: skip
        for topic, n in sorted(m.pending_by_topic.items()):
            pending.add_metric([*vals, topic], n)
        yield pending
        g = GaugeMetricFamily(
            P + "halves_discarded",
            "Halves discarded after their last check-back (an operator decides).",
            labels=keys,
        )
        g.add_metric(vals, m.discarded)
        yield g
        outcomes = CounterMetricFamily(
            P + "transaction_outcomes", "Commits, rollbacks, discards, resumes.",
            labels=[*keys, "outcome"],
        )  # fmt: skip
        for name in ("commits", "rollbacks", "discards", "resumes"):
            outcomes.add_metric([*vals, name], getattr(m, name))
        yield outcomes
        checks = CounterMetricFamily(
            P + "transaction_checks", "Check-backs by result.",
            labels=[*keys, "result"],
        )  # fmt: skip
        for name in ("commit", "rollback", "unknown", "no_producer", "timeout",
                     "error"):  # fmt: skip
            checks.add_metric([*vals, name], getattr(m, f"checks_{name}"))
        yield checks

    def _delay_stats(self) -> Any:
        delays = getattr(self.api.ep, "delays", None)
        if delays is None:
            return None
        try:
            return delays.stats()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape stands
            log.warning("metrics: delay figures unavailable: %s", exc)
            return None

    @staticmethod
    def _delays(
        stats: Any,
        damaged: dict[tuple[str, int], str] | None,
        keys: list[str],
        vals: list[str],
    ) -> Iterator[Metric]:
        if stats is None:
            return
        backlog = GaugeMetricFamily(
            P + "delay_backlog",
            "Scheduled messages not yet delivered, per level (NaN: the level's "
            "queue is damaged, see store_damaged).",
            labels=[*keys, "level"],
        )
        overdue = GaugeMetricFamily(
            P + "delay_overdue_seconds",
            "How long the oldest due message of a level has waited (0: none, "
            "or no message with a known due time).",
            labels=[*keys, "level"],
        )
        for lv in stats.levels:
            bad = damaged is not None and (SCHEDULE_TOPIC, lv.queue_id) in damaged
            n = math.nan if bad else lv.backlog
            backlog.add_metric([*vals, str(lv.level)], n)
            overdue.add_metric([*vals, str(lv.level)], _overdue_s(lv))
        bad = damaged is not None and (TIMER_TOPIC, 0) in damaged
        backlog.add_metric([*vals, "timer"], math.nan if bad else stats.timers.pending)
        overdue.add_metric([*vals, "timer"], _overdue_s(stats.timers))
        yield backlog
        yield overdue

    def _damaged_queues(
        self, role: str, stats: Any
    ) -> dict[tuple[str, int], str] | None:
        """Consume queues whose figures cannot be trusted, (topic, queue id)
        -> why: ``unreadable`` (reading it fails), ``missing`` (its files were
        deleted under this process, which still reads its own mapping; the
        next open finds nothing), ``short`` (a group's committed offset, or a
        delay level's delivered offset, lies beyond the queue's end: units
        were lost, a deleted directory or files cut short, and its depth and
        backlog read as 0 or less than the truth).

        Only queues with something to compare are checked (committed
        offsets, the delay levels, and the queues this process has read): a
        queue lost before anything consumed from it is found by ``verify``.
        None if the check itself failed.
        """
        store = self.api.ep.store
        found: dict[tuple[str, int], str] = {}

        def end_of(topic: str, qid: int) -> int | None:
            try:
                return int(store.max_offset(topic, qid))
            except (OSError, BrokerError) as exc:
                found[(topic, qid)] = "unreadable"
                log.warning("metrics: consume queue %s/%d unreadable: %s",
                            topic, qid, exc)  # fmt: skip
                return None

        try:
            store.refresh_topics()  # a topic deleted elsewhere: its queues forgotten
            for (topic, qid), cq in list(store.cqs.queues.items()):
                if cq.segments.unlinked():
                    found[(topic, qid)] = "missing"
            for lv in stats.levels if stats is not None else ():
                if lv.units_lost > 0 or lv.offset > lv.max_offset:
                    found.setdefault((SCHEDULE_TOPIC, lv.queue_id), "short")
            if stats is not None and stats.timers.units_lost > 0:
                found.setdefault((TIMER_TOPIC, 0), "short")
            if stats is None and getattr(self.api.ep, "delays", None) is not None:
                # The delay figures failed: a level's queue may be why.
                levels = range(len(store.config.delay_levels_ms))
                for topic, q in [
                    *((SCHEDULE_TOPIC, q) for q in levels),
                    (TIMER_TOPIC, 0),
                ]:
                    if (topic, q) not in found:
                        end_of(topic, q)
            # A slave's offsets are its master's, synced ahead of its own log.
            if role != "SLAVE":
                for key, queues in store.all_offsets().items():
                    topic, _, _group = key.partition("@")
                    if store.topic_config(topic) is None:
                        continue
                    for q, committed in queues.items():
                        if (topic, int(q)) in found:
                            continue
                        end = end_of(topic, int(q))
                        if end is not None and int(committed) > end:
                            found[(topic, int(q))] = "short"
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape stands
            log.warning("metrics: store damage check failed: %s", exc)
            return None
        return found

    @staticmethod
    def _damage(
        damaged: dict[tuple[str, int], str] | None, keys: list[str], vals: list[str]
    ) -> Iterator[Metric]:
        total = GaugeMetricFamily(
            P + "store_damaged",
            "Consume queues found damaged (0: none found, NaN: the check "
            "failed); each is listed in queue_damaged.",
            labels=keys,
        )
        total.add_metric(vals, math.nan if damaged is None else len(damaged))
        yield total
        if damaged is None:
            return
        each = GaugeMetricFamily(
            P + "queue_damaged",
            "1 per damaged consume queue, with why: unreadable, missing (its "
            "files deleted under the running node) or short (offsets beyond "
            "its end: units lost).",
            labels=[*keys, "topic", "queue", "reason"],
        )
        for (topic, qid), why in sorted(damaged.items()):
            each.add_metric([*vals, topic, str(qid), why], 1)
        yield each


def _overdue_s(figures: Any) -> float:
    """Seconds the oldest due message has waited: only from a real due time
    (``next_due_ms`` above 0), never from the epoch."""
    if not figures.next_due_ms or figures.next_due_ms <= 0:
        return 0.0
    return max(0, figures.oldest_overdue_ms) / 1000


def render(api: Any) -> bytes:
    """The node's metrics in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(api))
    return generate_latest(registry)
