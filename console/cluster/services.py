"""The console's way to a cluster: nodes from the route registry, everything
else through each node's admin API (``broker_core.cluster.admin``).

Settings: ``BROKER_CLUSTER`` (the cluster's name; empty: no cluster page),
``REGISTRY_URL`` (the route registry's Redis, default ``REDIS_URL``) and
``CLUSTER_ADMIN_TOKEN_FILE`` (the nodes' admin token).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from broker_core.cluster.node_ops import NodeUnavailableError
from console.audit.services import audited

#: One admin read's timeout (``CLUSTER_ADMIN_TIMEOUT_S`` overrides it).
TIMEOUT_S = 5.0
#: One admin write's (``CLUSTER_ADMIN_WRITE_TIMEOUT_S`` overrides it).
WRITE_TIMEOUT_S = 30.0
#: Calls made at once (a node's paths and every node's); more wait for a
#: free thread, within the same total wait.
MAX_PARALLEL = 32


class NodeUnavailable(NodeUnavailableError):
    """A node's admin API did not answer, or answered with an error (then
    ``status`` is the HTTP status): the library's ``NodeUnavailableError``
    (what ``RemoteNodeOps`` raises), with the status of the answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
        """The view of a registry ``NodeInfo``, before its admin API answers."""
        return cls(
            n.name, n.broker_id, n.role, n.endpoints, n.admin, n.log_end,
            n.heartbeat_ms,
        )  # fmt: skip

    def take_status(self, status: dict[str, Any]) -> dict[str, Any]:
        """Update from the node's ``GET /v1/node``; return what a slave
        follows (its master and lag), empty for a master."""
        self.log_end = status.get("log_end", self.log_end)
        self.slaves = status.get("slaves") or []
        following = status.get("following") or {}
        if following:
            self.lag_bytes = following.get("lag_bytes")
        return dict(following)


def take_failures(got: dict[str, Any]) -> dict[str, NodeUnavailable]:
    """Of one node's ``ask_nodes`` answers, the paths that have none and why;
    each is replaced by an empty answer, so the rest of the page is built."""
    failed = {p: a for p, a in got.items() if isinstance(a, NodeUnavailable)}
    for path in failed:
        got[path] = {}
    return failed


def failure_sentence(label: str, path: str, exc: NodeUnavailable) -> str:
    """What the page says of a path of the node ``label`` with no answer."""
    what = "answered" if exc.status else "did not answer"
    return f"{label} {what} {path.split('?')[0]}: {exc}"


def enabled() -> bool:
    return bool(getattr(settings, "BROKER_CLUSTER", ""))


def registry() -> Any:
    from broker_core.cluster import RouteRegistry

    url = getattr(settings, "REGISTRY_URL", "") or settings.REDIS_URL
    return RouteRegistry(url, settings.BROKER_CLUSTER)


def _find(name: str, broker_id: int | None = None) -> Any:
    """A live node from the registry (None: not registered); a registry that
    does not answer is a ``NodeUnavailable`` saying so, not a server error."""
    try:
        return registry().find(name, broker_id)
    except Exception as exc:  # noqa: BLE001 - redis errors, a bad URL
        raise NodeUnavailable(f"route registry: {exc}") from exc


def _token() -> str:
    path = getattr(settings, "CLUSTER_ADMIN_TOKEN_FILE", "")
    if not path:
        raise NodeUnavailable("CLUSTER_ADMIN_TOKEN_FILE is not set")
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise NodeUnavailable(f"CLUSTER_ADMIN_TOKEN_FILE: {exc}") from exc


def remote_node_ops(base: str) -> Any:
    """The ``NodeOps`` of the node whose admin API is at ``base``: the token
    of ``CLUSTER_ADMIN_TOKEN_FILE``, a read's and a write's timeouts.
    Raises ``NodeUnavailableError`` (a ``BrokerError``) without a token."""
    from broker_core.cluster.node_ops import RemoteNodeOps

    try:
        token = _token()
    except NodeUnavailable as exc:
        raise NodeUnavailableError(str(exc)) from exc
    if not token:
        raise NodeUnavailableError("CLUSTER_ADMIN_TOKEN_FILE holds no token")
    return RemoteNodeOps(base, token, timeout_s(), write_timeout=write_timeout_s())


def timeout_s() -> float:
    """One admin read's timeout: ``CLUSTER_ADMIN_TIMEOUT_S`` or 5 s."""
    return float(getattr(settings, "CLUSTER_ADMIN_TIMEOUT_S", TIMEOUT_S) or TIMEOUT_S)


def write_timeout_s() -> float:
    """One admin write's timeout (a promotion stops a follower that may be
    stuck connecting to a dead master): ``CLUSTER_ADMIN_WRITE_TIMEOUT_S``."""
    value = getattr(settings, "CLUSTER_ADMIN_WRITE_TIMEOUT_S", WRITE_TIMEOUT_S)
    return float(value or WRITE_TIMEOUT_S)


def admin_call(
    base: str, method: str, path: str, body: Any = None, timeout: float | None = None
) -> Any:
    """Call a node's admin API; raise ``NodeUnavailable`` with its reason."""
    if not base:
        raise NodeUnavailable("the node advertises no admin API (--admin-listen)")
    check_admin_host(base)
    req = urllib.request.Request(
        base.rstrip("/") + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {_token()}",
            "Content-Type": "application/json",
        },
    )
    write = method != "GET"
    wait = timeout or (write_timeout_s() if write else timeout_s())
    try:
        with urllib.request.urlopen(req, timeout=wait) as r:
            return json.loads(r.read())
    except TimeoutError as exc:
        if write:
            raise NodeUnavailable(
                f"{base}: no answer within {wait:g} s; the node may still carry "
                "it out: look at the node before trying again"
            ) from exc
        raise NodeUnavailable(f"{base}: no answer within {wait:g} s") from exc
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error", "")
        except ValueError:
            reason = ""
        raise NodeUnavailable(
            f"HTTP {exc.code}: {reason or exc.reason}", exc.code
        ) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NodeUnavailable(f"{base}: {exc}") from exc


def check_admin_host(base: str) -> None:
    """Refuse to send the token to an admin URL outside ``CLUSTER_ADMIN_HOSTS``
    (host names, addresses or networks; empty: any). A node registers its
    admin URL in the registry: whoever can write there could otherwise
    collect the cluster's admin token."""
    import ipaddress
    import urllib.parse

    allowed = getattr(settings, "CLUSTER_ADMIN_HOSTS", []) or []
    if not allowed:
        return
    host = urllib.parse.urlsplit(base).hostname or ""
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
    raise NodeUnavailable(
        f"{base}: {host} is not in CLUSTER_ADMIN_HOSTS, so the admin token is "
        "not sent there"
    )


def ask_nodes(
    calls: dict[str, tuple[str, list[str]]],
    status_first: bool = True,
) -> dict[str, dict[str, Any] | NodeUnavailable]:
    """Ask every node at once: ``calls`` maps a node's key to its admin URL
    and the paths to GET from it (the first one its status); the answer maps
    each key to ``{path: answer or NodeUnavailable}``, or (``status_first``)
    to the ``NodeUnavailable`` of its first path when that one has no answer.

    Every path of every node is asked at once and the whole fan-out waits at
    most one call's timeout plus a second: a node that never answers (a host
    that drops packets) costs the page that wait once, not once per node or
    path, and is named in the answer, not left out; a node slow on one path
    (a long delay backlog) keeps the answers of the others.
    """
    if not calls:
        return {}
    budget = timeout_s() + 1.0
    deadline = time.monotonic() + budget
    jobs = [(key, base, path) for key, (base, paths) in calls.items() for path in paths]
    pool = ThreadPoolExecutor(
        min(MAX_PARALLEL, len(jobs)), thread_name_prefix="cluster-admin"
    )

    def ask(base: str, path: str) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NodeUnavailable(f"no answer within {budget:g} s")
        wait = min(timeout_s(), left)
        if path.startswith(OPS_PREFIX):  # a read of the node's operations
            return _op_result(admin_call(base, "POST", path, {}, timeout=wait))
        return admin_call(base, "GET", path, timeout=wait)

    futures = [(key, path, pool.submit(ask, base, path)) for key, base, path in jobs]
    # Do not wait for a silent node's thread: its socket timeout ends it.
    pool.shutdown(wait=False, cancel_futures=False)
    out: dict[str, dict[str, Any] | NodeUnavailable] = {}
    for key, path, fut in futures:
        try:
            answer = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except NodeUnavailable as exc:
            answer = exc
        except TimeoutError:
            fut.cancel()
            answer = NodeUnavailable(f"no answer within {budget:g} s")
        except Exception as exc:  # noqa: BLE001 - shown on the page, per node
            answer = NodeUnavailable(f"{type(exc).__name__}: {exc}")
        got = out.setdefault(key, {})
        if isinstance(got, NodeUnavailable):
            continue  # its status did not answer: the node is shown as such
        if (
            status_first
            and isinstance(answer, NodeUnavailable)
            and path == calls[key][1][0]
        ):
            out[key] = answer
        else:
            got[path] = answer
    return out


#: Reads of ``NodeOps`` (``POST /v1/ops/<name>``, no arguments) asked beside
#: the GET paths; the answer is the operation's decoded result.
OPS_PREFIX = "/v1/ops/"
TX_METRICS_PATH = OPS_PREFIX + "transaction_metrics"


def _op_result(payload: Any) -> Any:
    from broker_core.cluster import opscodec

    if not isinstance(payload, dict) or "result" not in payload:
        raise NodeUnavailable("the node answered something that is not a result")
    return opscodec.decode(payload["result"])


HALVES_PATH = "/v1/halves?state=PENDING&page_size=200"
DISCARDED_PATH = "/v1/halves?state=DISCARDED&page_size=200"
#: What the page asks every node, and every master besides.
NODE_PATHS = ["/v1/node"]
MASTER_PATHS = [
    HALVES_PATH,
    DISCARDED_PATH,
    "/v1/consumers",
    "/v1/delays",
    TX_METRICS_PATH,
]

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
    """Every live node of the registry and what its admin API reports: the
    replication of each; the pending halves, consumer lag and delay levels of
    each master, aggregated with the node named."""
    views: list[NodeView] = []
    calls: dict[str, tuple[str, list[str]]] = {}
    for n in registry().nodes():
        view = NodeView.of(n)
        views.append(view)
        calls[view.key] = (
            n.admin,
            NODE_PATHS + (MASTER_PATHS if view.is_master else []),
        )
    answers = ask_nodes(calls)
    state = ClusterState(views)
    for view in views:
        got = answers[view.key]
        if isinstance(got, NodeUnavailable):
            view.error = str(got)
            state.errors.append(f"Not reachable: {view.name} ({view.role}): {got}")
            continue
        for path, exc in take_failures(got).items():
            state.errors.append(
                failure_sentence(f"{view.name} ({view.role})", path, exc)
            )
        view.take_status(got["/v1/node"])
        for h in got.get(HALVES_PATH, {}).get("items", ()):
            state.halves.append({"node": view.name, **h})
        for h in got.get(DISCARDED_PATH, {}).get("items", ()):
            state.discarded.append({"node": view.name, **h})
        state.lag += _lag_rows(view.name, got.get("/v1/consumers", {}))
        state.delays += _delay_rows(view.name, got.get("/v1/delays", {}))
        if view.is_master and got.get(TX_METRICS_PATH):
            state.transactions = _add_metrics(state.transactions, got[TX_METRICS_PATH])
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


def _lag_rows(node: str, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """A node's ``/v1/consumers`` queues summed per group and topic."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for q in answer.get("queues", ()):
        row = rows.setdefault(
            (q["group"], q["topic"]),
            {"group": q["group"], "topic": q["topic"], "node": node, "queues": 0,
             "lag": 0, "max_lag": 0},
        )  # fmt: skip
        row["queues"] += 1
        row["lag"] += q["lag"]
        row["max_lag"] = max(row["max_lag"], q["lag"])
    return list(rows.values())


def _delay_rows(node: str, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """A node's ``/v1/delays``: the levels with messages waiting, and its
    timers if any are pending."""
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


def decide(node: str, transaction_id: str, verb: str, actor: Any, reason: str,
           request: Any = None) -> Any:  # fmt: skip
    """Commit, roll back or resume (a discarded half checked again) a half on
    the master of ``node`` that holds it: the Transactions pages' own action
    (``transactions.services.perform``) on that node, audited as there
    (object ``<node>/<transaction id>``). Raises ``NodeUnavailable`` without a
    live master, the node's ``BrokerError`` otherwise."""
    from console.cluster.scope import showing
    from console.transactions.services import perform

    if verb not in ("commit", "rollback", "resume"):
        raise ValueError(f"unknown decision {verb!r}")
    _master(node)
    with showing(node):
        return perform(
            verb, actor=actor, transaction_id=transaction_id, reason=reason,
            request=request,
        )  # fmt: skip


def promote(node_key: str, role: str, actor: Any, reason: str, force: bool = False,
            request: Any = None) -> Any:  # fmt: skip
    """Make the slave ``node_key`` (``name:broker id``) a master through its
    admin API, audited (object ``<name>:<id>``). The node refuses while its
    master still heartbeats unless ``force``; its routes follow at its next
    heartbeat, which it sends at once."""
    target = live_node(node_key)
    if target.is_master:
        raise NodeUnavailable(f"{node_key} is already a master ({target.role})")
    return audited(
        lambda: admin_call(
            target.admin,
            "POST",
            "/v1/promote",
            {"operator": actor.get_username(), "role": role, "force": force},
        ),
        actor=actor,
        request=request,
        action="cluster.promote",
        object_type="node",
        object_id=node_key,
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
    from console.cluster.scope import showing
    from console.topics import services as topics

    out: dict[str, str] = {}
    for name in nodes:
        try:
            _master(name)
        except NodeUnavailable as exc:
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


def live_node(node: str) -> Any:
    """The live node named ``name`` (its serving node) or ``name:broker_id``."""
    name, _, bid = node.partition(":")
    try:
        target = _find(name, int(bid)) if bid else _find(name)
    except ValueError:
        target = None
    if target is None:
        raise NodeUnavailable(f"{node} is not a live node")
    return target


def _master(node: str) -> Any:
    target = live_node(node)
    if not target.is_master:
        raise NodeUnavailable(f"{node} has no live master")
    return target


@dataclass
class NodeSearch:
    """What one node found: its messages (each with ``node``), or why none."""

    node: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: the node's reason when it found nothing (an unknown id or topic)
    note: str = ""


def _messages_path(topic: str, key: str, msg_id: str, limit: int) -> str:
    """A node's ``GET /v1/messages`` for the page's search, without bodies."""
    params = {"topic": topic, "key": key, "msg_id": msg_id}
    return "/v1/messages?" + urllib.parse.urlencode(
        {k: v for k, v in params.items() if v} | {"limit": limit, "body": "none"}
    )


#: ``search_node``'s node for "every broker" (its serving node each).
EVERY_NODE = "*"


def search_every_node(
    *, topic: str = "", key: str = "", msg_id: str = "", limit: int = 50
) -> NodeSearch:
    """Search every broker's serving node (its master, or its slave while the
    master is away) at once, as ``search_node`` searches one: a message is
    found wherever it is stored without the operator knowing the node. A node
    that does not answer, or has no such topic, is named in ``note``."""
    try:
        serving = registry().serving()
    except Exception as exc:  # noqa: BLE001 - redis errors, a bad URL
        raise NodeUnavailable(f"route registry: {exc}") from exc
    path = _messages_path(topic, key, msg_id, limit)
    got = ask_nodes({n.key: (n.admin, [path]) for n in serving.values()})
    found = NodeSearch("every node")
    notes = []
    for n in sorted(serving.values(), key=lambda n: n.name):
        answer = got.get(n.key)
        if isinstance(answer, dict):
            answer = answer.get(path)
        if isinstance(answer, NodeUnavailable):
            if answer.status != 404:
                notes.append(f"{n.key}: {answer}")
            continue
        if isinstance(answer, dict):
            found.messages += [
                {"node": n.name, "node_key": n.key, **m}
                for m in answer.get("messages", ())
            ]
    found.messages.sort(key=lambda m: -int(m.get("store_timestamp") or 0))
    found.messages = found.messages[:limit]
    found.note = "; ".join(notes)
    return found


def search_node(
    node: str, *, topic: str = "", key: str = "", msg_id: str = "", limit: int = 50
) -> NodeSearch:
    """Search one live node, master or slave (``name:broker_id``), by message
    id, or by key in ``topic``, or the newest of ``topic``, through its
    ``GET /v1/messages``; bodies are not fetched. Raises ``NodeUnavailable``
    when the node does not answer or refuses the query (400)."""
    target = live_node(node)
    found = NodeSearch(target.key)
    try:
        answer = admin_call(
            target.admin, "GET", _messages_path(topic, key, msg_id, limit)
        )
    except NodeUnavailable as exc:
        if exc.status != 404:
            raise
        found.note = str(exc)
        return found
    found.messages = [
        {"node": target.name, "node_key": target.key, **m}
        for m in answer.get("messages", ())
    ]
    return found


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
    from dataclasses import asdict

    from console.cluster.scope import showing
    from console.consumers.services import reset_offsets

    _master(node)
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
    from console.cluster.scope import showing
    from console.delays.services import cancel_scheduled

    _master(node)
    with showing(node):
        return cancel_scheduled(
            actor=actor, msg_id=msg_id, reason=reason, request=request
        )
