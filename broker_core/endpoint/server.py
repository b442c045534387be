"""grpc.aio server for ``apache.rocketmq.v2.MessagingService`` over broker_core.

See docs/grpc.md. Stubs come from the ``rocketmq-python-client`` package
(``rocketmq.grpc_protocol``). The RPCs live by family: ``routing.py``,
``sending.py``, ``transactions.py``, ``consuming.py``; error codes and wire
conversions in ``wire.py``. Each family is given the collaborators it uses
(``ClientTable``, ``PollWaits``, ``Threads``, ``WriteGuard``, the services),
never the ``Endpoint``; this module builds them, runs the background loops
and serves."""

from __future__ import annotations

import asyncio
import calendar
import fcntl
import gc
import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.broker import Broker
from broker_core.endpoint.clients import ClientInfo, ClientTable, merge_snapshots
from broker_core.endpoint.coalesce import PER_CALL
from broker_core.endpoint.config import (
    APPEND_WATCH_S,
    CLIENT_MEMORY_S,
    COUNTERS_WRITE_S,
    SHUTDOWN_GRACE_S,
    EndpointConfig,
)
from broker_core.endpoint.consuming import Consuming
from broker_core.endpoint.forward import REFUSE, Forwarder
from broker_core.endpoint.guard import WriteGuard
from broker_core.endpoint.namespace import globalize, header_ns, localize
from broker_core.endpoint.pop import PopManager
from broker_core.endpoint.routing import Routing
from broker_core.endpoint.sending import Sending
from broker_core.endpoint.threads import Threads
from broker_core.endpoint.transactions import GrpcCheckTransport, Transactions
from broker_core.endpoint.waits import PollWaits
from broker_core.endpoint.wire import C, encoded, local_utc_offset_min, status
from broker_core.errors import Busy, ValidationError
from broker_core.metadata import temporary_name

log = logging.getLogger("broker_core.endpoint")


class Endpoint:
    """The shared state of one endpoint process; the RPCs are its families'
    (routing, sending, transactions, consuming), each in its own module."""

    def __init__(self, broker: Broker, cfg: EndpointConfig) -> None:
        from broker_core.schedule import DelayService
        from broker_core.transaction import TransactionService

        self.broker = broker
        self.cfg = cfg
        self.store = broker.store
        self.max_body = self.store.config.max_message_size
        #: cluster membership and replication (``ClusterNode``); None: alone
        self.node: Any = None
        #: whether a write may be taken now and acknowledged once stored
        self.guard = WriteGuard(self.store, lambda: self.node)
        tx_settings: dict[str, Any] = {}
        if cfg.transaction_timeout_ms is not None:
            tx_settings["transaction_timeout_ms"] = cfg.transaction_timeout_ms
        if cfg.check_interval_ms is not None:
            tx_settings["check_interval_ms"] = cfg.check_interval_ms
        self.tx = TransactionService(broker, **tx_settings)
        self.delays = DelayService(broker)
        self.delays.may_deliver = lambda: self.guard.replicas_short() is None
        self.pop = PopManager(broker, max_attempts=cfg.max_attempts)
        #: when dead entries were last swept to their DLQ (``_persist_pop``)
        self._swept = 0.0
        for g in sorted(cfg.fifo_groups):
            # ``--fifo-groups``: recorded as the groups' setting, which is
            # what routes, settings and deliveries read.
            had = self.store.groups.get(g)
            if had is None or not had.fifo:
                self.store.groups.put(
                    g, True, had.max_delivery_attempts if had else None
                )
        self.clients = ClientTable()
        self._restore_clients()
        #: long polls waiting for their topics
        self.waits = PollWaits()
        #: nothing blocking runs on the event loop (``threads.py``)
        self.threads = Threads(self.pop)
        self.stop_event = threading.Event()
        #: the embedded transaction check's thread, once started
        self.background: list[threading.Thread] = []
        self.relay: Any = None
        #: the relay shared by the nodes of this broker name (cluster only)
        self.name_relay: Any = None
        self.ports: set[int] = {cfg.port}
        self.forwarder = Forwarder(lambda: self.node, 0)
        self._master_services = False
        #: the counters ``clients.json`` holds, and when they were written
        self._counters_written: dict[str, int] = {}
        self._counters_written_at = 0.0
        #: one write of clients.json (and a worker's own list) at a time
        self._clients_lock = threading.Lock()
        self.counters = {
            "sent": 0,
            "received": 0,
            "acked": 0,
            "checks_sent": 0,
            "retries_deduplicated": 0,
        }
        # The RPCs, by family; each keeps its own state and is given what it
        # shares with the others.
        clients, threads, waits = self.clients, self.threads, self.waits
        self.routing = Routing(
            cfg=cfg, broker=broker, clients=clients, guard=self.guard,
            threads=threads, ports=self.ports,
        )  # fmt: skip
        self.transactions = Transactions(
            tx=self.tx, clients=clients, guard=self.guard, threads=threads,
            waits=waits, counters=self.counters,
        )  # fmt: skip
        self.sending = Sending(
            cfg=cfg, broker=broker, delays=self.delays,
            transactions=self.transactions, clients=clients, guard=self.guard,
            threads=threads, waits=waits, counters=self.counters,
        )  # fmt: skip
        self.consuming = Consuming(
            cfg=cfg, store=self.store, pop=self.pop, clients=clients,
            threads=threads, waits=waits, counters=self.counters,
        )  # fmt: skip

    def batch_handlers(self) -> dict[str, Callable[[list[Any]], list[Any]]]:
        """RPC name -> its implementation for many calls at once, for the
        RPCs that have one (``Method.batch``)."""
        return {
            "SendMessage": self.sending.send_many,
            "AckMessage": self.consuming.ack_many,
        }

    def handlers(self) -> dict[str, Callable[..., Any]]:
        """RPC name -> implementation, for every RPC this endpoint serves."""
        out: dict[str, Callable[..., Any]] = {}
        for family in (self.routing, self.sending, self.transactions, self.consuming):
            for name in dir(type(family)):
                if name[:1].isupper():
                    out[name] = getattr(family, name)
        return out

    # -- plumbing ------------------------------------------------------------
    def authorized(self, context: grpc.aio.ServicerContext) -> bool:
        """Check the client's ``MQv2-HMAC-SHA1`` authorization header: HMAC-SHA1
        of ``x-mq-date-time`` with the access key's secret, the date within
        ``auth_window_s`` of the clock (the client formats local time with a
        literal Z, G12: accepted offsets are ``auth_offsets_min``)."""
        creds = self.cfg.credentials
        if not creds:
            return True
        md = {k: v for k, v in (context.invocation_metadata() or ())}
        auth = str(md.get("authorization", ""))
        date = str(md.get("x-mq-date-time", ""))
        if not auth.startswith("MQv2-HMAC-SHA1 ") or not date:
            return False
        fields = {}
        for part in auth[len("MQv2-HMAC-SHA1 ") :].split(","):
            k, _, v = part.strip().partition("=")
            fields[k] = v
        secret = creds.get(fields.get("Credential", ""))
        if secret is None:
            return False
        want = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(want, fields.get("Signature", "").lower()):
            return False
        # The signature covers only the date: without this a captured header
        # would authenticate forever.
        return self.date_fresh(date)

    def date_fresh(self, date: str) -> bool:
        """Whether a signed ``x-mq-date-time`` is within ``auth_window_s`` of now,
        in UTC or one of the accepted client offsets."""
        try:
            signed = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
        except (ValueError, OverflowError):
            return False
        offsets = self.cfg.auth_offsets_min or (0, local_utc_offset_min())
        now = time.time()
        window = self.cfg.auth_window_s
        return any(abs(signed - off * 60 - now) <= window for off in offsets)

    async def _watch_appends(self) -> None:
        """Wake long polls when anything is appended, by any process.

        Sends and commits through this endpoint wake their topic at once; this
        catches the rest (delayed deliveries by the embedded timers or a Celery
        worker, other processes' sends) by watching the store's dispatched
        position in its shared state file, a mapped read, every
        ``APPEND_WATCH_S`` while a long poll waits."""
        state = self.store.state

        def mark() -> tuple[int, int | None]:
            # A SYNC node hands out only what its in-sync slaves hold
            # (``PopManager.visible_end``): wake the polls when that moves too.
            limit = self.pop.visible_end
            return state.dispatched_pos, limit() if limit is not None else None

        last = mark()
        while True:
            if not self.waits.wakeups:
                # Nobody waits: sleep until a long poll joins (an idle broker
                # costs no CPU), then wake it if anything was appended since
                # ``last``. What was appended before it joined, its own pop
                # after joining sees; at worst one pop too many.
                self.waits.first_waiter.clear()
                last = mark()
                await self.waits.first_waiter.wait()
            else:
                await asyncio.sleep(APPEND_WATCH_S)
            now = mark()
            if now != last:
                last = now
                self.waits.wake_all()

    async def start_background(self) -> None:
        self.transactions.loop = asyncio.get_running_loop()
        self.tx.checkers.set_default(GrpcCheckTransport(self.transactions))
        # In this process a group configured with kind "grpc" is checked directly.
        import broker_core.endpoint.relay as relay
        from broker_core.transaction import register_transport_kind

        register_transport_kind(
            "grpc", lambda cfg: GrpcCheckTransport(self.transactions)
        )
        if self.cfg.redis_url:
            self.relay = relay.RelayListener(
                self, self.cfg.redis_url, self.cfg.redis_channel
            )
            self.relay.start()
            if self.cfg.worker is not None:
                # Worker 0's check-backs reach producers on the other workers.
                self.transactions.peers = relay.RedisRelayTransport(
                    self.cfg.redis_url, self.cfg.redis_channel
                )
        if self.node is not None:
            # The nodes of one broker name share a relay on the registry's
            # Redis: a producer whose Telemetry stream is to a slave (its
            # sends and decisions forwarded, forward.py) is checked by the
            # master through it.
            channel = f"rmq:{self.node.cfg.cluster}:{self.node.cfg.name}:check"
            self.name_relay = relay.RelayListener(
                self, self.node.cfg.registry_url, channel
            )
            self.name_relay.start()
            if self.transactions.peers is None:
                self.transactions.peers = relay.RedisRelayTransport(
                    self.node.cfg.registry_url, channel
                )
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._persist_loop()),
            loop.create_task(self._watch_appends()),
        ]
        if self.node is None or self.node.is_master:
            self.start_master_services()

    def start_master_services(self) -> None:
        """Embedded delay delivery and transaction check: once per store (worker
        0 of ``serve --workers N``), and only on a master (a slave's start when
        it is promoted)."""
        if self._master_services:
            return
        self._master_services = True
        if self.cfg.embedded_timers and self.cfg.worker in (None, 0):
            self.delays.start()
            t = threading.Thread(target=self._check_loop, daemon=True, name="tx-check")
            t.start()
            self.background.append(t)
            log.info("embedded delay delivery and transaction check started")

    def writable(self) -> bool:
        """Whether this node takes writes (``WriteGuard.writable``)."""
        return self.guard.writable()

    def _check_loop(self) -> None:
        period = 1.0
        if self.cfg.check_interval_ms:
            period = min(1.0, max(0.1, self.cfg.check_interval_ms / 4000))
        while not self.stop_event.wait(period):
            if not self.writable():
                continue  # no lease (or fenced): the elected master checks
            try:
                self.tx.run_check(time_budget_s=2.0, wait=False)
            except Exception:  # noqa: BLE001
                log.exception("transaction check failed")

    def _persist_pop(self, alive: set[str]) -> None:
        if not self.pop.available():  # a full disk: nothing to persist into
            return
        self.pop.offsets.apply_resets()
        if self.writable() and time.monotonic() - self._swept >= 2.0:
            self._swept = time.monotonic()
            try:
                self.pop.sweep_dead()
            except Busy:
                pass  # another worker holds pop.db: the next round
        if self.pop.renewals:
            self.pop.renewals.renew_due(alive)
        self.pop.offsets.mirror_offsets()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                alive = {c.client_id for c in self.clients.values() if c.online}
                await self.threads.on_consumer(self._persist_pop, alive)
                await asyncio.to_thread(self.pop.checkpoint)
                stats = await self.threads.on_consumer(self.pop.stats)
                snapshot = self.clients_snapshot(pop_stats=stats)
                await asyncio.to_thread(self.write_clients, snapshot)
            except Exception:  # noqa: BLE001
                log.exception("persisting endpoint state failed")

    def _restore_clients(self) -> None:
        """Remember, offline, the clients the last run saw recently.

        A client that outlives a restart may open a new Telemetry stream
        without sending its settings again (the Python client re-opens it at
        its next settings sync and sends settings only at the one after): its
        type and topics from before keep it a target for its topics' check-backs.
        """
        try:
            data = json.loads((self.store.root / "clients.json").read_text())
            saved = data.get("clients", [])
        except (OSError, ValueError, AttributeError):
            return
        now = time.time()
        for d in saved if isinstance(saved, list) else ():
            try:
                if now - float(d["last_heartbeat"]) > CLIENT_MEMORY_S:
                    continue
                c = ClientInfo(
                    str(d["client_id"]),
                    client_type=str(d.get("client_type", "")),
                    group=str(d.get("group", "")),
                    topics=[str(t) for t in d.get("topics", [])],
                    address=str(d.get("address", "")),
                    language=str(d.get("language", "")),
                    version=str(d.get("version", "")),
                    connected_at=float(d.get("connected_at", now)),
                    last_heartbeat=float(d["last_heartbeat"]),
                    online=False,
                )
            except (KeyError, TypeError, ValueError):
                continue
            self.clients[c.client_id] = c

    def client_rows(self) -> list[dict[str, Any]]:
        """The clients as JSON rows, for another thread (the admin API): the
        table is copied in one C-level call, not iterated while the event
        loop may change it."""
        return [c.as_json() for c in list(self.clients.values())]

    def batch_counters(self) -> dict[str, int]:
        """Group commit: SendMessage calls and acks per job on the threads, and
        per batch on the event loop (the calls of one loop iteration)."""
        return {
            "send_jobs": self.sending.group.jobs,
            "send_calls": self.sending.group.items,
            "ack_jobs": self.consuming.acks.jobs,
            "ack_calls": self.consuming.acks.items,
            "send_loop_batches": self.sending.tick.batches,
            "send_loop_calls": self.sending.tick.items,
            "ack_loop_batches": self.consuming.ack_tick.batches,
            "ack_loop_calls": self.consuming.ack_tick.items,
        }

    def clients_snapshot(
        self, force: bool = False, pop_stats: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """What ``clients.json`` should hold now, or None if nothing changed
        (on the event loop: the client table is the loop's)."""
        now = time.time()
        for c in self.clients.values():
            if c.online and c.queue is None and now - c.last_heartbeat > 60:
                c.online = False
                self.clients.dirty = True
        # What a restart would remember: no more, no less.
        self.clients.forget(now, CLIENT_MEMORY_S)
        counters = dict(self.counters) | self.batch_counters()
        # The counters are read from this file by the admin API alone
        # (``serve --admin-only``) and worker 0's (``--workers``): written when
        # they changed too, at most every COUNTERS_WRITE_S (nothing is added
        # to the sends and acks that count: the comparison is here).
        counted = (
            counters != self._counters_written
            and now - self._counters_written_at >= COUNTERS_WRITE_S
        )
        if not (self.clients.dirty or force or counted):
            return None
        self.clients.dirty = False
        self._counters_written = counters
        self._counters_written_at = now
        return {
            "updated_at": now,
            "endpoint": f"{self.cfg.host}:{self.cfg.port}",
            "clients": [c.as_json() for c in self.clients.values()],
            "consumers": self.pop.stats() if pop_stats is None else pop_stats,
            "counters": counters,
        }

    def write_clients(self, data: dict[str, Any] | None) -> None:
        """Write a ``clients_snapshot`` (any thread): the console reads it.

        A worker of ``serve --workers N`` writes its own list, then merges
        every worker's into ``clients.json`` under a lock (``clients.lock``),
        so that no worker's clients are lost to another's write."""
        if data is None:
            return
        # The persist loop's write (on a thread) and close's final one: one
        # at a time, the last taken last.
        with self._clients_lock:
            self._write_clients(data)

    def _write_clients(self, data: dict[str, Any]) -> None:
        root = self.store.root
        if self.cfg.worker is None:
            _write_json(root / "clients.json", data)
            return
        from broker_core.endpoint.workers import CLIENTS_DIR

        data = data | {"worker": self.cfg.worker, "pid": os.getpid()}
        for c in data["clients"]:
            c["worker"] = self.cfg.worker
        own = root / CLIENTS_DIR / f"{self.cfg.worker}.json"
        own.parent.mkdir(parents=True, exist_ok=True)
        _write_json(own, data)
        with open(root / "grpc" / "clients.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            snapshots = []
            for path in sorted(own.parent.glob("*.json")):
                try:
                    snapshots.append(json.loads(path.read_text()))
                except (OSError, ValueError):
                    continue
            _write_json(root / "clients.json", merge_snapshots(snapshots))

    def save_clients(self, force: bool = False) -> None:
        self.write_clients(self.clients_snapshot(force))

    def close(self) -> None:
        self.stop_event.set()
        if self.node is not None:
            try:
                self.node.close()
            except Exception:  # noqa: BLE001
                log.exception("endpoint close: leaving the cluster failed")
        for listener in (self.relay, self.name_relay):
            if listener is not None:
                listener.close()
        for t in self.background:
            t.join(timeout=5)
        for task in getattr(self, "_tasks", ()):
            task.cancel()
        # Calls in flight finish first: no half-done append or pop change.
        self.threads.shutdown()
        try:
            self.delays.stop()
        except Exception:  # noqa: BLE001
            pass
        for c in self.clients.values():
            c.online = False
            c.queue = None
        # Each step on its own: one that fails (a full disk) must not keep the
        # services (and then the store) from closing.
        for step in (
            self.pop.offsets.mirror_offsets,
            lambda: self.save_clients(force=True),
            self.pop.close,
            self.delays.close,
            self.tx.close,
        ):
            try:
                step()
            except Exception:  # noqa: BLE001
                log.exception("endpoint close: a step failed, going on")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` at once (temporary file, rename): readers never see
    half a file. Not fsynced: a snapshot rewritten every half second."""
    tmp = temporary_name(path, "tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _tolerant(cls: Any) -> Any:
    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception:  # noqa: BLE001 - DecodeError: answered BAD_REQUEST
            return None

    return deserialize


def _refused(bad: Any, exc: Exception) -> Any:
    """The method's response type with BAD_REQUEST and the reason."""
    out = type(bad)()
    out.status.CopyFrom(status(C.BAD_REQUEST, str(exc)))
    return out


@dataclass(frozen=True)
class Method:
    """One RPC of ``MessagingService`` with the endpoint's wrapping around its
    handler, for either front (grpc.aio here, ``native_front.py``)."""

    name: str
    #: ``/apache.rocketmq.v2.MessagingService/<name>``
    path: str
    #: "unary", "server_stream" or "bidi"
    kind: str
    #: unary: ``async (request, context) -> response``; server_stream:
    #: ``async gen (request, context)``; bidi: ``async gen (requests, context)``
    #: (``request`` None: it did not decode)
    handler: Callable[..., Any]
    #: bytes -> request, None when it does not decode (answered BAD_REQUEST)
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]
    #: unary only, optional: ``handler``'s wrapping for many calls at once,
    #: run on the event loop without waiting: ``[(request, context)] ->``
    #: per call its response, an exception (the call fails as if ``handler``
    #: had raised it), or ``PER_CALL``: served by ``handler``, its request
    #: decoded again (the batch may have changed it)
    batch: Callable[[list[tuple[Any, Any]]], list[Any]] | None = None


def endpoint_methods(endpoint: Endpoint) -> list[Method]:
    """Every RPC of ``MessagingService`` with its wrapping: authentication,
    a request that does not decode answered with RocketMQ's BAD_REQUEST in the
    method's response type (instead of a gRPC error), forwarding to the
    master, namespaces; the RPCs this endpoint does not implement answer
    NOT_IMPLEMENTED. Client-streaming RPCs (there are none) are left out."""
    svc = spb.DESCRIPTOR.services_by_name["MessagingService"]
    out: list[Method] = []
    implemented = endpoint.handlers()
    batched = endpoint.batch_handlers()
    for method in svc.methods:
        req_cls = getattr(spb, method.input_type.name)
        resp_cls = getattr(spb, method.output_type.name)
        impl = implemented.get(method.name)
        bad = resp_cls(status=status(C.BAD_REQUEST, "malformed request"))
        unauth = resp_cls(status=status(C.UNAUTHORIZED, "authentication failed"))
        if impl is None:
            # Pull/offset RPCs, lite subscriptions: RocketMQ's NOT_IMPLEMENTED
            bad = resp_cls(
                status=status(C.NOT_IMPLEMENTED, f"{method.name} is not implemented")
            )

            async def impl(req, ctx, _bad=bad, _stream=method.server_streaming):
                return _bad

            if method.server_streaming:

                async def impl(req, ctx, _bad=bad):  # noqa: F811
                    yield _bad

        handler: Callable[..., Any]
        if method.server_streaming and method.client_streaming:
            kind = "bidi"

            async def bidi(it, ctx, _impl=impl, _unauth=unauth):
                if not endpoint.authorized(ctx):
                    yield _unauth
                    return

                ns = [""]

                async def clean():
                    async for x in it:
                        if x is not None:
                            try:
                                ns[0] = localize(x, header_ns(ctx)) or ns[0]
                            except ValidationError:
                                continue  # a bad namespace: the command is dropped
                            yield x

                async for out in _impl(clean(), ctx):
                    yield globalize(out, ns[0])

            handler = bidi
        elif method.server_streaming:
            kind = "server_stream"

            async def ustream(
                req, ctx, _impl=impl, _bad=bad, _unauth=unauth,
                _name=method.name, _resp=resp_cls,
            ):  # fmt: skip
                if not endpoint.authorized(ctx):
                    yield _unauth
                    return
                if req is None:
                    yield _bad
                    return
                if fwd := await endpoint.forwarder.target(_name, ctx):
                    if fwd == REFUSE:
                        yield endpoint.forwarder.refusal(_resp)
                        return
                    async for out in endpoint.forwarder.stream(
                        fwd, _name, req, _resp, ctx
                    ):
                        yield out
                    return
                try:
                    ns = localize(req, header_ns(ctx))
                except ValidationError as exc:
                    yield _refused(_bad, exc)
                    return
                async for out in _impl(req, ctx):
                    if ns and out.__class__ is bytes:
                        out = _resp.FromString(out)  # encoded by the handler
                    yield globalize(out, ns)

            handler = ustream
        elif method.client_streaming:
            continue
        else:
            kind = "unary"

            async def unary(
                req, ctx, _impl=impl, _bad=bad, _unauth=unauth,
                _name=method.name, _resp=resp_cls,
            ):  # fmt: skip
                if not endpoint.authorized(ctx):
                    return _unauth
                if req is None:
                    return _bad
                if fwd := await endpoint.forwarder.target(_name, ctx):
                    # This node takes no writes: its master answers (forward.py).
                    if fwd == REFUSE:
                        return endpoint.forwarder.refusal(_resp)
                    return await endpoint.forwarder.unary(fwd, _name, req, _resp, ctx)
                try:
                    ns = localize(req, header_ns(ctx))
                except ValidationError as exc:
                    return _refused(_bad, exc)
                return globalize(await _impl(req, ctx), ns)

            handler = unary
        many = batched.get(method.name) if kind == "unary" else None
        out.append(
            Method(
                name=method.name,
                path=f"/{svc.full_name}/{method.name}",
                kind=kind,
                handler=handler,
                decode=_tolerant(req_cls),
                encode=encoded(resp_cls),
                batch=None
                if many is None
                else _batch_wrapping(endpoint, method.name, many, bad, unauth),
            )
        )
    return out


def _batch_wrapping(
    endpoint: Endpoint,
    name: str,
    many: Callable[[list[tuple[Any, Any]]], list[Any]],
    bad: Any,
    unauth: Any,
) -> Callable[[list[tuple[Any, Any]]], list[Any]]:
    """A unary RPC's wrapping (``endpoint_methods``) for many calls at once
    around ``many``, its implementation for them (``Method.batch``): the
    same checks in the same order, call by call; a call to forward is left
    to the per-call wrapping (``PER_CALL``)."""

    def batch(calls: list[tuple[Any, Any]]) -> list[Any]:
        out: list[Any] = [PER_CALL] * len(calls)
        here = endpoint.forwarder.local(name)
        todo: list[int] = []
        spaces: list[str] = []
        for i, (req, ctx) in enumerate(calls):
            if not endpoint.authorized(ctx):
                out[i] = unauth
            elif req is None:
                out[i] = bad
            elif here:
                try:
                    spaces.append(localize(req, header_ns(ctx)))
                except ValidationError as exc:
                    out[i] = _refused(bad, exc)
                    continue
                todo.append(i)
            # else: whether it is forwarded is decided per call (a look-up
            # in the registry, off the event loop)
        if not todo:
            return out
        try:
            answers = many([calls[i] for i in todo])
        except Exception as exc:  # noqa: BLE001 - each call fails with it
            answers = [exc] * len(todo)
        for i, ns, r in zip(todo, spaces, answers, strict=True):
            # An answer encoded by hand (bytes) holds no Resource (those of
            # SendMessage and AckMessage have none): the same in any namespace.
            done = r is PER_CALL or r.__class__ is bytes or isinstance(r, Exception)
            out[i] = r if done else globalize(r, ns)
        return out

    return batch


def add_endpoint_to_server(endpoint: Endpoint, server: Any) -> None:
    """Register the servicer on a grpc.aio server like the generated
    ``add_MessagingServiceServicer_to_server``, with ``endpoint_methods``'
    wrapping (a request that does not decode gets RocketMQ's BAD_REQUEST in
    the method's response type instead of a gRPC error)."""
    factories = {
        "unary": grpc.unary_unary_rpc_method_handler,
        "server_stream": grpc.unary_stream_rpc_method_handler,
        "bidi": grpc.stream_stream_rpc_method_handler,
    }
    handlers = {
        m.name: factories[m.kind](m.handler, m.decode, m.encode)
        for m in endpoint_methods(endpoint)
    }
    svc = spb.DESCRIPTOR.services_by_name["MessagingService"]
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(svc.full_name, handlers),)
    )


def serve_admin_only(
    store_dir: str,
    cfg: EndpointConfig,
    store_options: dict[str, Any] | None = None,
) -> None:
    """``serve --admin-only``: the admin API alone over the store, until
    SIGTERM or SIGINT (``cluster.admin.StoreNode``)."""
    import signal

    from broker_core.cluster.admin import AdminServer, StoreNode

    assert cfg.admin is not None
    listen, token, tls = cfg.admin
    broker = Broker.open(store_dir, **(store_options or {}))
    node = StoreNode(broker, cfg)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        admin = AdminServer(node, listen, token, tls).start()
        log.info("admin API (alone) on %s://%s", admin.scheme, admin.address)
        try:
            stop.wait()
        finally:
            admin.stop()
    finally:
        try:
            node.close()
        finally:
            broker.close()


async def serve(
    store_dir: str,
    cfg: EndpointConfig,
    ready_file: str | None = None,
    store_options: dict[str, Any] | None = None,
) -> None:
    import signal

    # Handlers first: a SIGTERM during start-up (recovery, binding, the
    # background services) ends the process cleanly once it is up, instead
    # of killing it half-started with the default action.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker.open(store_dir, **(store_options or {}))
    if cfg.node is None:
        # No cluster, no controller: a lease an earlier run held means nothing.
        broker.store.state.lease_until_ns = 0
    endpoint = Endpoint(broker, cfg)
    if cfg.node is not None:
        from broker_core.cluster.node import ClusterNode

        endpoint.node = ClusterNode(broker.store, cfg.node)
        endpoint.pop.visible_end = endpoint.node.visible_end
        from broker_core.errors import StaleMasterError

        try:
            endpoint.node.check_not_stale()
        except StaleMasterError as exc:
            raise SystemExit(f"not serving: {exc}") from None
    limit = max(16 << 20, endpoint.max_body * 2 + (1 << 20))
    endpoint.forwarder.max_message = limit
    server: Any
    if cfg.front == "native":
        server = await _start_native(endpoint, cfg, limit)
    else:
        server = await _start_grpcio(endpoint, cfg, limit)
    admin = None
    # With ``--workers N`` worker 0 serves the admin API (each binding its
    # port made all but one fail to start).
    if cfg.admin is not None and cfg.worker in (None, 0):
        from broker_core.cluster.admin import AdminServer

        listen, token, tls = cfg.admin
        admin = AdminServer(endpoint, listen, token, tls).start()
        log.info("admin API on %s://%s", admin.scheme, admin.address)
    if endpoint.node is not None:
        endpoint.node.on_promoted.append(
            lambda: loop.call_soon_threadsafe(endpoint.start_master_services)
        )
        endpoint.node.start()
    await endpoint.start_background()
    # What start-up made lives as long as the process: out of the collector's
    # way, so that its full collections walk only what calls make.
    gc.freeze()
    if cfg.worker is not None:
        from broker_core.endpoint.workers import announce

        announce(
            endpoint.store.root,
            cfg.worker,
            {"port": cfg.port, "worker_port": cfg.worker_port},
        )
    who = "" if cfg.worker is None else f" (worker {cfg.worker}, pid {os.getpid()})"
    log.info("gRPC endpoint listening on %s:%d%s", cfg.host, cfg.port, who)
    try:
        await stop.wait()
    finally:
        if admin is not None:
            admin.stop()
        # Long polls answer first (nothing new), then the calls in flight get
        # SHUTDOWN_GRACE_S to finish before the rest are cancelled.
        endpoint.waits.close()
        end = time.monotonic() + SHUTDOWN_GRACE_S
        while endpoint.waits.polling and time.monotonic() < end:
            await asyncio.sleep(0.02)
        await server.stop(grace=SHUTDOWN_GRACE_S)
        await endpoint.forwarder.close()
        try:
            endpoint.close()
        finally:
            broker.close()


async def _start_grpcio(endpoint: Endpoint, cfg: EndpointConfig, limit: int) -> Any:
    """``--front python``: a grpc.aio server (the ports, TLS), started."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            # Shared only by the workers of ``serve --workers N``: a second
            # endpoint started by mistake on a port must fail, not split it.
            ("grpc.so_reuseport", 0 if cfg.worker is None else 1),
        ]
    )
    add_endpoint_to_server(endpoint, server)
    bound = server.add_insecure_port(f"{cfg.host}:{cfg.port}")
    if bound == 0:
        raise SystemExit(f"cannot listen on {cfg.host}:{cfg.port}")
    cfg.port = bound
    endpoint.ports.clear()
    endpoint.ports.add(bound)
    if cfg.worker_port is not None:
        own = server.add_insecure_port(f"{cfg.host}:{cfg.worker_port}")
        if own == 0:
            raise SystemExit(f"cannot listen on {cfg.host}:{cfg.worker_port}")
        endpoint.ports.add(own)
    if cfg.tls:
        listen, cert, key = cfg.tls
        creds = grpc.ssl_server_credentials(
            [(open(key, "rb").read(), open(cert, "rb").read())]
        )
        tls_port = server.add_secure_port(listen, creds)
        if tls_port == 0:
            raise SystemExit(f"cannot listen (TLS) on {listen}")
        endpoint.ports.add(tls_port)
        log.info("gRPC endpoint TLS on %s", listen)
    await server.start()
    return server


async def _start_native(endpoint: Endpoint, cfg: EndpointConfig, limit: int) -> Any:
    """``--front native``: the same RPCs behind the native front
    (``native_front.py``), started."""
    from broker_core.endpoint.native_front import NativeServer

    server = NativeServer(endpoint_methods(endpoint), limit, cfg.worker is not None)
    server.add_insecure_port(f"{cfg.host}:{cfg.port}")
    if cfg.worker_port is not None:
        server.add_insecure_port(f"{cfg.host}:{cfg.worker_port}")
    if cfg.tls:
        listen, cert, key = cfg.tls
        server.add_secure_port(listen, open(key).read(), open(cert).read())
    ports = await server.start()
    cfg.port = ports[0]
    endpoint.ports.clear()
    endpoint.ports.update(ports)
    if cfg.tls:
        log.info("gRPC endpoint TLS on %s", cfg.tls[0])
    log.info(
        "gRPC endpoint: native front (%s)",
        "served on the event loop's thread"
        if server.front.polling
        else "its own completion-queue threads",
    )
    return server
