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
body that is not a JSON object or nests more than ``MAX_JSON_DEPTH`` deep,
arguments that do not fit the operation's signature: ``argtypes``), 404 (no
such route or operation), 405 (a method other than GET and POST, with
``Allow``), 408 (a body that did not arrive in time), 503 (``MAX_CONNECTIONS``
requests under way, or ``MAX_PER_ADDRESS`` from one address), and a
library error's own status (``http_status``: 400
bad input, 404 no such thing, 409 a conflicting decision, 503 a slave asked
to write); a fault of the node is 500 with no detail (the traceback is in the
node's log). A connection waits ``IO_TIMEOUT_S`` at most for its first byte
(without a thread: ``_Server``) and for each read of its request.

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

Any other path is 404 (``docs/cluster.md``, "The admin API").
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import re
import selectors
import socket
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
#: how deeply a request's JSON may nest (lists and objects), checked on the
#: raw bytes before they are decoded
MAX_JSON_DEPTH = 64
#: how long a connection may wait for its first byte, and then for each read
#: of its request (headers and body), before it is dropped
IO_TIMEOUT_S = 10.0
#: requests served at once; one more connection is answered 503 at once
MAX_CONNECTIONS = 64
#: of those, from one client address: one host's slow or half-open
#: connections (before any token is read) cannot lock every other out
MAX_PER_ADDRESS = 16
#: connections that have sent nothing yet, waited on by one thread; beyond,
#: a new connection is closed at once
MAX_WAITING = 512
#: the methods served (any other: 405 with ``Allow``)
ALLOWED = "GET, POST"
#: the answer to an operation that failed inside the node (its traceback is
#: in the node's log, never in the answer)
INTERNAL_ERROR = "internal error, see the node's log"
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(raw: bytes) -> int:
    """How deeply the JSON text ``raw`` nests lists and objects, counted on
    its bytes (strings left out) without decoding it: ``json.loads`` of a
    text nested 100,000 deep fails with a ``RecursionError``."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    deepest = level = 0
    for c in brackets:
        level += 1 if c in b"[{" else -1
        deepest = max(deepest, level)
    return deepest


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


class _Server(ThreadingHTTPServer):
    """The admin API's HTTP server: a thread per request, and a client that
    sends nothing cannot take one. A new connection waits on one thread
    (``_wait``) for its first byte (a TLS client's hello), at most
    ``io_timeout_s`` (then it is closed; beyond ``MAX_WAITING`` waiting, a new
    one is closed at once); then it gets a thread of its own, at most
    ``max_connections`` at once (one more is answered 503 at once), whose
    every read of the request waits ``io_timeout_s`` at most (the handler's
    ``timeout``)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        io_timeout_s: float,
        max_connections: int,
        max_per_address: int = MAX_PER_ADDRESS,
    ) -> None:
        super().__init__(address, handler)
        self.io_timeout_s = io_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_per_address = max_per_address
        #: client address -> requests of it under way
        self._per_address: dict[str, int] = {}
        self._per_address_lock = threading.Lock()
        self._arrivals: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = threading.Event()
        self._waiter = threading.Thread(
            target=self._wait, name="admin-api-waiting", daemon=True
        )
        self._waiter.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        # On the accepting thread: handed to the waiting thread at once.
        self._arrivals.put((request, client_address))
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # closing, or its buffer full: it looks again within 0.5 s

    def _wait(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        #: connection -> (address, when it is dropped)
        waiting: dict[Any, tuple[Any, float]] = {}
        try:
            while not self._closed.is_set():
                while True:
                    try:
                        sock, address = self._arrivals.get_nowait()
                    except queue.Empty:
                        break
                    if len(waiting) >= MAX_WAITING:
                        self.shutdown_request(sock)
                        continue
                    sel.register(sock, selectors.EVENT_READ, address)
                    waiting[sock] = (address, time.monotonic() + self.io_timeout_s)
                for key, _ in sel.select(timeout=0.5):
                    if key.data is None:
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                        continue
                    sel.unregister(key.fileobj)
                    waiting.pop(key.fileobj, None)
                    self._dispatch(key.fileobj, key.data)
                now = time.monotonic()
                for sock in [s for s, (_a, t) in waiting.items() if t <= now]:
                    sel.unregister(sock)
                    address, _t = waiting.pop(sock)
                    log.debug("admin %s sent nothing: closed", address[0])
                    self.shutdown_request(sock)
        finally:
            for sock in waiting:
                self.shutdown_request(sock)
            sel.close()

    def _take_address(self, host: str) -> bool:
        with self._per_address_lock:
            n = self._per_address.get(host, 0)
            if n >= self._max_per_address:
                return False
            self._per_address[host] = n + 1
            return True

    def _give_address(self, host: str) -> None:
        with self._per_address_lock:
            n = self._per_address.get(host, 1) - 1
            if n <= 0:
                self._per_address.pop(host, None)
            else:
                self._per_address[host] = n

    def _dispatch(self, sock: Any, address: Any) -> None:
        if not self._take_address(address[0]):
            log.warning("admin %s: %d of its requests under way: 503", address[0],
                        self._max_per_address)  # fmt: skip
            self._busy(sock)
            return
        if not self._slots.acquire(blocking=False):
            self._give_address(address[0])
            log.warning("admin %s: %d requests under way: 503", address[0],
                        MAX_CONNECTIONS)  # fmt: skip
            self._busy(sock)
            return
        try:
            super().process_request(sock, address)
        except BaseException:  # no thread: nothing will release the slot
            self._slots.release()
            self._give_address(address[0])
            log.exception("admin %s: no thread for the request", address[0])
            self.shutdown_request(sock)

    def _busy(self, sock: Any) -> None:
        """Answer 503 without a thread (a TLS connection, whose handshake
        would wait here, is closed instead)."""
        if not isinstance(sock, ssl.SSLSocket):
            data = json.dumps({"error": "the node is busy: try again"}).encode()
            try:
                sock.settimeout(0)
                try:
                    sock.recv(65536)  # the request: not left unread (a reset)
                except OSError:
                    pass
                sock.settimeout(1.0)
                sock.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\n"
                    b"Content-Type: application/json\r\n"
                    b"Retry-After: 1\r\nConnection: close\r\n"
                    + f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
            except OSError:
                pass
        self.shutdown_request(sock)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
            self._give_address(client_address[0])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Into the node's log, never a bare traceback on stderr.
        log.exception("admin %s: the request failed", client_address[0])

    def server_close(self) -> None:
        self._closed.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._waiter.join(timeout=5)
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()


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
        io_timeout_s: float = IO_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_per_address: int = MAX_PER_ADDRESS,
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
        #: how long a connection may wait for its first byte and each read
        self.io_timeout_s = io_timeout_s
        server = _Server(
            (host, int(port)), self._handler(), io_timeout_s, max_connections,
            max_per_address,
        )  # fmt: skip
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls[0], tls[1])
            # The handshake on the request's own thread (under its timeout),
            # not on the accepting one, where a client that never sends its
            # hello would stop every other connection.
            server.socket = context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
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
            #: a request line without a version is answered with a status
            #: line and headers too (HTTP/0.9's bare body said nothing)
            default_request_version = "HTTP/1.0"
            #: every read of a request (its headers, its body) waits this long
            #: at most (``StreamRequestHandler.setup``)
            timeout = api.io_timeout_s

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("admin %s " + fmt, self.client_address[0], *args)

            def parse_request(self) -> bool:
                ok = super().parse_request()
                if ok and self.request_version == "HTTP/0.9":
                    # (http.server would answer it with a bare body)
                    self.request_version = "HTTP/1.0"
                    self.send_error(505, "HTTP/0.9 is not served")
                    return False
                return ok

            def handle(self) -> None:
                # A client that goes away before its answer is written (a
                # probe without the token, a scrape that timed out) is no
                # fault of this node: no traceback in the serve log.
                # One that sends its headers too slowly is dropped, as is a
                # failed TLS handshake.
                try:
                    super().handle()
                except (ConnectionError, TimeoutError, ssl.SSLError) as exc:
                    self.close_connection = True
                    log.debug("admin %s went away: %r", self.client_address[0], exc)

            def send_error(
                self, code: int, message: str | None = None, explain: str | None = None
            ) -> None:
                # What ``http.server`` answers itself (a request it cannot
                # parse, a method with no ``do_`` handler), in JSON as every
                # other answer, never its HTML page.
                if code == 501:  # a method not served
                    self._drain()
                    self._reply(
                        405,
                        {"error": f"method {self.command} is not allowed: "
                                  f"{ALLOWED} only"},
                        close=True,
                    )  # fmt: skip
                    return
                short = self.responses.get(code, ("error", ""))[0]
                self._reply(code, {"error": message or short}, close=True)

            def _drain(self) -> None:
                """Read a refused request's body (up to 1 MiB), so that
                closing the connection does not reset it before the client
                reads the answer."""
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                    if 0 < size <= 1 << 20:
                        self.rfile.read(size)
                except (ValueError, OSError):
                    pass

            def _reply(
                self, code: int, payload: dict[str, Any], close: bool = False
            ) -> None:
                data = json.dumps(payload, default=str).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                if code == 405:
                    self.send_header("Allow", ALLOWED)
                if close:
                    self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _metrics(self) -> None:
                from broker_core.cluster.metrics import CONTENT_TYPE, render

                try:
                    data = render(api)
                except Exception:  # noqa: BLE001 - logged, not answered
                    log.exception("admin metrics failed")
                    self._reply(500, {"error": INTERNAL_ERROR})
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
                        self._reply(exc.code, {"error": str(exc)}, close=True)
                        return
                    try:
                        code, payload = run_remote(
                            api.node_ops, m.group(1), body, api.ep.writable()
                        )
                    except Exception:  # noqa: BLE001 - logged, not answered
                        # A fault of the node: its traceback goes to the log,
                        # never into the answer.
                        log.exception("admin ops %s failed", m.group(1))
                        code, payload = 500, {"error": INTERNAL_ERROR}
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
                try:
                    raw = self.rfile.read(size) if size else b"{}"
                except TimeoutError:
                    raise AdminError(
                        408, f"the body did not arrive within {api.io_timeout_s:g} s"
                    ) from None
                if len(raw) < size:
                    raise AdminError(400, "the body is shorter than its Content-Length")
                if json_depth(raw) > MAX_JSON_DEPTH:
                    raise AdminError(
                        400,
                        f"the body nests too deeply (more than {MAX_JSON_DEPTH} "
                        "levels of lists and objects)",
                    )
                try:
                    body = json.loads(raw or b"{}")
                except (ValueError, RecursionError) as exc:
                    raise AdminError(400, f"the body is not JSON: {exc}") from None
                if not isinstance(body, dict):
                    raise AdminError(400, "the body must be a JSON object")
                return body

            def do_GET(self) -> None:  # noqa: N802
                self._run("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._run("POST")

        return Handler
