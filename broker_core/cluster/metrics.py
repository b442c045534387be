"""A node's figures in Prometheus' text format: ``GET /metrics`` on the admin API.

Scraped with the node's admin token (Prometheus: ``authorization:
{credentials_file: /etc/broker/admin.token}``), from the admin port of every
node (``serve --admin-listen``) and of ``serve --admin-only``. Each scrape
reads the node as ``GET /v1/node`` does, plus the transaction gauges and
counters, the delay backlog and the store's disk; nothing is kept between
scrapes (the counters are the node's own since it started, or, for the
transaction counters, since its index was built from the log).

Names start with ``rocketmq_broker_``; every series carries ``cluster`` and
``node`` labels (empty for a node outside a cluster). What each alert in
docs/cluster.md "Monitoring" watches is listed there.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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
        yield from self._delays(keys, vals)

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

    def _delays(self, keys: list[str], vals: list[str]) -> Iterator[Metric]:
        delays = getattr(self.api.ep, "delays", None)
        if delays is None:
            return
        try:
            stats = delays.stats()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape stands
            log.warning("metrics: delay figures unavailable: %s", exc)
            return
        backlog = GaugeMetricFamily(
            P + "delay_backlog", "Scheduled messages not yet delivered, per level.",
            labels=[*keys, "level"],
        )  # fmt: skip
        overdue = GaugeMetricFamily(
            P + "delay_overdue_seconds",
            "How long the oldest due message of a level has waited (0: none).",
            labels=[*keys, "level"],
        )
        for lv in stats.levels:
            backlog.add_metric([*vals, str(lv.level)], lv.backlog)
            overdue.add_metric([*vals, str(lv.level)], lv.oldest_overdue_ms / 1000)
        backlog.add_metric([*vals, "timer"], stats.timers.pending)
        overdue.add_metric([*vals, "timer"], stats.timers.oldest_overdue_ms / 1000)
        yield backlog
        yield overdue


def render(api: Any) -> bytes:
    """The node's metrics in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(api))
    return generate_latest(registry)
