"""grpc.aio server for ``apache.rocketmq.v2.MessagingService`` over broker_core.

See docs/grpc.md. Stubs come from the ``rocketmq-python-client`` package
(``rocketmq.grpc_protocol``), as the issue requires.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core.broker import Broker
from broker_core.endpoint.pop import (
    SHARDING_KEY,
    InvalidHandle,
    PopManager,
    encode_handle,
    now_ms,
)
from broker_core.errors import (
    FilterError,
    IllegalKeyError,
    IllegalMessageGroupError,
    IllegalMessageIdError,
    IllegalPropertyError,
    IllegalTagError,
    InvalidDelayError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    RecallError,
    StorageFullError,
    StorageIOError,
    TopicNotAllowedError,
    TopicNotFoundError,
    TransactionConflictError,
    UnknownTransactionError,
    ValidationError,
    WrongProducerGroupError,
)
from broker_core.message import Message, SendStatus
from broker_core.transaction import CheckTransport
from broker_core.validation import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    validate_message_group,
    validate_properties,
    validate_topic,
)

log = logging.getLogger("broker_core.endpoint")
C = pb.Code

#: Properties the broker keeps for itself: not shown as user properties.
SYSTEM_PROPS = frozenset(
    {
        "TAGS",
        "KEYS",
        "UNIQ_KEY",
        SHARDING_KEY,
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_OUT_MS",
        "TIMER_DEQUEUE_MS",
        "DELAY_SRC",
        "TRAN_MSG",
        "PGROUP",
        "__transactionId__",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "MSG_REGION",
        "TRACE_ON",
        "WAIT",
    }
)
ALL_TYPES = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, pb.PRIORITY]


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def local_utc_offset_min() -> int:
    """This host's offset from UTC now, in minutes (``time.localtime``)."""
    return int(time.localtime().tm_gmtoff // 60)


def body_digest(body: bytes) -> pb.Digest:
    """MD5 as upper-case hex: what the Apache proxy sends and every official
    client (Java, Python, Node.js, Go) verifies the same way. (A CRC32 in hex
    made the Node.js client, which compares a decimal string, reject every
    message as corrupted.)"""
    return pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())


def ts_ms(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def dur_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


#: RocketMQ status codes of the broker's errors: the first entry the error is
#: an instance of wins (subclasses before their bases).
_ERROR_CODES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], int], ...] = (
    ((InvalidTopicError, TopicNotAllowedError), C.ILLEGAL_TOPIC),
    (TopicNotFoundError, C.TOPIC_NOT_FOUND),
    (InvalidGroupError, C.ILLEGAL_CONSUMER_GROUP),
    (InvalidDelayError, C.ILLEGAL_DELIVERY_TIME),
    (FilterError, C.ILLEGAL_FILTER_EXPRESSION),
    (IllegalPropertyError, C.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (IllegalTagError, C.ILLEGAL_MESSAGE_TAG),
    (IllegalKeyError, C.ILLEGAL_MESSAGE_KEY),
    (IllegalMessageGroupError, C.ILLEGAL_MESSAGE_GROUP),
    (IllegalMessageIdError, C.ILLEGAL_MESSAGE_ID),
    (UnknownTransactionError, C.INVALID_TRANSACTION_ID),
    ((WrongProducerGroupError, TransactionConflictError), C.BAD_REQUEST),
    (ValidationError, C.BAD_REQUEST),
    # RocketMQ answers SERVICE_NOT_AVAILABLE ("the broker's disk is full"); its
    # proxy sends that as a server error: the client may retry later.
    ((StorageFullError, StorageIOError), C.INTERNAL_SERVER_ERROR),
)


def error_code(exc: Exception) -> int:
    """Return the RocketMQ status code for a broker error (the one place)."""
    if isinstance(exc, MessageTooLargeError):
        if "propert" in str(exc):
            return C.MESSAGE_PROPERTIES_TOO_LARGE
        return C.MESSAGE_BODY_TOO_LARGE
    if type(exc) is InvalidMessageError and "empty" in str(exc):
        return C.MESSAGE_BODY_EMPTY
    for kinds, code in _ERROR_CODES:
        if isinstance(exc, kinds):
            return code
    return C.INTERNAL_ERROR


@dataclass
class ClientInfo:
    client_id: str
    client_type: str = "CLIENT_TYPE_UNSPECIFIED"
    group: str = ""
    topics: list[str] = field(default_factory=list)
    address: str = ""
    language: str = ""
    version: str = ""
    connected_at: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    online: bool = True
    queue: asyncio.Queue[Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_type": self.client_type,
            "group": self.group,
            "topics": self.topics,
            "address": self.address,
            "language": self.language,
            "version": self.version,
            "connected_at": self.connected_at,
            "last_heartbeat": self.last_heartbeat,
            "online": self.online,
            "telemetry": self.queue is not None,
        }


#: How often a waiting long poll looks for appends by other processes.
APPEND_WATCH_S = 0.002
#: A long poll pops again at least this often, whatever woke it or not.
REPOLL_S = 1.0

#: How long a restarted endpoint remembers the clients its last run saw.
CLIENT_MEMORY_S = 600


@dataclass
class EndpointConfig:
    host: str = "127.0.0.1"
    port: int = 8081
    embedded_timers: bool = False
    transaction_timeout_ms: int | None = None
    check_interval_ms: int | None = None
    max_attempts: int = 17
    consumer_backoff_ms: list[int] = field(
        default_factory=lambda: [1000, 5000, 10000, 30000, 60000, 120000]
    )
    fifo_groups: set[str] = field(default_factory=set)
    default_invisible_ms: int = 30_000
    long_polling_ms: int = 20_000
    max_batch: int = 32
    #: auto-renewed invisibility (push consumers) ends after this long
    max_renew_ms: int = 30 * 60 * 1000
    #: Redis URL for check-backs relayed from the Celery check task; None: off
    redis_url: str | None = None
    redis_channel: str = "broker_core:grpc:check"
    #: access key -> secret key; empty: no authentication
    credentials: dict[str, str] = field(default_factory=dict)
    #: a retried send (same client message id and topic) within this window
    #: gets the first send's result and stores nothing
    dedupe_window_ms: int = 600_000
    #: a signed request's ``x-mq-date-time`` must be this close to the clock
    auth_window_s: int = 300
    #: clients' clock offsets from UTC, in minutes, that dates may carry (the
    #: clients sign *local* time with a literal Z, G12); default: UTC and this
    #: host's own zone
    auth_offsets_min: tuple[int, ...] = ()
    #: TLS port beside the plaintext one: (host:port, cert file, key file)
    tls: tuple[str, str, str] | None = None


class RecentSends:
    """Client message ids sent within a window, for idempotent retries.

    A client that gets no answer (the endpoint was killed mid-send, a timeout)
    sends again with the same message id. In memory: the ids of this run; for
    ids sent before a restart within the window, the store's index by
    ``UNIQ_KEY`` answers, so a retry across a restart is caught too.
    """

    def __init__(self, broker: Broker, window_ms: int, limit: int = 500_000):
        self.broker = broker
        self.window_ms = window_ms
        self.limit = limit
        self.started_ms = now_ms()
        self._ids: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()

    def remember(self, topic: str, msg_id: str, queue_offset: int) -> None:
        now = now_ms()
        ids = self._ids
        ids[(topic, msg_id)] = (queue_offset, now)
        while ids and (
            len(ids) > self.limit or next(iter(ids.values()))[1] < now - self.window_ms
        ):
            ids.popitem(last=False)

    def find(self, topic: str, msg_id: str | None) -> int | None:
        """Return the queue offset of an earlier send of ``msg_id``, or None."""
        if not msg_id or self.window_ms <= 0:
            return None
        now = now_ms()
        hit = self._ids.get((topic, msg_id))
        if hit is not None:
            return hit[0] if hit[1] >= now - self.window_ms else None
        if now - self.started_ms > self.window_ms:
            return None  # everything within the window was sent in this run
        for where in (topic, TIMER_TOPIC, SCHEDULE_TOPIC):
            try:
                m = self.broker.get_message(msg_id, where)
            except (MessageNotFoundError, ValidationError):
                continue
            if m.store_timestamp >= now - self.window_ms:
                return m.queue_offset
            return None
        return None


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return str(v)
    return ""


class Endpoint(sgrpc.MessagingServiceServicer):
    def __init__(self, broker: Broker, cfg: EndpointConfig) -> None:
        from broker_core.schedule import DelayService
        from broker_core.transaction import TransactionService

        self.broker = broker
        self.cfg = cfg
        self.store = broker.store
        self.max_body = self.store.config.max_message_size
        tx_settings: dict[str, Any] = {}
        if cfg.transaction_timeout_ms is not None:
            tx_settings["transaction_timeout_ms"] = cfg.transaction_timeout_ms
        if cfg.check_interval_ms is not None:
            tx_settings["check_interval_ms"] = cfg.check_interval_ms
        self.tx = TransactionService(broker, **tx_settings)
        self.delays = DelayService(broker)
        self.pop = PopManager(broker, max_attempts=cfg.max_attempts)
        self.clients: dict[str, ClientInfo] = {}
        self._restore_clients()
        self.clients_dirty = True
        self.tx_client: dict[str, str] = {}  # transaction id -> client id
        #: Check-backs sent: transaction id -> (monotonic time, client id).
        self.checks_out: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._checker_groups: set[str] = set()
        self.wakeups: dict[str, asyncio.Event] = {}
        # Nothing blocking runs on the event loop: sends and transactions go to
        # one writer thread (appends are serialised by the store anyway), the
        # pop state (not thread-safe) to one consumer thread. While another
        # process holds the append lock, only sends wait; receives, acks,
        # heartbeats and routes go on.
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="endpoint-writer")
        self.consumer = ThreadPoolExecutor(1, thread_name_prefix="endpoint-pop")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.relay: Any = None
        self.ports: set[int] = {cfg.port}
        self.counters = {
            "sent": 0,
            "received": 0,
            "acked": 0,
            "checks_sent": 0,
            "retries_deduplicated": 0,
        }
        #: Recent sends by client message id: a retry gets the first result.
        self.sends = RecentSends(broker, cfg.dedupe_window_ms)

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

    def endpoints(self, asked: pb.Endpoints | None = None) -> pb.Endpoints:
        """The broker address for routes: the access point the client used when
        it is one of ours (plaintext or TLS port), else the listen address."""
        if asked is not None and asked.addresses:
            a = asked.addresses[0]
            if a.port in self.ports:
                out = pb.Endpoints()
                out.CopyFrom(asked)
                return out
        return pb.Endpoints(
            scheme=pb.IPv4,
            addresses=[pb.Address(host=self.cfg.host, port=self.cfg.port)],
        )

    def queue(
        self,
        topic: str,
        qid: int = 0,
        asked: pb.Endpoints | None = None,
        permission: int = pb.READ_WRITE,
    ) -> pb.MessageQueue:
        return pb.MessageQueue(
            topic=pb.Resource(name=topic),
            id=qid,
            permission=permission,
            broker=pb.Broker(name="broker-a", id=0, endpoints=self.endpoints(asked)),
            accept_message_types=ALL_TYPES,
        )

    def route(self, topic: str, asked: pb.Endpoints | None) -> list[pb.MessageQueue]:
        """The topic's real queues, as RocketMQ's route has them: queue ids below
        both counts are read-write, the rest read-only or write-only."""
        cfg = self.store.topics.topics.get(topic)
        reads = cfg.read_queue_nums if cfg else 1
        writes = cfg.write_queue_nums if cfg else 1
        out = []
        for qid in range(max(reads, writes, 1)):
            perm = (
                pb.READ_WRITE
                if qid < reads and qid < writes
                else pb.READ
                if qid < reads
                else pb.WRITE
            )
            out.append(self.queue(topic, qid, asked, perm))
        return out

    def wake(self, topic: str) -> None:
        ev = self.wakeups.pop(topic, None)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        waiting, self.wakeups = self.wakeups, {}
        for ev in waiting.values():
            ev.set()

    async def on_writer(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a store write on the writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

    async def on_consumer(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a pop-state operation on the consumer thread."""
        return await asyncio.get_running_loop().run_in_executor(
            self.consumer, fn, *args
        )

    async def _watch_appends(self) -> None:
        """Wake long polls when anything is appended, by any process.

        Sends and commits through this endpoint wake their topic at once; this
        catches the rest (delayed deliveries by the embedded timers or a Celery
        worker, other processes' sends) by watching the store's dispatched
        position in its shared state file, a mapped read, every
        ``APPEND_WATCH_S`` while a long poll waits."""
        state = self.store.state
        last = state.dispatched_pos
        while True:
            await asyncio.sleep(APPEND_WATCH_S)
            if not self.wakeups:
                last = state.dispatched_pos
                continue
            pos = state.dispatched_pos
            if pos != last:
                last = pos
                self.wake_all()

    def client(self, context: grpc.aio.ServicerContext) -> ClientInfo:
        cid = client_id_of(context) or context.peer()
        c = self.clients.get(cid)
        if c is None:
            c = self.clients[cid] = ClientInfo(cid, address=context.peer())
            self.clients_dirty = True
        c.last_heartbeat = time.time()
        c.online = True
        return c

    async def start_background(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.tx.checkers.set_default(GrpcCheckTransport(self))
        # In this process a group configured with kind "grpc" is checked directly.
        import broker_core.endpoint.relay as relay
        from broker_core.transaction import register_transport_kind

        register_transport_kind("grpc", lambda cfg: GrpcCheckTransport(self))
        if self.cfg.redis_url:
            self.relay = relay.RelayListener(
                self, self.cfg.redis_url, self.cfg.redis_channel
            )
            self.relay.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._persist_loop()),
            loop.create_task(self._watch_appends()),
        ]
        if self.cfg.embedded_timers:
            self.delays.start()
            t = threading.Thread(target=self._check_loop, daemon=True, name="tx-check")
            t.start()
            self.threads.append(t)

    def _check_loop(self) -> None:
        period = 1.0
        if self.cfg.check_interval_ms:
            period = min(1.0, max(0.1, self.cfg.check_interval_ms / 4000))
        while not self.stop_event.wait(period):
            try:
                self.tx.run_check(time_budget_s=2.0, wait=False)
            except Exception:  # noqa: BLE001
                log.exception("transaction check failed")

    def _persist_pop(self, alive: set[str]) -> None:
        self.pop.apply_resets()
        if self.pop.renew:
            self.pop.renew_due(alive)
        self.pop.save()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                alive = {c.client_id for c in self.clients.values() if c.online}
                await self.on_consumer(self._persist_pop, alive)
                stats = await self.on_consumer(self.pop.stats)
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

    def clients_snapshot(
        self, force: bool = False, pop_stats: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """What ``clients.json`` should hold now, or None if nothing changed
        (on the event loop: the client table is the loop's)."""
        now = time.time()
        for c in self.clients.values():
            if c.online and c.queue is None and now - c.last_heartbeat > 60:
                c.online = False
                self.clients_dirty = True
        if not (self.clients_dirty or force):
            return None
        self.clients_dirty = False
        return {
            "updated_at": now,
            "endpoint": f"{self.cfg.host}:{self.cfg.port}",
            "clients": [c.as_json() for c in self.clients.values()],
            "consumers": self.pop.stats() if pop_stats is None else pop_stats,
            "counters": dict(self.counters),
        }

    def write_clients(self, data: dict[str, Any] | None) -> None:
        """Write a ``clients_snapshot`` (any thread): the console reads it."""
        if data is None:
            return
        path = self.store.root / "clients.json"
        tmp = path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)

    def save_clients(self, force: bool = False) -> None:
        self.write_clients(self.clients_snapshot(force))

    def close(self) -> None:
        self.stop_event.set()
        if self.relay is not None:
            self.relay.close()
        for t in self.threads:
            t.join(timeout=5)
        for task in getattr(self, "_tasks", ()):
            task.cancel()
        # Calls in flight finish first: no half-done append or pop change.
        self.writer.shutdown(wait=True)
        self.consumer.shutdown(wait=True)
        try:
            self.delays.stop()
        except Exception:  # noqa: BLE001
            pass
        self.pop.dirty = True
        for c in self.clients.values():
            c.online = False
            c.queue = None
        # Each step on its own: a full disk that refuses the pop state must not
        # keep the services (and then the store) from closing.
        for step in (
            self.pop.save,
            lambda: self.save_clients(force=True),
            self.delays.close,
            self.tx.close,
        ):
            try:
                step()
            except Exception:  # noqa: BLE001
                log.exception("endpoint close: a step failed, going on")

    # -- routes, heartbeats, telemetry ----------------------------------------
    def _topic_exists(self, topic: str) -> bool:
        self.store.refresh_topics()
        return topic in self.store.topics.topics

    async def QueryRoute(self, request, context):  # noqa: N802
        topic = request.topic.name
        try:
            if not self._topic_exists(topic):
                validate_topic(topic)
                if not self.store.config.auto_create_topic:
                    return spb.QueryRouteResponse(status=status(C.TOPIC_NOT_FOUND))
                try:
                    await self.on_writer(self.broker.create_topic, topic)
                except Exception:  # noqa: BLE001 - created concurrently
                    pass
        except ValidationError as exc:
            return spb.QueryRouteResponse(status=status(C.ILLEGAL_TOPIC, str(exc)))
        return spb.QueryRouteResponse(
            status=status(C.OK), message_queues=self.route(topic, request.endpoints)
        )

    async def Heartbeat(self, request, context):  # noqa: N802
        c = self.client(context)
        if request.client_type:
            c.client_type = pb.ClientType.Name(request.client_type)
        if request.group.name:
            c.group = request.group.name
        self.clients_dirty = True
        return spb.HeartbeatResponse(status=status(C.OK))

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        cid = client_id_of(context)
        c = self.clients.get(cid)
        if c is not None:
            c.online = False
            c.queue = None
            self.clients_dirty = True
        return spb.NotifyClientTerminationResponse(status=status(C.OK))

    def settings_reply(self, c: ClientInfo, s: pb.Settings) -> spb.TelemetryCommand:
        out = pb.Settings()
        out.CopyFrom(s)
        out.metric.Clear()
        out.metric.on = False
        c.client_type = pb.ClientType.Name(s.client_type)
        c.language = pb.Language.Name(s.user_agent.language) if s.user_agent else ""
        c.version = s.user_agent.version
        if s.client_type == pb.PRODUCER:
            c.topics = [t.name for t in s.publishing.topics]
            out.publishing.max_body_size = self.max_body
            out.publishing.validate_message_type = True
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = 3
            bp.exponential_backoff.initial.FromMilliseconds(10)
            bp.exponential_backoff.max.FromMilliseconds(1000)
            bp.exponential_backoff.multiplier = 2.0
        elif s.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
            sub = out.subscription
            c.group = s.subscription.group.name
            c.topics = [e.topic.name for e in s.subscription.subscriptions]
            sub.fifo = c.group in self.cfg.fifo_groups
            sub.receive_batch_size = self.cfg.max_batch
            if s.client_type == pb.PUSH_CONSUMER or not sub.HasField(
                "long_polling_timeout"
            ):
                sub.long_polling_timeout.FromMilliseconds(self.cfg.long_polling_ms)
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = self.cfg.max_attempts
            for ms in self.cfg.consumer_backoff_ms:
                d = bp.customized_backoff.next.add()
                d.FromMilliseconds(ms)
        self.clients_dirty = True
        return spb.TelemetryCommand(status=status(C.OK), settings=out)

    async def Telemetry(self, request_iterator, context):  # noqa: N802
        c = self.client(context)
        q: asyncio.Queue[Any] = asyncio.Queue()
        c.queue = q
        self.clients_dirty = True

        async def reader() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        q.put_nowait(self.settings_reply(c, cmd.settings))
                    c.last_heartbeat = time.time()
            except Exception:  # noqa: BLE001 - stream cancelled
                pass
            finally:
                q.put_nowait(None)

        task = asyncio.get_running_loop().create_task(reader())
        try:
            while True:
                item = await q.get()
                if item is None:
                    break
                yield item
        finally:
            task.cancel()
            if c.queue is q:
                c.queue = None
                c.online = False
            self.clients_dirty = True

    # -- sending -------------------------------------------------------------
    def _to_message(self, m: pb.Message) -> tuple[Message, int]:
        sp = m.system_properties
        topic = m.topic.name
        if not topic:
            raise InvalidTopicError("the topic is empty")
        props = {k: v for k, v in m.user_properties.items()}
        # User properties get no system name (the facade below would take
        # DELAY, TIMER_* and __SHARDINGKEY from them): the endpoint sets those
        # from the request's system properties alone.
        validate_properties(props)
        if sp.message_group:
            validate_message_group(sp.message_group)
            props[SHARDING_KEY] = sp.message_group
        mtype = sp.message_type
        if sp.HasField("delivery_timestamp"):
            t = sp.delivery_timestamp.seconds
            # G3: the client puts the user's value into seconds; a value above
            # 1e11 is a millisecond timestamp (the client's own docstring).
            ms = (
                t
                if t > 100_000_000_000
                else t * 1000 + sp.delivery_timestamp.nanos // 1_000_000
            )
            if ms < 0:
                raise InvalidDelayError("negative delivery timestamp")
            if ms > now_ms():
                props["TIMER_DELIVER_MS"] = str(ms)
        body = bytes(m.body)
        if sp.body_encoding == pb.GZIP:
            body = zlib.decompress(body, 47)
        keys = list(sp.keys) or None
        return (
            Message(
                topic,
                body,
                tags=sp.tag or None,
                keys=keys,
                properties=props or None,
                # The client's id, kept across its retries: the stored UNIQ_KEY
                # (as in RocketMQ), so a retry is recognised and consumers can
                # de-duplicate by it.
                msg_id=sp.message_id or None,
            ),
            mtype,
        )

    def _queue_for(self, topic: str, group: str) -> int | None:
        if not group:
            return None
        cfg = self.store.topics.topics.get(topic)
        n = cfg.write_queue_nums if cfg else self.store.config.default_queue_nums
        return zlib.crc32(group.encode()) % max(1, n)

    async def SendMessage(self, request, context):  # noqa: N802
        if not request.messages:
            return spb.SendMessageResponse(
                status=status(C.BAD_REQUEST, "no message in the request")
            )
        cid = client_id_of(context)
        sender = self.clients.get(cid) if cid else None
        if sender is not None:
            for m in request.messages:
                if m.topic.name not in sender.topics:
                    # A producer of this topic from now on (check-back target)
                    # even if its settings named no topics or never reached
                    # this run.
                    if len(sender.topics) < 1024 and sender.client_type in (
                        "PRODUCER",
                        "CLIENT_TYPE_UNSPECIFIED",
                    ):
                        sender.topics.append(m.topic.name)
                        self.clients_dirty = True
        entries, sent, deduplicated, woken = await self.on_writer(
            self._send_all, request.messages, cid
        )
        self.counters["sent"] += sent
        self.counters["retries_deduplicated"] += deduplicated
        for topic in woken:
            self.wake(topic)
        first_err = next((e.status for e in entries if e.status.code != C.OK), None)
        if first_err is None:
            top = status(C.OK)
        elif len(entries) == 1:
            top = first_err
        else:
            top = status(C.MULTIPLE_RESULTS)
        return spb.SendMessageResponse(status=top, entries=entries)

    def _send_all(
        self, messages: Any, cid: str
    ) -> tuple[list[spb.SendResultEntry], int, int, set[str]]:
        """Store each message of a SendMessage request (on the writer thread).

        Returns the result entries, how many were stored, how many were
        retries answered with the first send's result, and the topics to wake."""
        entries = []
        sent = deduplicated = 0
        woken: set[str] = set()
        for m in messages:
            try:
                entry, kind = self._send_one(m, cid)
            except Exception as exc:  # noqa: BLE001
                code = error_code(exc)
                if code == C.INTERNAL_ERROR:
                    log.exception("send failed")
                entries.append(spb.SendResultEntry(status=status(code, str(exc))))
                continue
            entries.append(entry)
            if kind == "retry":
                deduplicated += 1
                continue
            sent += 1
            if kind == "stored":
                woken.add(m.topic.name)
        return entries, sent, deduplicated, woken

    def _send_one(self, m: pb.Message, cid: str) -> tuple[spb.SendResultEntry, str]:
        """Store one message: ("half" | "stored" | "retry", its result entry)."""
        if len(m.body) > self.max_body:
            raise MessageTooLargeError(
                f"the message body size {len(m.body)} exceeds "
                f"the maximum {self.max_body}"
            )
        msg, mtype = self._to_message(m)
        group = m.system_properties.message_group
        if group:
            self.store.refresh_topics()
            msg.queue_id = self._queue_for(msg.topic, group)
        if mtype == pb.TRANSACTION:
            msg.msg_id = None  # the transaction id names the half
            self._ensure_checker(msg.topic)
            r = self.tx.send_half(msg.topic, msg)
            self.tx_client[r.transaction_id] = cid
            if len(self.tx_client) > 100_000:
                self.tx_client.pop(next(iter(self.tx_client)))
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=r.msg_id,
                    transaction_id=r.transaction_id,
                    offset=r.queue_offset,
                ),
                "half",
            )
        delayed = msg.properties and "TIMER_DELIVER_MS" in msg.properties
        earlier = self.sends.find(msg.topic, msg.msg_id)
        if earlier is not None:
            # A retry of a send already stored: the first result, nothing
            # stored again (once it passes the same checks).
            self.broker.validate(msg)
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=msg.msg_id,
                    offset=earlier,
                    recall_handle=msg.msg_id if delayed else "",
                ),
                "retry",
            )
        r = self.broker.send(msg)
        self.sends.remember(msg.topic, r.msg_id, r.queue_offset)
        st = status(C.OK)
        if r.status is SendStatus.FLUSH_DISK_TIMEOUT:
            # Stored, not yet on disk (sync flush): RocketMQ's proxy answers
            # MASTER_PERSISTENCE_TIMEOUT with the ids.
            st = status(
                C.MASTER_PERSISTENCE_TIMEOUT,
                "stored, but not flushed to disk within the sync flush timeout",
            )
        return (
            spb.SendResultEntry(
                status=st,
                message_id=r.msg_id,
                offset=r.queue_offset,
                recall_handle=r.msg_id if delayed else "",
            ),
            "stored",
        )

    def _ensure_checker(self, group: str) -> None:
        """Persist kind "grpc" for a producer group with no checker, so the
        Celery check (which imports broker_core.endpoint.relay through
        TRANSACTION_TRANSPORT_MODULES) relays its check-backs here."""
        if group in self._checker_groups:
            return
        self._checker_groups.add(group)
        # In this process: live producers first, then the group's own
        # configured checker (e.g. its webhook).
        self.tx.checkers.set_transport(group, GrpcCheckTransport(self, group))
        try:
            if group not in self.tx.checkers.configured():
                self.tx.checkers.configure(group, "grpc")
        except Exception:  # noqa: BLE001 - best effort
            log.warning("could not configure the grpc checker for %s", group)

    async def RecallMessage(self, request, context):  # noqa: N802
        handle = request.recall_handle
        if not handle:
            return spb.RecallMessageResponse(
                status=status(C.BAD_REQUEST, "recall handle is empty")
            )
        try:
            r = await self.on_writer(self.delays.recall, handle)
        except RecallError as exc:
            return spb.RecallMessageResponse(status=status(C.NOT_FOUND, str(exc)))
        except Exception as exc:  # noqa: BLE001
            return spb.RecallMessageResponse(status=status(error_code(exc), str(exc)))
        return spb.RecallMessageResponse(status=status(C.OK), message_id=r.msg_id)

    async def EndTransaction(self, request, context):  # noqa: N802
        from broker_core.transaction import TransactionResolution

        tid = request.transaction_id
        if not tid:
            return spb.EndTransactionResponse(
                status=status(C.INVALID_TRANSACTION_ID, "transaction id is empty")
            )
        res = {
            pb.COMMIT: TransactionResolution.COMMIT,
            pb.ROLLBACK: TransactionResolution.ROLLBACK,
        }.get(request.resolution, TransactionResolution.UNKNOWN)
        source = "CHECK" if request.source == pb.SOURCE_SERVER_CHECK else "CLIENT"
        if source == "CHECK":
            # The checker's answer, whatever it is (UNKNOWN included), goes in
            # the half's history with its latency.
            sent = self.checks_out.pop(tid, None)
            latency = None if sent is None else (time.monotonic() - sent[0]) * 1000
            try:
                await self.on_writer(
                    self.tx.record_check_answer,
                    tid,
                    res.value,
                    client_id_of(context) or (sent[1] if sent else ""),
                    latency,
                )
            except Exception:  # noqa: BLE001 - the outcome below matters more
                log.warning("could not record the check answer for %s", tid)
        try:
            await self.on_writer(
                self.tx.end_transaction, tid, request.topic.name, res, source
            )
        except Exception as exc:  # noqa: BLE001
            code = error_code(exc)
            if code == C.INTERNAL_ERROR:
                log.exception("end transaction failed")
            return spb.EndTransactionResponse(status=status(code, str(exc)))
        self.tx_client.pop(tid, None)
        if res is TransactionResolution.COMMIT:
            self.wake(request.topic.name)
        return spb.EndTransactionResponse(status=status(C.OK))

    # -- consuming -----------------------------------------------------------
    def _to_pb(self, qid: int, e: Any, invisible_ms: int) -> pb.Message:
        m = e.msg
        props = m.properties
        body = m.body
        sp = pb.SystemProperties(
            message_id=props.get("UNIQ_KEY") or m.offset_msg_id,
            body_digest=body_digest(body),
            body_encoding=pb.IDENTITY,
            born_timestamp=ts_ms(m.born_timestamp),
            born_host=m.born_host.rsplit(":", 1)[0],
            store_timestamp=ts_ms(m.store_timestamp),
            store_host=m.store_host,
            receipt_handle=encode_handle(qid, e.offset, e.nonce, e.visible_at),
            queue_id=qid,
            queue_offset=e.offset,
            delivery_attempt=e.attempts,
        )
        sp.invisible_duration.FromMilliseconds(invisible_ms)
        tags = props.get("TAGS")
        if tags:
            sp.tag = tags
        keys = props.get("KEYS")
        if keys:
            sp.keys.extend(keys.split(" "))
        group = props.get(SHARDING_KEY)
        if group:
            sp.message_group = group
            sp.message_type = pb.FIFO
        elif "TIMER_OUT_MS" in props or "DELAY_SRC" in props:
            sp.message_type = pb.DELAY
            if "TIMER_OUT_MS" in props:
                sp.delivery_timestamp.CopyFrom(ts_ms(int(props["TIMER_OUT_MS"])))
        elif m.prepared_transaction_offset:
            sp.message_type = pb.TRANSACTION
        else:
            sp.message_type = pb.NORMAL
        user = {k: v for k, v in props.items() if k not in SYSTEM_PROPS}
        return pb.Message(
            topic=pb.Resource(name=m.topic),
            user_properties=user,
            system_properties=sp,
            body=body,
        )

    async def ReceiveMessage(self, request, context):  # noqa: N802
        group = request.group.name
        topic = request.message_queue.topic.name
        if not group:
            yield spb.ReceiveMessageResponse(
                status=status(C.ILLEGAL_CONSUMER_GROUP, "consumer group is empty")
            )
            return
        if not topic or not self._topic_exists(topic):
            yield spb.ReceiveMessageResponse(
                status=status(C.TOPIC_NOT_FOUND, f"topic {topic!r} not found")
            )
            return
        fe = request.filter_expression
        expr_type = "SQL92" if fe.type == pb.SQL else "TAG"
        expr = fe.expression or "*"
        if request.HasField("invisible_duration"):
            invisible = dur_ms(request.invisible_duration)
            if invisible < 1000 or invisible > 12 * 3600 * 1000:
                yield spb.ReceiveMessageResponse(
                    status=status(
                        C.ILLEGAL_INVISIBLE_TIME, "invisible duration out of range"
                    )
                )
                return
        else:
            invisible = self.cfg.default_invisible_ms
        batch = max(1, min(request.batch_size or 1, self.cfg.max_batch))
        poll_ms = (
            dur_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else self.cfg.long_polling_ms
        )
        remaining = context.time_remaining()
        if remaining is not None:
            poll_ms = min(poll_ms, max(0, int((remaining - 1.0) * 1000)))
        deadline = time.monotonic() + poll_ms / 1000
        while True:
            # Wait-list first, then pop: an append between the two still wakes us.
            ev = self.wakeups.get(topic)
            if ev is None:
                ev = self.wakeups[topic] = asyncio.Event()
            try:
                got = await self.on_consumer(
                    self.pop.pop, group, topic, batch, invisible, expr, expr_type
                )
            except Exception as exc:  # noqa: BLE001
                code = error_code(exc)
                if code == C.INTERNAL_ERROR:
                    log.exception("receive failed")
                yield spb.ReceiveMessageResponse(status=status(code, str(exc)))
                return
            if got:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                yield spb.ReceiveMessageResponse(
                    status=status(C.MESSAGE_NOT_FOUND, "no new message")
                )
                return
            try:
                # Woken by a send or commit here, or by the append watcher;
                # REPOLL_S also catches what is not an append (a message whose
                # invisibility ran out, an offset reset).
                await asyncio.wait_for(ev.wait(), timeout=min(left, REPOLL_S))
            except TimeoutError:
                pass
        self.counters["received"] += len(got)
        if request.auto_renew:
            await self.on_consumer(
                self.pop.auto_renew,
                group,
                topic,
                got,
                client_id_of(context),
                invisible,
                self.cfg.max_renew_ms,
            )
        yield spb.ReceiveMessageResponse(status=status(C.OK))
        yield spb.ReceiveMessageResponse(delivery_timestamp=ts_ms(now_ms()))
        for qid, e in got:
            yield spb.ReceiveMessageResponse(message=self._to_pb(qid, e, invisible))

    async def AckMessage(self, request, context):  # noqa: N802
        group, topic = request.group.name, request.topic.name
        if not request.entries:
            return spb.AckMessageResponse(status=status(C.BAD_REQUEST, "no entry"))
        out = []
        first_err = None
        for e in request.entries:
            try:
                await self.on_consumer(self.pop.ack, group, topic, e.receipt_handle)
                st = status(C.OK)
                self.counters["acked"] += 1
            except InvalidHandle as exc:
                st = status(C.INVALID_RECEIPT_HANDLE, str(exc))
                first_err = first_err or st
            out.append(
                spb.AckMessageResultEntry(
                    message_id=e.message_id, receipt_handle=e.receipt_handle, status=st
                )
            )
        if first_err is None:
            top = status(C.OK)
        elif len(out) == 1:
            top = first_err
        else:
            top = status(C.MULTIPLE_RESULTS)
        return spb.AckMessageResponse(status=top, entries=out)

    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        ms = dur_ms(request.invisible_duration)
        if ms < 0 or ms > 12 * 3600 * 1000:
            return spb.ChangeInvisibleDurationResponse(
                status=status(C.ILLEGAL_INVISIBLE_TIME),
                receipt_handle=request.receipt_handle,
            )
        try:
            h = await self.on_consumer(
                self.pop.change_invisible,
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                ms,
            )
        except InvalidHandle as exc:
            return spb.ChangeInvisibleDurationResponse(
                status=status(C.INVALID_RECEIPT_HANDLE, str(exc)),
                receipt_handle=request.receipt_handle,
            )
        return spb.ChangeInvisibleDurationResponse(
            status=status(C.OK), receipt_handle=h
        )

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        try:
            await self.on_consumer(
                self.pop.forward_dlq,
                request.group.name,
                request.topic.name,
                request.receipt_handle,
            )
        except InvalidHandle as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(C.INVALID_RECEIPT_HANDLE, str(exc))
            )
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status(C.OK))

    async def QueryAssignment(self, request, context):  # noqa: N802
        topic = request.topic.name
        if not topic or not self._topic_exists(topic):
            return spb.QueryAssignmentResponse(status=status(C.TOPIC_NOT_FOUND))
        # One assignment for this broker: a Receive pops from every queue of
        # the topic (pop consumption), so consumers never need a rebalance.
        return spb.QueryAssignmentResponse(
            status=status(C.OK),
            assignments=[
                pb.Assignment(message_queue=self.queue(topic, 0, request.endpoints))
            ],
        )

    # -- check-backs (called from the check threads) ----------------------------
    def deliver_check(self, req: Any) -> str:
        from broker_core.transaction import CheckBackError

        target = None
        cid = self.tx_client.get(req.transaction_id)
        c = self.clients.get(cid) if cid else None
        if c is not None and c.queue is not None:
            target = c
        if target is None:
            producers = [
                x
                for x in list(self.clients.values())
                if x.queue is not None and x.client_type == "PRODUCER"
            ]
            # Only a producer that declares the half's topic: any other
            # application's checker could answer COMMIT for a transaction it
            # never saw. None online: the caller falls back to the group's
            # webhook, if one is configured.
            target = next((x for x in producers if req.topic in x.topics), None)
        if target is None or self.loop is None:
            raise CheckBackError(
                f"no live producer of topic {req.topic!r} (nor the sending client)"
            )
        props = dict(req.properties)
        sp = pb.SystemProperties(
            message_id=req.msg_id,
            body_digest=body_digest(req.body),
            body_encoding=pb.IDENTITY,
            message_type=pb.TRANSACTION,
            born_timestamp=ts_ms(req.born_timestamp),
            born_host="127.0.0.1",
        )
        if req.tags:
            sp.tag = req.tags
        if req.keys:
            sp.keys.extend(req.keys.split(" "))
        msg = pb.Message(
            topic=pb.Resource(name=req.topic),
            user_properties={k: v for k, v in props.items() if k not in SYSTEM_PROPS},
            system_properties=sp,
            body=req.body,
        )
        cmd = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=msg, transaction_id=req.transaction_id
            )
        )
        q = target.queue
        assert q is not None
        self.loop.call_soon_threadsafe(q.put_nowait, cmd)
        self.counters["checks_sent"] += 1
        self.checks_out[req.transaction_id] = (time.monotonic(), target.client_id)
        while len(self.checks_out) > 100_000:
            self.checks_out.popitem(last=False)
        return target.client_id


class GrpcCheckTransport(CheckTransport):
    """A ``CheckTransport`` sending RecoverOrphanedTransactionCommand on a live
    producer's Telemetry stream; the answer comes back as EndTransaction.

    With ``group`` set and no live producer, the group's persisted checker of
    another kind (a webhook) is asked instead."""

    name = "grpc"

    def __init__(self, endpoint: Endpoint, group: str | None = None) -> None:
        self.endpoint = endpoint
        self.group = group
        self._target = "-"

    @property
    def target(self) -> str:
        return self._target

    def _fallback(self) -> Any:
        if self.group is None:
            return None
        reg = self.endpoint.tx.checkers
        try:
            with reg._lock:
                cfg = reg._load().get(self.group)
        except Exception:  # noqa: BLE001
            return None
        if not cfg or cfg.get("kind") in (None, "grpc"):
            return None
        from broker_core.transaction.transports import _KINDS

        factory = _KINDS.get(cfg["kind"])
        return factory(cfg) if factory else None

    def check(self, request: Any) -> Any:
        from broker_core.transaction import CheckAnswer, CheckBackError

        try:
            self._target = self.endpoint.deliver_check(request)
            return CheckAnswer.SENT
        except CheckBackError:
            fb = self._fallback()
            if fb is None:
                raise
            self._target = f"fallback:{fb.target}"
            return fb.check(request)


def _tolerant(cls: Any) -> Any:
    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception:  # noqa: BLE001 - DecodeError: answered BAD_REQUEST
            return None

    return deserialize


def add_endpoint_to_server(endpoint: Endpoint, server: Any) -> None:
    """Register the servicer like the generated ``add_MessagingServiceServicer_
    to_server``, but a request that does not decode gets RocketMQ's
    BAD_REQUEST in the method's response type instead of a gRPC error."""
    svc = spb.DESCRIPTOR.services_by_name["MessagingService"]
    handlers = {}
    for method in svc.methods:
        req_cls = getattr(spb, method.input_type.name)
        resp_cls = getattr(spb, method.output_type.name)
        impl = getattr(endpoint, method.name)
        bad = resp_cls(status=status(C.BAD_REQUEST, "malformed request"))
        unauth = resp_cls(status=status(C.UNAUTHORIZED, "authentication failed"))
        if method.name not in Endpoint.__dict__:
            # Pull/offset RPCs, lite subscriptions: RocketMQ's NOT_IMPLEMENTED
            bad = resp_cls(
                status=status(C.NOT_IMPLEMENTED, f"{method.name} is not implemented")
            )

            async def impl(req, ctx, _bad=bad, _stream=method.server_streaming):
                return _bad

            if method.server_streaming:

                async def impl(req, ctx, _bad=bad):  # noqa: F811
                    yield _bad

        if method.server_streaming and method.client_streaming:

            async def bidi(it, ctx, _impl=impl, _unauth=unauth):
                if not endpoint.authorized(ctx):
                    yield _unauth
                    return

                async def clean():
                    async for x in it:
                        if x is not None:
                            yield x

                async for out in _impl(clean(), ctx):
                    yield out

            h = grpc.stream_stream_rpc_method_handler(
                bidi, _tolerant(req_cls), resp_cls.SerializeToString
            )
        elif method.server_streaming:

            async def ustream(req, ctx, _impl=impl, _bad=bad, _unauth=unauth):
                if not endpoint.authorized(ctx):
                    yield _unauth
                    return
                if req is None:
                    yield _bad
                    return
                async for out in _impl(req, ctx):
                    yield out

            h = grpc.unary_stream_rpc_method_handler(
                ustream, _tolerant(req_cls), resp_cls.SerializeToString
            )
        elif method.client_streaming:
            continue
        else:

            async def unary(req, ctx, _impl=impl, _bad=bad, _unauth=unauth):
                if not endpoint.authorized(ctx):
                    return _unauth
                if req is None:
                    return _bad
                return await _impl(req, ctx)

            h = grpc.unary_unary_rpc_method_handler(
                unary, _tolerant(req_cls), resp_cls.SerializeToString
            )
        handlers[method.name] = h
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(svc.full_name, handlers),)
    )


async def serve(
    store_dir: str,
    cfg: EndpointConfig,
    ready_file: str | None = None,
    store_options: dict[str, Any] | None = None,
) -> None:
    import signal

    broker = Broker.open(store_dir, **(store_options or {}))
    endpoint = Endpoint(broker, cfg)
    limit = max(16 << 20, endpoint.max_body * 2 + (1 << 20))
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
    )
    add_endpoint_to_server(endpoint, server)
    bound = server.add_insecure_port(f"{cfg.host}:{cfg.port}")
    if bound == 0:
        raise SystemExit(f"cannot listen on {cfg.host}:{cfg.port}")
    cfg.port = bound
    endpoint.ports = {bound}
    if cfg.tls:
        listen, cert, key = cfg.tls
        creds = grpc.ssl_server_credentials(
            [(open(key, "rb").read(), open(cert, "rb").read())]
        )
        tls_port = server.add_secure_port(listen, creds)
        if tls_port == 0:
            raise SystemExit(f"cannot listen (TLS) on {listen}")
        endpoint.ports.add(tls_port)
        print(f"broker_core gRPC endpoint TLS on {listen}", flush=True)
    await server.start()
    await endpoint.start_background()
    log.info("listening on %s:%d", cfg.host, cfg.port)
    print(f"broker_core gRPC endpoint listening on {cfg.host}:{cfg.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop(grace=1)
        try:
            endpoint.close()
        finally:
            broker.close()
