"""SendMessage and RecallMessage: messages into the store."""

from __future__ import annotations

import logging
import sqlite3
import zlib
from collections import OrderedDict, deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.broker import Broker
from broker_core.endpoint.coalesce import PER_CALL, Coalescer, TickBatch
from broker_core.endpoint.pop import (
    SHARDING_KEY,
    now_ms,
)
from broker_core.endpoint.retries import SharedSends
from broker_core.endpoint.wire import (
    C,
    client_id_of,
    error_code,
    ok_send_response,
    overall_status,
    status,
    too_many,
)
from broker_core.errors import (
    AppendBusyError,
    InvalidDelayError,
    InvalidMessageError,
    InvalidTopicError,
    MessageCorruptedError,
    MessageNotFoundError,
    MessageTooLargeError,
    MessageTypeMismatchError,
    PropertiesTooLargeError,
    RecallError,
    TopicNotAllowedError,
    ValidationError,
)
from broker_core.message import Message, SendResult, SendStatus
from broker_core.metadata import MessageType
from broker_core.validation import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    validate_message_group,
    validate_properties,
)

if TYPE_CHECKING:
    from broker_core.broker import Broker
    from broker_core.endpoint.clients import ClientTable
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.guard import WriteGuard
    from broker_core.endpoint.threads import Threads
    from broker_core.endpoint.transactions import Transactions
    from broker_core.endpoint.waits import PollWaits
    from broker_core.schedule import DelayService

#: What one SendMessage call gets back from the writer: its result entries,
#: how many messages were stored, how many were retries, the topics to wake.
SendOutcome = tuple[list[Any], int, int, set[str]]


#: The official clients' message ids (version 01: ``01``, MAC, pid, seconds
#: since this epoch, sequence; 34 hex digits) say when they were made.
_ID_EPOCH_S = 1_609_459_200  # 2021-01-01T00:00:00Z
#: How far a client's clock may run ahead of this one's for an id's time to
#: prove it was made after this run started.
ID_CLOCK_SKEW_S = 60


def made_after(msg_id: str, started_ms: int) -> bool:
    """Whether a version-01 message id was made after ``started_ms`` (with
    ``ID_CLOCK_SKEW_S`` to spare): no earlier run can have stored it, so a
    retry of it is in this run's memory or nowhere. False when unsure."""
    if len(msg_id) != 34 or not msg_id.startswith("01"):
        return False
    try:
        made_s = _ID_EPOCH_S + int(msg_id[18:26], 16)
    except ValueError:
        return False
    return made_s * 1000 >= started_ms + ID_CLOCK_SKEW_S * 1000


#: Why a slave refuses a write (its routes are read-only; a client that
#: still sends here after a failover learns it and routes to the masters).
@dataclass(slots=True)
class _Call:
    """One SendMessage call's results while its batch is stored."""

    entries: list[Any] = field(default_factory=list)
    stored: int = 0
    retries: int = 0
    woken: set[str] = field(default_factory=set)


log = logging.getLogger("broker_core.endpoint")
_MESSAGE_TYPES = frozenset(pb.MessageType.values())
_ENCODINGS = frozenset(pb.Encoding.values())


class RecentSends:
    """Client message ids sent within a window, for idempotent retries.

    A client that gets no answer (the endpoint was killed mid-send, a timeout)
    sends again with the same message id. In memory: the ids of this run; for
    ids sent before a restart within the window, the store's index by
    ``UNIQ_KEY`` answers, so a retry across a restart is caught too. A worker
    of ``serve --workers N`` also shares its ids with the others (``shared``,
    ``retries.py``): a retry may reach another worker.
    """

    def __init__(
        self,
        broker: Broker,
        window_ms: int,
        limit: int = 500_000,
        shared: SharedSends | None = None,
    ):
        self.broker = broker
        self.window_ms = window_ms
        self.limit = limit
        self.shared = shared
        #: remembered here, not yet handed to ``shared``
        self._unshared: deque[tuple[str, str, int, int]] = deque()
        #: a share job is queued or running: what is remembered meanwhile
        #: goes with it (one transaction for many batches under load)
        self._sharing = False
        self.started_ms = now_ms()
        #: Whether the log held anything when this run started: if not, no
        #: earlier run can have stored a send this run gets a retry of.
        self.prior_log = broker.store.state.commit_pos > 0
        self._ids: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()

    def remember(self, topic: str, msg_id: str, queue_offset: int) -> None:
        now = now_ms()
        ids = self._ids
        ids[(topic, msg_id)] = (queue_offset, now)
        if self.shared is not None:
            self._unshared.append((topic, msg_id, queue_offset, now))
        while ids and (
            len(ids) > self.limit or next(iter(ids.values()))[1] < now - self.window_ms
        ):
            ids.popitem(last=False)

    def find(
        self, topic: str, msg_id: str | None, may_block: bool = True
    ) -> int | None:
        """Return the queue offset of an earlier send of ``msg_id``, or None.

        A look-up in the store's index may wait on files: with
        ``may_block=False`` it raises ``AppendBusyError`` instead."""
        if not msg_id or self.window_ms <= 0:
            return None
        now = now_ms()
        hit = self._ids.get((topic, msg_id))
        if hit is not None:
            return hit[0] if hit[1] >= now - self.window_ms else None
        if self.shared is not None:
            try:
                earlier = self.shared.find(topic, msg_id, now - self.window_ms)
            except sqlite3.OperationalError as exc:
                if not may_block:
                    raise AppendBusyError(f"a retry check: {exc}") from exc
                raise
            if earlier is not None:
                return earlier
        if now - self.started_ms > self.window_ms or not self.prior_log:
            return None  # everything within the window was sent in this run
        if made_after(msg_id, self.started_ms):
            # Made after this run started: its first send was to this run. For
            # the window after a restart this spares each new message a look-up
            # in the index (and the writer thread it needs).
            return None
        if not may_block:
            raise AppendBusyError("a retry check needs the store's index")
        for where in (topic, TIMER_TOPIC, SCHEDULE_TOPIC):
            try:
                m = self.broker.get_message(msg_id, where)
            except (MessageNotFoundError, ValidationError):
                continue
            if m.store_timestamp >= now - self.window_ms:
                return m.queue_offset
            return None
        return None

    def share(self, executor: Executor) -> None:
        """Hand the ids remembered since the last call to the other workers,
        in one transaction on ``executor`` (the writer thread: the event loop
        never waits for it)."""
        if not self._unshared or self._sharing:
            return
        self._sharing = True
        executor.submit(self._share)

    def _share(self) -> None:
        assert self.shared is not None
        self._sharing = False  # what is remembered from now on: a next job
        rows = []
        while self._unshared:
            rows.append(self._unshared.popleft())
        try:
            self.shared.remember(rows, now_ms() - self.window_ms)
        except Exception:  # noqa: BLE001 - only other workers' retries miss them
            log.exception("sharing recent send ids failed")


#: One SendMessage call's bodies, decompressed, may hold this many times the
#: maximum message size in all (a batch of 50 gzip bombs of 4 MiB each took
#: the endpoint to 848 MB); the rest of the call is refused with the size code.
REQUEST_BODY_FACTOR = 4
#: Gzip members one body may hold (a client sends one): each costs a new
#: decompressor, and 200,000 one-byte members took 12 s to read.
MAX_GZIP_MEMBERS = 1024
#: Compressed bytes fed to the decompressor at a time, so that what follows a
#: member (``unused_data``) is never a copy of the whole rest of the body.
_INFLATE_CHUNK = 64 * 1024


def inflate(body: bytes, limit: int) -> bytes:
    """A GZIP (or zlib) body, decompressed as it streams and never past
    ``limit`` bytes: a body that would inflate further is refused after at most
    ``limit`` + 1 bytes of output (``MessageTooLargeError``), whatever its
    compressed size; bytes that are not whole gzip members, or more than
    ``MAX_GZIP_MEMBERS`` of them, are ``MessageCorruptedError``. Concatenated
    members are one body, as gzip reads them. Linear in the body's size."""
    out = bytearray()
    view = memoryview(body)
    pos, end, members = 0, len(body), 0
    while True:
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise MessageCorruptedError(
                f"the GZIP body holds more than {MAX_GZIP_MEMBERS} members"
            )
        d = zlib.decompressobj(47)
        while not d.eof:
            if pos >= end:
                raise MessageCorruptedError("the GZIP body is cut short")
            data: bytes | memoryview = view[pos : pos + _INFLATE_CHUNK]
            pos += len(data)
            while data:
                try:
                    out += d.decompress(data, limit + 1 - len(out))
                except zlib.error as exc:
                    raise MessageCorruptedError(
                        f"the GZIP body does not decompress: {exc}"
                    ) from exc
                if len(out) > limit:
                    raise MessageTooLargeError(
                        f"the message body inflates past the maximum {limit} bytes"
                    )
                if d.eof:
                    break
                data = d.unconsumed_tail
        pos -= len(d.unused_data)  # the next member starts in this chunk
        if pos >= end:
            return bytes(out)


#: topics no client may send to (namespaced ones too: ``%RETRY%ns%group``)
CLIENT_FORBIDDEN_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")


class Sending:
    """SendMessage and RecallMessage: messages into the store."""

    def __init__(
        self,
        *,
        cfg: EndpointConfig,
        broker: Broker,
        delays: DelayService,
        transactions: Transactions,
        clients: ClientTable,
        guard: WriteGuard,
        threads: Threads,
        waits: PollWaits,
        counters: dict[str, int],
    ) -> None:
        self.cfg = cfg
        self.broker = broker
        self.store = broker.store
        self.max_body = self.store.config.max_message_size
        self.delays = delays
        #: the transaction family: a half's sender is remembered for its
        #: check-backs
        self.transactions = transactions
        self.tx = transactions.tx
        self.clients = clients
        self.guard = guard
        self.threads = threads
        self.waits = waits
        self.counters = counters
        #: Concurrent SendMessage calls become one job on the writer thread.
        self.group = Coalescer(threads.writer, self._send_requests)
        #: The sends of one event-loop iteration, stored there in one append.
        self.tick = TickBatch(self._send_now)
        #: Recent sends by client message id: a retry gets the first result.
        self.sends = RecentSends(
            broker,
            cfg.dedupe_window_ms,
            shared=None
            if cfg.worker is None or cfg.dedupe_window_ms <= 0
            else SharedSends(self.store.root / "grpc" / "sends.db"),
        )

    # -- sending -------------------------------------------------------------
    def _to_message(
        self, m: pb.Message, room: int | None = None
    ) -> tuple[Message, int]:
        sp = m.system_properties
        topic = m.topic.name
        if not topic:
            raise InvalidTopicError("the topic is empty")
        if topic.startswith(CLIENT_FORBIDDEN_PREFIXES):
            # A group's retry and dead-letter topics are the broker's to write
            # (the console's resend included), never a client's.
            raise TopicNotAllowedError(
                f"sending to the system topic {topic[:200]!r} is forbidden"
            )
        props = {k: v for k, v in m.user_properties.items()}
        # User properties get no system name (the facade below would take
        # DELAY, TIMER_* and __SHARDINGKEY from them): the endpoint sets those
        # from the request's system properties alone.
        validate_properties(props)
        if sp.message_group:
            validate_message_group(sp.message_group)
            props[SHARDING_KEY] = sp.message_group
        mtype = sp.message_type
        if mtype not in _MESSAGE_TYPES:
            raise InvalidMessageError(f"unknown message type {mtype}")
        if sp.body_encoding not in _ENCODINGS:
            raise InvalidMessageError(f"unknown body encoding {sp.body_encoding}")
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
            # Never past the maximum message size, nor past what the call's
            # budget has left (its earlier bodies, halves included).
            limit = self.max_body if room is None else min(self.max_body, room)
            body = inflate(body, max(0, limit))
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

    def _check_type(self, m: pb.Message, topic: str) -> None:
        """Refuse a message whose type its topic was not made for, as Apache
        RocketMQ's proxy does (``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``): a
        topic takes one type (a MIXED topic, every type); a topic this endpoint
        created on first use is NORMAL."""
        sp = m.system_properties
        kind: str
        if sp.lite_topic:
            kind = "LITE"  # no topic of ours takes these (docs/compat.md)
        elif sp.HasField("priority"):
            kind = "PRIORITY"
        elif sp.message_type == pb.TRANSACTION:
            kind = MessageType.TRANSACTION
        elif sp.message_group:
            kind = MessageType.FIFO
        elif sp.HasField("delivery_timestamp"):
            kind = MessageType.DELAY
        else:
            kind = MessageType.NORMAL
        if kind in ("LITE", "PRIORITY"):
            raise MessageTypeMismatchError(
                f"{kind.lower()} messages are not supported (no topic takes them)"
            )
        if kind == MessageType.TRANSACTION and sp.HasField("delivery_timestamp"):
            raise MessageTypeMismatchError(
                "a transactional message cannot have a delivery time"
            )
        cfg = self.store.topics.topics.get(topic)
        if cfg is None:
            self.store.refresh_topics()
            cfg = self.store.topics.topics.get(topic)
        if cfg is None:
            if not self.store.config.auto_create_topic:
                return  # the append says the topic does not exist
            want: str = MessageType.NORMAL  # what its first send makes it
        else:
            want = cfg.message_type
        if want != MessageType.MIXED and want != kind:
            raise MessageTypeMismatchError(
                f"the topic {topic!r} takes {want} messages, not {kind} ones "
                "(create it with that message type, or MIXED)"
            )

    def _queue_for(self, topic: str, group: str) -> int | None:
        if not group:
            return None
        cfg = self.store.topics.topics.get(topic)
        n = cfg.write_queue_nums if cfg else self.store.config.default_queue_nums
        return zlib.crc32(group.encode()) % max(1, n)

    def _refusal(self, request: Any) -> spb.SendMessageResponse | None:
        """The answer to a SendMessage refused before anything is read:
        no message, too many, a node that takes no writes; None: go on."""
        if not request.messages:
            return spb.SendMessageResponse(
                status=status(C.BAD_REQUEST, "no message in the request")
            )
        if (refused := too_many(len(request.messages), "messages")) is not None:
            return spb.SendMessageResponse(status=refused)
        if (refused := self.guard.refusal()) is not None:
            return spb.SendMessageResponse(status=refused)
        return None

    def _to_writer(self, request: Any) -> bool:
        """Whether the call's messages must be stored on the writer thread."""
        # Halves, and bodies to decompress (up to the call's budget of CPU),
        # go to the writer thread: never on the event loop.
        # A topic made on first use is a write of the topic table: there too
        # (300 new topics in one call held every client for 6.5 s).
        messages = request.messages
        for m in messages:
            sp = m.system_properties
            if sp.message_type == pb.TRANSACTION or sp.body_encoding == pb.GZIP:
                return True
        has_topic = self.store.has_topic
        return not all(has_topic(t) for t in {m.topic.name for m in messages})

    def _note_sender(self, request: Any, cid: str) -> None:
        sender = self.clients.get(cid) if cid else None
        if sender is None:
            return
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
                    self.clients.dirty = True

    def _count(self, outcome: SendOutcome) -> None:
        """A call's outcome counted, its topics woken."""
        _entries, sent, deduplicated, woken = outcome
        self.counters["sent"] += sent
        self.counters["retries_deduplicated"] += deduplicated
        for topic in woken:
            self.waits.wake(topic)

    def _answer(self, outcome: SendOutcome) -> spb.SendMessageResponse:
        """The response for a call's outcome, counted, its topics woken."""
        self._count(outcome)
        entries = outcome[0]
        return spb.SendMessageResponse(
            status=overall_status([e.status for e in entries]), entries=entries
        )

    async def SendMessage(self, request, context):  # noqa: N802
        if (refused := self._refusal(request)) is not None:
            return refused
        to_writer = self._to_writer(request)
        cid = client_id_of(context)
        self._note_sender(request, cid)
        outcome = None
        if not self.group.busy and not self.group.waiting and not to_writer:
            # Nothing queued for the writer: store here, with the other sends
            # of this loop iteration in one append, if the append lock is free
            # (a memory copy), else hand the call to the writer thread.
            try:
                outcome = await self.tick.submit((request.messages, cid))
            except AppendBusyError:
                outcome = None
        if outcome is None:
            outcome = await self.group.submit((request.messages, cid))
        entries = outcome[0]
        if any(e.status.code == C.OK for e in entries):
            # SYNC_MASTER: answered once a slave has the log up to here, a
            # deduplicated retry too (its first try may never have reached one).
            why = await self.guard.unreplicated()
            if why is not None:
                for e in entries:
                    if e.status.code == C.OK:
                        e.status.CopyFrom(status(C.SLAVE_PERSISTENCE_TIMEOUT, why))
        return self._answer(outcome)

    def send_many(self, calls: list[tuple[Any, Any]]) -> list[Any]:
        """SendMessage for many calls at once, on the event loop and without
        waiting (the calls of one drain of the native front): one append
        for all, answered once it returned. Per call its response, or
        ``PER_CALL`` for ``SendMessage`` to answer it (the writer thread is
        storing or must, the append lock is held elsewhere, a SYNC_MASTER
        waits for its slaves)."""
        out: list[Any] = [PER_CALL] * len(calls)
        if self.group.busy or self.group.waiting or self.guard.waits_for_replicas():
            return out
        todo: list[int] = []
        items: list[tuple[Any, str]] = []
        for i, (request, context) in enumerate(calls):
            if (refused := self._refusal(request)) is not None:
                out[i] = refused
                continue
            if self._to_writer(request):
                continue
            cid = client_id_of(context)
            self._note_sender(request, cid)
            todo.append(i)
            items.append((request.messages, cid))
        # AppendBusyError: nothing stored, each call goes the way SendMessage goes.
        return self.tick.run_in_place(
            out, todo, items, lambda xs: self._send_requests(xs, False),
            AppendBusyError, lambda _i, outcome: self._answer_encoded(outcome),
        )  # fmt: skip

    def _answer_encoded(self, outcome: SendOutcome) -> Any:
        """``_answer``, encoded by hand when every entry is OK (the usual
        answer)."""
        entries = outcome[0]
        ok = C.OK
        if any(e.status.code != ok for e in entries):
            return self._answer(outcome)
        self._count(outcome)
        return ok_send_response(
            [
                (e.message_id, e.transaction_id, e.offset, e.recall_handle)
                for e in entries
            ]
        )

    def _send_now(self, requests: list[tuple[Any, str]]) -> list[SendOutcome]:
        """``_send_requests`` on the event loop: ``AppendBusyError`` (nothing
        stored) for the writer thread to do it, when the writer took work
        since these calls looked."""
        if self.group.busy or self.group.waiting:
            raise AppendBusyError("the writer thread is storing")
        return self._send_requests(requests, False)

    def _send_requests(
        self, requests: list[tuple[Any, str]], blocking: bool = True
    ) -> list[SendOutcome]:
        """Store the messages of many SendMessage calls (on the writer thread):
        halves and retries one by one, every other message in one batched
        append (group commit). One outcome per call, in order.

        ``blocking=False`` (on the event loop, no halves): ``AppendBusyError``
        with nothing stored unless the batch is appended at once."""
        calls: list[_Call] = []
        batch: list[tuple[Message, _Call, int, bool]] = []
        budget = REQUEST_BODY_FACTOR * self.max_body
        over_budget = MessageTooLargeError(
            f"the call's message bodies exceed {budget} bytes in all "
            "(decompressed): send them in several calls"
        )
        held = 0  # bytes of the batch's bodies, held until it is stored
        for messages, cid in requests:
            call = _Call()
            calls.append(call)
            bodies = 0  # bytes of this call's bodies, decompressed
            for m in messages:
                if bodies >= budget:
                    call.entries.append(self._error_entry(over_budget))
                    continue
                try:
                    done = self._send_apart(m, cid, blocking, budget - bodies)
                except AppendBusyError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    call.entries.append(self._error_entry(exc))
                    continue
                if isinstance(done, tuple):  # a half or a retry, answered now
                    entry, kind, size = done
                    bodies += size
                    call.entries.append(entry)
                    if kind == "retry":
                        call.retries += 1
                    else:
                        call.stored += 1
                    continue
                bodies += len(done.body)
                if bodies > budget:
                    call.entries.append(self._error_entry(over_budget))
                    continue
                call.entries.append(None)  # filled once the batch is stored
                delayed = bool(
                    done.properties and "TIMER_DELIVER_MS" in done.properties
                )
                batch.append((done, call, len(call.entries) - 1, delayed))
                held += len(done.body)
                if held >= budget and blocking:
                    # The writer's job gathers many calls: store what it holds
                    # before decompressing more (24 calls of 16 MiB each were
                    # held at once, 817 MB).
                    self._store_batch(batch, blocking)
                    batch, held = [], 0
        if batch:
            self._store_batch(batch, blocking)
        return [(c.entries, c.stored, c.retries, c.woken) for c in calls]

    def _store_batch(
        self, batch: list[tuple[Message, _Call, int, bool]], blocking: bool
    ) -> None:
        """One append for the whole batch; if it is refused (a message fails a
        check, the disk is full), each message alone, for its own answer."""
        msgs = [b[0] for b in batch]
        results: list[SendResult | Exception]
        try:
            results = list(self.broker.send_batch(msgs, blocking=blocking))
        except Exception as exc:  # noqa: BLE001 - nothing was stored
            if not blocking:
                # Answering one by one may wait: the writer thread does it.
                raise AppendBusyError(str(exc)) from exc
            results = []
            for msg in msgs:
                try:
                    results.append(self.broker.send(msg))
                except Exception as exc:  # noqa: BLE001
                    results.append(exc)
        for (msg, call, i, delayed), r in zip(batch, results, strict=True):
            if isinstance(r, Exception):
                call.entries[i] = self._error_entry(r)
                continue
            call.stored += 1
            call.woken.add(msg.topic)
            self.sends.remember(msg.topic, r.msg_id, r.queue_offset)
            log.debug(
                "stored topic=%s id=%s queue=%d offset=%d",
                msg.topic,
                r.msg_id,
                r.queue_id,
                r.queue_offset,
            )
            st = status(C.OK)
            if r.status is SendStatus.FLUSH_DISK_TIMEOUT:
                # Stored, not yet on disk (sync flush): RocketMQ's proxy
                # answers MASTER_PERSISTENCE_TIMEOUT with the ids.
                st = status(
                    C.MASTER_PERSISTENCE_TIMEOUT,
                    "stored, but not flushed to disk within the sync flush timeout",
                )
            call.entries[i] = spb.SendResultEntry(
                status=st,
                message_id=r.msg_id,
                offset=r.queue_offset,
                recall_handle=r.msg_id if delayed else "",
            )
        self.sends.share(self.threads.writer)

    @staticmethod
    def _error_entry(exc: Exception) -> spb.SendResultEntry:
        code = error_code(exc)
        if code == C.INTERNAL_ERROR:
            log.error("send failed", exc_info=exc)
        return spb.SendResultEntry(status=status(code, str(exc)))

    def _send_apart(
        self, m: pb.Message, cid: str, blocking: bool = True, room: int | None = None
    ) -> tuple[spb.SendResultEntry, str, int] | Message:
        """A half (stored now) or a retry (answered with the first result) as
        (entry, "half" | "retry", its body's size decompressed); any other
        message, checked and converted, for the batch. ``room``: the bytes the
        call's budget has left for this body decompressed."""
        if len(m.body) > self.max_body:
            raise MessageTooLargeError(
                f"the message body size {len(m.body)} exceeds "
                f"the maximum {self.max_body}"
            )
        limit = self.store.config.max_properties_size
        if len(m.user_properties) > limit // 3:
            # Each takes 3 bytes at least (name, separators): over the limit
            # whatever they hold, refused before they are read (900,000 of
            # them took 10 s to refuse, every other client waiting).
            raise PropertiesTooLargeError(
                f"{len(m.user_properties)} user properties: more than the "
                f"{limit} bytes of properties can hold"
            )
        msg, mtype = self._to_message(m, room)
        if self.cfg.topic_type_check:
            self._check_type(m, msg.topic)
        group = m.system_properties.message_group
        if group:
            self.store.refresh_topics()
            msg.queue_id = self._queue_for(msg.topic, group)
        if mtype == pb.TRANSACTION:
            msg.msg_id = None  # the transaction id names the half
            self.transactions.ensure_checker(msg.topic)
            half = self.tx.send_half(msg.topic, msg)
            self.transactions.remember_sender(half.transaction_id, cid)
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=half.msg_id,
                    transaction_id=half.transaction_id,
                    offset=half.queue_offset,
                ),
                "half",
                len(msg.body),
            )
        earlier = self.sends.find(msg.topic, msg.msg_id, blocking)
        if earlier is not None:
            # A retry of a send already stored: the first result, nothing
            # stored again (once it passes the same checks).
            self.broker.validate(msg)
            log.debug(
                "retry answered topic=%s id=%s offset=%d",
                msg.topic,
                msg.msg_id,
                earlier,
            )
            delayed = bool(msg.properties and "TIMER_DELIVER_MS" in msg.properties)
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=msg.msg_id,
                    offset=earlier,
                    recall_handle=msg.msg_id if delayed else "",
                ),
                "retry",
                len(msg.body),
            )
        return msg

    async def RecallMessage(self, request, context):  # noqa: N802
        handle = request.recall_handle
        if not handle:
            return spb.RecallMessageResponse(
                status=status(C.BAD_REQUEST, "recall handle is empty")
            )
        if (refused := self.guard.refusal()) is not None:
            return spb.RecallMessageResponse(status=refused)
        try:
            r = await self.threads.on_writer(self.delays.recall, handle)
        except RecallError as exc:
            return spb.RecallMessageResponse(status=status(C.NOT_FOUND, str(exc)))
        except Exception as exc:  # noqa: BLE001
            return spb.RecallMessageResponse(status=status(error_code(exc), str(exc)))
        # SYNC_MASTER: the recall is answered once the in-sync slaves have it
        # (a promoted slave without it delivered the recalled message).
        if (why := await self.guard.unreplicated()) is not None:
            return spb.RecallMessageResponse(
                status=status(C.SLAVE_PERSISTENCE_TIMEOUT, why)
            )
        return spb.RecallMessageResponse(status=status(C.OK), message_id=r.msg_id)
