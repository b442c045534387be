"""A node's admin API: what the console does to a node, over authenticated HTTP.

``serve --admin-listen HOST:PORT --admin-token-file F`` starts it in the
endpoint's process (``AdminServer``), so a console on another host manages
the node without touching its files; with ``--admin-only`` that command
serves the admin API alone, in a process of its own beside the endpoint's
(``StoreNode``: what ``make run`` does, so the console still sees the store
while the endpoint is down; not for cluster members). Every request carries
``Authorization: Bearer <token>`` (compared in constant time); with
``--admin-tls-cert`` and ``--admin-tls-key`` it is served over TLS. JSON in,
JSON out; errors are ``{"error": ...}``: 401 (no or wrong token), 400 (a
body that is not a JSON object), 404 (no such route or operation), and a
library error's own status (``http_status``: 400 bad input, 404 no such
thing, 409 a conflicting decision, 503 a slave asked to write).

Two routes:

* ``POST /v1/ops/<name>`` with ``{"args": [...], "kwargs": {...}}``: one of
  the node's operations (``node_ops.NodeOperations``, run by
  ``node_ops.NodeOps``: the node's status and promotion, halves, messages,
  topics, consumer groups and offsets, delays, clients), arguments and answer
  in ``opscodec``'s tagged JSON; a library error comes back as
  ``broker_error`` with its own HTTP status and is raised again on the
  console's side (``RemoteNodeOps``); a slave refuses writes (503) but takes
  ``promote``;
* ``GET /metrics``: the node's figures in Prometheus' text format
  (``cluster.metrics``).

Any other path is 404.
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from broker_core.clients import client_rows
from broker_core.cluster.node_ops import NodeOps, run_remote, store_runtime
from broker_core.errors import (
    AdminError,
    PromotionRefusedError,
    RouteUnavailableError,
    ValidationError,
)

log = logging.getLogger(__name__)

#: ``POST /v1/ops/send`` carries a whole message body (4 MiB at most), in base64
_MAX_OPS_BODY = 8 << 20
_OPS = re.compile(r"^/v1/ops/([a-z_]{1,64})$")


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

        #: the node's operations (``POST /v1/ops/<name>``, ``node_ops``),
        #: with this server as their ``control`` (``node_status``,
        #: ``promote``); a test may give the console's own ``NodeOps``
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

        self.node_ops = (node_ops or NodeOps(
            lambda: ep.broker,
            lambda: ep.tx,
            lambda: ep.delays,
            clients,
            **({"max_delivery_attempts": attempts} if attempts else {}),
            topics_changed=topics_changed,
        )).with_control(self)  # fmt: skip
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
            counters |= ep.batch_counters()
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

    def promote(self, operator: str, role: str, force: bool) -> dict[str, Any]:
        """``NodeOps.promote``: make this slave a master (``python -m
        broker_core promote`` from afar). Refused while its master still
        heartbeats in the registry (two masters of one name would both take
        writes) unless ``force``."""
        node = self.ep.node
        if not isinstance(operator, str) or not operator.strip():
            raise ValidationError("operator: who acts (a name) is required")
        operator = operator.strip()
        if role not in ("ASYNC_MASTER", "SYNC_MASTER"):
            raise ValidationError("role: ASYNC_MASTER or SYNC_MASTER")
        if not isinstance(force, bool):
            raise ValidationError("force: true or false")
        if node is None:
            raise PromotionRefusedError("this endpoint is not a cluster node")
        # One promotion at a time: stopping the follower may wait on a dead
        # master's connect timeout, and a second request meanwhile must not
        # promote again.
        if not self._promoting.acquire(blocking=False):
            raise PromotionRefusedError("a promotion of this node is under way")
        try:
            return self._promote(node, operator, role, force)
        finally:
            self._promoting.release()

    def _promote(self, node: Any, operator: str, role: str, force: bool) -> dict:
        if node.follower is None:
            raise PromotionRefusedError(f"this node is already a master ({node.role})")
        if not force:
            try:
                master = node.registry.find(node.cfg.name, 0)
            except Exception as exc:  # noqa: BLE001 - cannot tell: do not guess
                raise RouteUnavailableError(
                    f"the registry does not answer ({exc}): cannot tell "
                    "whether the master is alive; pass force to promote anyway",
                ) from exc
            if master is not None:
                age_s = max(0.0, time.time() - master.heartbeat_ms / 1000)
                raise PromotionRefusedError(
                    f"the master {master.key} is alive (heartbeat {age_s:.1f} s "
                    "ago): promoting now would make two masters; stop it first, or "
                    "pass force",
                )
        log.warning("node %s promoted to %s by %s", node.cfg.name, role, operator)
        node.promote(role)
        return {"node": node.cfg.name, "role": node.role, "operator": operator,
                "log_end": self.ep.store.max_physical_offset()}  # fmt: skip

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
                self._reply(404, {"error": f"no {method} {url.path}"})

            def _body(self, limit: int) -> dict[str, Any]:
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
