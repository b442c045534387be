"""The console's way to a cluster: nodes from the route registry, everything
else through each node's admin API (``broker_core.cluster.admin``).

Settings: ``BROKER_CLUSTER`` (the cluster's name; empty: no cluster page),
``REGISTRY_URL`` (the route registry's Redis, default ``REDIS_URL``) and
``CLUSTER_ADMIN_TOKEN_FILE`` (the nodes' admin token).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from console.audit.services import audited

TIMEOUT_S = 5.0


class NodeUnavailable(Exception):
    """A node's admin API did not answer, or answered with an error."""


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


def enabled() -> bool:
    return bool(getattr(settings, "BROKER_CLUSTER", ""))


def _registry() -> Any:
    from broker_core.cluster import RouteRegistry

    url = getattr(settings, "REGISTRY_URL", "") or settings.REDIS_URL
    return RouteRegistry(url, settings.BROKER_CLUSTER)


def _token() -> str:
    path = getattr(settings, "CLUSTER_ADMIN_TOKEN_FILE", "")
    if not path:
        raise NodeUnavailable("CLUSTER_ADMIN_TOKEN_FILE is not set")
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise NodeUnavailable(f"CLUSTER_ADMIN_TOKEN_FILE: {exc}") from exc


def admin_call(base: str, method: str, path: str, body: Any = None) -> Any:
    """Call a node's admin API; raise ``NodeUnavailable`` with its reason."""
    if not base:
        raise NodeUnavailable("the node advertises no admin API (--admin-listen)")
    req = urllib.request.Request(
        base.rstrip("/") + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {_token()}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error", "")
        except ValueError:
            reason = ""
        raise NodeUnavailable(f"HTTP {exc.code}: {reason or exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeUnavailable(f"{base}: {exc}") from exc


def nodes() -> list[NodeView]:
    """Every live node, with its replication as its admin API reports it."""
    out = []
    for n in _registry().nodes():
        view = NodeView(
            n.name, n.broker_id, n.role, n.endpoints, n.admin, n.log_end,
            n.heartbeat_ms,
        )  # fmt: skip
        try:
            status = admin_call(n.admin, "GET", "/v1/node")
        except NodeUnavailable as exc:
            view.error = str(exc)
        else:
            view.log_end = status.get("log_end", view.log_end)
            view.slaves = status.get("slaves") or []
            following = status.get("following") or {}
            if following:
                view.lag_bytes = following.get("lag_bytes")
        out.append(view)
    return out


def pending_halves(views: list[NodeView]) -> tuple[list[dict[str, Any]], list[str]]:
    """The pending halves of every master, each with its node; and the nodes
    that could not be asked (shown, not hidden)."""
    rows: list[dict[str, Any]] = []
    errors = []
    for v in views:
        if not v.is_master:
            continue
        try:
            page = admin_call(v.admin, "GET", "/v1/halves?state=PENDING&page_size=200")
        except NodeUnavailable as exc:
            errors.append(f"{v.name}: {exc}")
            continue
        for h in page["items"]:
            rows.append({"node": v.name, **h})
    rows.sort(key=lambda r: (r.get("born_timestamp") or 0, r["node"]))
    return rows, errors


def decide(node: str, transaction_id: str, verb: str, actor: Any, reason: str,
           request: Any = None) -> Any:  # fmt: skip
    """Commit or roll back a half on the master of ``node`` that holds it,
    audited (object ``<node>/<transaction id>``)."""
    if verb not in ("commit", "rollback"):
        raise ValueError(f"unknown decision {verb!r}")
    target = _registry().find(node)
    if target is None or not target.is_master:
        raise NodeUnavailable(f"{node} has no live master")
    return audited(
        lambda: admin_call(
            target.admin,
            "POST",
            f"/v1/halves/{transaction_id}/{verb}",
            {"operator": actor.get_username()},
        ),  # fmt: skip
        actor=actor,
        request=request,
        action=f"transaction.{verb}",
        object_type="transaction",
        object_id=f"{node}/{transaction_id}",
        reason=reason,
    )


def put_topic(nodes: list[str], topic: str, queues: int, actor: Any,
              request: Any = None) -> dict[str, str]:  # fmt: skip
    """Create (or resize) ``topic`` with ``queues`` read and write queues on
    each named master; audited per node (``<node>/<topic>``). Returns node ->
    "created"/"updated" or the reason it failed."""
    registry = _registry()
    out: dict[str, str] = {}
    for name in nodes:
        target = registry.find(name)
        if target is None or not target.is_master:
            out[name] = "no live master"
            continue
        body = {"topic": topic, "read_queues": queues, "write_queues": queues}
        try:
            done = audited(
                lambda t=target, b=body: admin_call(t.admin, "POST", "/v1/topics", b),
                actor=actor,
                request=request,
                action="topic.create",
                object_type="topic",
                object_id=f"{name}/{topic}",
                after=lambda r: r,
            )
        except NodeUnavailable as exc:
            out[name] = f"failed: {exc}"
        else:
            out[name] = done["result"]
    return out
