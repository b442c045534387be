"""A node's admin API: what the console does to a node, over authenticated HTTP.

``serve --admin-listen HOST:PORT --admin-token-file F`` starts it in the
endpoint's process (``AdminServer``), so a console on another host manages
the node without touching its files; with ``--admin-only`` that command
serves the admin API alone, in a process of its own beside the endpoint's
(``StoreNode``: what ``make run`` does, so the console still sees the store
while the endpoint is down; not for cluster members). Every request carries
``Authorization: Bearer <token>`` (compared in constant time); with
``--admin-tls-cert`` and ``--admin-tls-key`` it is served over TLS. JSON in,
JSON out; errors are ``{"error": ...}`` with 400 (bad input), 401 (no or
wrong token), 404 (no such thing), 409 (a conflicting decision: commit of a
rolled-back half) or 503 (a slave asked to decide).

First slice, what the cluster console needs:

* ``GET /metrics``: the node's figures in Prometheus' text format
  (``cluster.metrics``);
* ``GET /v1/node``: name, cluster, role, log end, replication (slaves of a
  master with their lag; a slave's master and its lag), the endpoint's
  counters;
* ``GET /v1/halves?state=PENDING&topic=&producer_group=&page=&page_size=``;
* ``POST /v1/halves/<transaction id>/commit``, ``.../rollback`` and
  ``.../resume`` (a discarded half checked again) with
  ``{"operator": name}``: the operator's decision, recorded in the log with
  that name (the console audits it on its side too);
* ``GET /v1/topics``: topics with their queue counts and depths;
* ``POST /v1/topics`` with ``{"topic", "read_queues", "write_queues"}``:
  create the topic on this node, or change its queue counts (a topic lives on
  the nodes it is created on; the node announces it at once);
* ``GET /v1/consumers``: every group's committed offset, queue end and lag
  per topic and queue (``broker_core.lag``, as the console's consumer pages);
* ``GET /v1/delays``: every delay level's scheduled backlog, next due, oldest
  overdue and delivery progress, and the timers by due time
  (``DelayStats.as_json``, as the console's delay page);
* ``GET /v1/messages``: search by id, key or topic, or a page of one queue
  from an offset, with a bounded body preview (base64 on request);
* ``POST /v1/consumers/<group>/reset`` with ``{"operator", "topic",
  "timestamp" | "offset", "queue_id"?, "reason"?}``: move the group's
  committed offsets;
* ``POST /v1/delays/<message id>/cancel`` with ``{"operator", "reason"?}``:
  recall a delayed message before it is delivered (404 unknown, 409
  delivered or recalled already);
* ``GET /v1/clients?group=``: the clients the endpoint knows;
* ``POST /v1/promote`` with ``{"operator", "role"?, "force"?}``: make this
  slave a master (409 while its master still heartbeats, unless ``force``).

* ``POST /v1/ops/<name>`` with ``{"args": [...], "kwargs": {...}}``: one of
  the console's operations (``node_ops.NodeOps``: halves, messages, topics,
  consumer groups, delays), arguments and answer in ``opscodec``'s tagged
  JSON; a library error comes back as ``broker_error`` and is raised again
  on the console's side (``RemoteNodeOps``).

Messages, resets, cancels and clients live in ``admin_store.StoreOperations``.
Every write names its ``operator`` and is refused (400) without one; a slave
refuses writes (503).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import ssl
import threading
import time
import urllib.parse
from dataclasses import asdict, is_dataclass
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from broker_core.clients import client_rows
from broker_core.cluster.admin_store import StoreOperations, operator_of
from broker_core.cluster.node_ops import NodeOps, run_remote, store_runtime
from broker_core.errors import AdminError

log = logging.getLogger(__name__)

_DECIDE = re.compile(r"^/v1/halves/([0-9A-Fa-f]{1,64})/(commit|rollback|resume)$")
_RESET = re.compile(r"^/v1/consumers/([^/]{1,512})/reset$")
_CANCEL = re.compile(r"^/v1/delays/([0-9A-Fa-f]{1,64})/cancel$")
_MAX_BODY = 64 * 1024
#: ``POST /v1/ops/send`` carries a whole message body (4 MiB at most), in base64
_MAX_OPS_BODY = 8 << 20
_OPS = re.compile(r"^/v1/ops/([a-z_]{1,64})$")


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _clients_file(root: Any) -> dict[str, Any]:
    try:
        data = json.loads((root / "clients.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def file_counters(root: Any) -> dict[str, int]:
    """The endpoint's counters in ``<store>/clients.json`` (its workers'
    summed), rewritten within about a second of a change."""
    counters = _clients_file(root).get("counters")
    return dict(counters) if isinstance(counters, dict) else {}


class StoreNode:
    """What the admin API needs of a node, for ``serve --admin-only``: the
    store and its transaction and delay services opened in a process of their
    own beside the endpoint's (a store takes several processes), so the
    console keeps its sight of the store while the gRPC endpoint is down.
    The clients and the endpoint's counters are read from the
    ``clients.json`` the endpoint writes; no timer or check runs here."""

    #: not a cluster member: a member's admin API lives in its endpoint
    node = None

    def __init__(self, broker: Any, cfg: Any) -> None:
        from broker_core.schedule import DelayService
        from broker_core.transaction import TransactionService

        self.broker = broker
        self.store = broker.store
        self.cfg = cfg
        settings: dict[str, Any] = {}
        if cfg.transaction_timeout_ms is not None:
            settings["transaction_timeout_ms"] = cfg.transaction_timeout_ms
        if cfg.check_interval_ms is not None:
            settings["check_interval_ms"] = cfg.check_interval_ms
        self.tx = TransactionService(broker, **settings)
        self.delays = DelayService(broker)

    @property
    def counters(self) -> dict[str, int]:
        return file_counters(self.store.root)

    def client_rows(self) -> list[dict[str, Any]]:
        clients = _clients_file(self.store.root).get("clients")
        return list(clients) if isinstance(clients, list) else []

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        for step in (self.delays.close, self.tx.close):
            try:
                step()
            except Exception:  # noqa: BLE001 - close the rest
                log.exception("admin node close")


class AdminServer:
    """Serve the admin API of the endpoint ``ep`` (module doc), or of a
    ``StoreNode`` (``serve --admin-only``)."""

    def __init__(
        self,
        ep: Any,
        listen: str,
        token: str,
        tls: tuple[str, str] | None = None,
        node_ops: NodeOps | None = None,
    ) -> None:
        if not token:
            raise ValueError("the admin API needs a token (--admin-token-file)")
        self.ep = ep
        self.token = token

        #: the console's operations (``POST /v1/ops/<name>``, ``node_ops``);
        #: a test may give the console's own ``NodeOps`` instead
        def live_clients(group: str | None = None) -> list[dict[str, Any]]:
            return client_rows(ep.client_rows(), group)

        # One of ``serve --workers N``, or the admin API alone: the list the
        # endpoint (its workers merged) writes instead.
        worker = getattr(getattr(ep, "cfg", None), "worker", None) is not None
        from_file = worker or isinstance(ep, StoreNode)
        #: the counters of every worker (``--workers``): the merged file's
        self._worker = worker
        clients = NodeOps.clients_file(ep.store.root) if from_file else live_clients
        attempts = getattr(getattr(ep, "cfg", None), "max_attempts", None)

        def topics_changed() -> None:
            # Registered again at once: routes follow a topic made here
            # without waiting for the next heartbeat.
            node = getattr(ep, "node", None)
            if node is not None:
                node.announce()

        self.node_ops = node_ops or NodeOps(
            lambda: ep.broker,
            lambda: ep.tx,
            lambda: ep.delays,
            clients,
            **({"max_delivery_attempts": attempts} if attempts else {}),
            topics_changed=topics_changed,
        )
        #: messages, offset resets, delay cancels, clients (``admin_store``):
        #: the REST paths over the same operations
        self.ops = StoreOperations(ep, self.node_ops)
        self._promoting = threading.Lock()
        host, _, port = listen.rpartition(":")
        server = ThreadingHTTPServer((host, int(port)), self._handler())
        server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls[0], tls[1])
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.server = server
        self.address = f"{host}:{server.server_address[1]}"
        self.scheme = "https" if tls else "http"
        # stop() waits up to one poll interval (0.5 s by default).
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="admin-api",
            daemon=True,
        )

    def start(self) -> AdminServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the API ---------------------------------------------------------------
    def node(self) -> dict[str, Any]:
        ep = self.ep
        counters = dict(ep.counters)
        if self._worker:
            # One of ``serve --workers N``: its own counters are a share; the
            # file sums every worker's.
            counters = file_counters(ep.store.root)
        elif not isinstance(ep, StoreNode):
            # Its group commits (SendMessage calls and acks per job on its
            # threads); the admin API alone has the endpoint's file only.
            counters |= {
                "send_jobs": ep.sending.group.jobs,
                "send_calls": ep.sending.group.items,
                "ack_jobs": ep.consuming.acks.jobs,
                "ack_calls": ep.consuming.acks.items,
            }
        out: dict[str, Any] = {
            "log_end": ep.store.max_physical_offset(),
            # As the endpoint's clients.json: its counters.
            "counters": counters,
            "runtime": store_runtime(ep.store),
        }
        if ep.node is not None:
            out.update(ep.node.status())
        else:
            from broker_core.ha.replica import cut_tails

            out.update(role="ASYNC_MASTER", node="", cluster="")
            out["cut_tails"] = cut_tails(ep.store.root)[:20]
        return out

    def halves(self, query: dict[str, str]) -> dict[str, Any]:
        try:
            page = int(query.get("page", "1"))
            size = min(500, int(query.get("page_size", "50")))
        except ValueError as exc:
            raise AdminError(400, f"page and page_size are numbers: {exc}") from exc
        found = self.ep.tx.list_halves(
            state=query.get("state") or "PENDING",
            topic=query.get("topic") or None,
            producer_group=query.get("producer_group") or None,
            page=page,
            page_size=size,
        )
        return {
            "total": getattr(found, "total", None),
            "page": page,
            "items": [_jsonable(h) for h in found.items],
        }

    def decide(self, tid: str, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/halves/<id>/<verb>``: the console's own decision
        (``NodeOps.commit``/``rollback``/``resume``); a refusal answers the
        library error's own status."""
        from broker_core.errors import BrokerError

        if not self.ep.writable():
            raise AdminError(503, "this node is a slave: decide on its master")
        operator = operator_of(body)
        try:
            result = getattr(self.node_ops, verb)(tid, operator)
        except BrokerError as exc:
            raise AdminError(exc.http_status, str(exc)) from exc
        return {"transaction_id": tid, "verb": verb, "result": _jsonable(result)}

    def promote(self, body: dict[str, Any]) -> dict[str, Any]:
        """Make this slave a master (``python -m broker_core promote`` from
        afar). Refused while its master still heartbeats in the registry
        (two masters of one name would both take writes) unless ``force``."""
        node = self.ep.node
        operator = operator_of(body)
        role = body.get("role", "ASYNC_MASTER")
        if role not in ("ASYNC_MASTER", "SYNC_MASTER"):
            raise AdminError(400, "role: ASYNC_MASTER or SYNC_MASTER")
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise AdminError(400, "force: true or false")
        if node is None:
            raise AdminError(409, "this endpoint is not a cluster node")
        # One promotion at a time: stopping the follower may wait on a dead
        # master's connect timeout, and a second request meanwhile must not
        # promote again.
        if not self._promoting.acquire(blocking=False):
            raise AdminError(409, "a promotion of this node is under way")
        try:
            return self._promote(node, operator, role, force)
        finally:
            self._promoting.release()

    def _promote(self, node: Any, operator: str, role: str, force: bool) -> dict:
        if node.follower is None:
            raise AdminError(409, f"this node is already a master ({node.role})")
        if not force:
            try:
                master = node.registry.find(node.cfg.name, 0)
            except Exception as exc:  # noqa: BLE001 - cannot tell: do not guess
                raise AdminError(
                    503,
                    f"the registry does not answer ({exc}): cannot tell "
                    "whether the master is alive; pass force to promote anyway",
                ) from exc
            if master is not None:
                age_s = max(0.0, time.time() - master.heartbeat_ms / 1000)
                raise AdminError(
                    409,
                    f"the master {master.key} is alive (heartbeat {age_s:.1f} s "
                    "ago): promoting now would make two masters; stop it first, or "
                    "pass force",
                )
        log.warning("node %s promoted to %s by %s", node.cfg.name, role, operator)
        node.promote(role)
        return {"node": node.cfg.name, "role": node.role, "operator": operator,
                "log_end": self.ep.store.max_physical_offset()}  # fmt: skip

    def topics(self) -> dict[str, Any]:
        store = self.ep.store
        out = []
        for t in store.list_topics():
            depths = {q: store.max_offset(t.topic_name, q) for q in range(t.queue_nums)}
            out.append(
                {
                    "topic": t.topic_name,
                    "read_queues": t.read_queue_nums,
                    "write_queues": t.write_queue_nums,
                    "perm": t.perm,
                    "depths": depths,
                }
            )
        return {"topics": out}

    def put_topic(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/topics``: create the topic or change its queue counts,
        as the console's Topics pages do (``NodeOps``, which announces it)."""
        from broker_core.errors import BrokerError, ValidationError
        from broker_core.metadata import PERM_READ, PERM_WRITE
        from broker_core.validation import validate_topic

        if not self.ep.writable():
            raise AdminError(503, "this node is a slave: create topics on masters")
        topic = str(body.get("topic") or "")
        try:
            validate_topic(topic)
            reads = int(body.get("read_queues", 4))
            writes = int(body.get("write_queues", reads))
        except (ValidationError, ValueError, TypeError) as exc:
            raise AdminError(400, str(exc)) from exc
        if not (1 <= reads <= 1024 and 1 <= writes <= 1024):
            raise AdminError(400, "queue counts are 1 to 1024")
        ops = self.node_ops
        try:
            if self.ep.store.topic_config(topic) is None:
                ops.create_topic(topic, reads, writes, PERM_READ | PERM_WRITE, "NORMAL")
                done = "created"
            else:
                ops.update_topic(topic, read_queue_nums=reads, write_queue_nums=writes)
                done = "updated"
        except BrokerError as exc:
            raise AdminError(exc.http_status, str(exc)) from exc
        return {"topic": topic, "read_queues": reads, "write_queues": writes,
                "result": done}  # fmt: skip

    def consumers(self) -> dict[str, Any]:
        from broker_core.lag import consumer_lag

        clients = self.ep.client_rows()
        return {"queues": _jsonable(consumer_lag(self.ep.store, clients))}

    def delays(self) -> dict[str, Any]:
        return self.ep.delays.stats().as_json()

    # -- HTTP --------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "broker-core-admin/1"

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("admin %s " + fmt, self.client_address[0], *args)

            def handle(self) -> None:
                # A client that goes away before its answer is written (a
                # probe without the token, a scrape that timed out) is no
                # fault of this node: no traceback in the serve log.
                try:
                    super().handle()
                except (ConnectionError, ssl.SSLEOFError) as exc:
                    self.close_connection = True
                    log.debug("admin %s went away: %r", self.client_address[0], exc)

            def _reply(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload, default=str).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def _metrics(self) -> None:
                from broker_core.cluster.metrics import CONTENT_TYPE, render

                try:
                    data = render(api)
                except Exception as exc:  # noqa: BLE001 - reported, not raised
                    log.exception("admin metrics failed")
                    self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization", "")
                want = f"Bearer {api.token}"
                return hmac.compare_digest(given.encode(), want.encode())

            def _run(self, method: str) -> None:
                if not self._authorized():
                    self._reply(401, {"error": "a valid bearer token is required"})
                    return
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                if method == "GET" and url.path == "/metrics":
                    self._metrics()
                    return
                if method == "POST" and (m := _OPS.match(url.path)):
                    try:
                        body = self._body(_MAX_OPS_BODY)
                    except AdminError as exc:
                        self._reply(exc.code, {"error": str(exc)})
                        return
                    try:
                        code, payload = run_remote(
                            api.node_ops, m.group(1), body, api.ep.writable()
                        )
                    except Exception as exc:  # noqa: BLE001 - reported, not raised
                        log.exception("admin ops %s failed", m.group(1))
                        code = 500
                        payload = {"error": f"{type(exc).__name__}: {exc}"}
                    self._reply(code, payload)
                    return
                try:
                    if method == "GET" and url.path == "/v1/node":
                        out = api.node()
                    elif method == "GET" and url.path == "/v1/halves":
                        out = api.halves(query)
                    elif method == "GET" and url.path == "/v1/topics":
                        out = api.topics()
                    elif method == "GET" and url.path == "/v1/consumers":
                        out = api.consumers()
                    elif method == "GET" and url.path == "/v1/delays":
                        out = api.delays()
                    elif method == "GET" and url.path == "/v1/messages":
                        out = api.ops.messages(query)
                    elif method == "GET" and url.path == "/v1/clients":
                        out = api.ops.clients(query)
                    elif method == "POST" and (m := _RESET.match(url.path)):
                        group = urllib.parse.unquote(m.group(1))
                        out = api.ops.reset(group, self._body())
                    elif method == "POST" and (m := _CANCEL.match(url.path)):
                        out = api.ops.cancel_delayed(m.group(1), self._body())
                    elif method == "POST" and url.path == "/v1/promote":
                        out = api.promote(self._body())
                    elif method == "POST" and url.path == "/v1/topics":
                        out = api.put_topic(self._body())
                    elif method == "POST" and (m := _DECIDE.match(url.path)):
                        out = api.decide(m.group(1), m.group(2), self._body())
                    else:
                        raise AdminError(404, f"no {method} {url.path}")
                except AdminError as exc:
                    self._reply(exc.code, {"error": str(exc)})
                    return
                except Exception as exc:  # noqa: BLE001 - reported, not raised
                    log.exception("admin %s %s failed", method, url.path)
                    self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})
                    return
                self._reply(200, out)

            def _body(self, limit: int = _MAX_BODY) -> dict[str, Any]:
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    raise AdminError(400, "Content-Length: a number") from None
                if not 0 <= size <= limit:
                    raise AdminError(400, f"Content-Length: 0 to {limit} bytes")
                raw = self.rfile.read(size) if size else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError as exc:
                    raise AdminError(400, f"the body is not JSON: {exc}") from exc
                if not isinstance(body, dict):
                    raise AdminError(400, "the body must be a JSON object")
                return body

            def do_GET(self) -> None:  # noqa: N802
                self._run("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._run("POST")

        return Handler
