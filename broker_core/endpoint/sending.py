"""SendMessage and RecallMessage: messages into the store."""

from __future__ import annotations

import logging
import zlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.broker import Broker
from broker_core.endpoint.pop import (
    SHARDING_KEY,
    now_ms,
)
from broker_core.endpoint.wire import (
    C,
    client_id_of,
    error_code,
    status,
)
from broker_core.errors import (
    InvalidDelayError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    RecallError,
    ValidationError,
)
from broker_core.message import Message, SendStatus
from broker_core.validation import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    validate_message_group,
    validate_properties,
)

if TYPE_CHECKING:
    from broker_core.endpoint.server import Endpoint

log = logging.getLogger("broker_core.endpoint")


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


class Sending:
    """SendMessage and RecallMessage: messages into the store."""

    def __init__(self, ep: Endpoint) -> None:
        self.ep = ep
        #: Recent sends by client message id: a retry gets the first result.
        self.sends = RecentSends(ep.broker, ep.cfg.dedupe_window_ms)

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
        cfg = self.ep.store.topics.topics.get(topic)
        n = cfg.write_queue_nums if cfg else self.ep.store.config.default_queue_nums
        return zlib.crc32(group.encode()) % max(1, n)

    async def SendMessage(self, request, context):  # noqa: N802
        if not request.messages:
            return spb.SendMessageResponse(
                status=status(C.BAD_REQUEST, "no message in the request")
            )
        cid = client_id_of(context)
        sender = self.ep.clients.get(cid) if cid else None
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
                        self.ep.clients_dirty = True
        entries, sent, deduplicated, woken = await self.ep.on_writer(
            self._send_all, request.messages, cid
        )
        self.ep.counters["sent"] += sent
        self.ep.counters["retries_deduplicated"] += deduplicated
        for topic in woken:
            self.ep.wake(topic)
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
        if len(m.body) > self.ep.max_body:
            raise MessageTooLargeError(
                f"the message body size {len(m.body)} exceeds "
                f"the maximum {self.ep.max_body}"
            )
        msg, mtype = self._to_message(m)
        group = m.system_properties.message_group
        if group:
            self.ep.store.refresh_topics()
            msg.queue_id = self._queue_for(msg.topic, group)
        if mtype == pb.TRANSACTION:
            msg.msg_id = None  # the transaction id names the half
            self.ep.transactions.ensure_checker(msg.topic)
            half = self.ep.tx.send_half(msg.topic, msg)
            self.ep.transactions.remember_sender(half.transaction_id, cid)
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=half.msg_id,
                    transaction_id=half.transaction_id,
                    offset=half.queue_offset,
                ),
                "half",
            )
        delayed = msg.properties and "TIMER_DELIVER_MS" in msg.properties
        earlier = self.sends.find(msg.topic, msg.msg_id)
        if earlier is not None:
            # A retry of a send already stored: the first result, nothing
            # stored again (once it passes the same checks).
            self.ep.broker.validate(msg)
            return (
                spb.SendResultEntry(
                    status=status(C.OK),
                    message_id=msg.msg_id,
                    offset=earlier,
                    recall_handle=msg.msg_id if delayed else "",
                ),
                "retry",
            )
        r = self.ep.broker.send(msg)
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

    async def RecallMessage(self, request, context):  # noqa: N802
        handle = request.recall_handle
        if not handle:
            return spb.RecallMessageResponse(
                status=status(C.BAD_REQUEST, "recall handle is empty")
            )
        try:
            r = await self.ep.on_writer(self.ep.delays.recall, handle)
        except RecallError as exc:
            return spb.RecallMessageResponse(status=status(C.NOT_FOUND, str(exc)))
        except Exception as exc:  # noqa: BLE001
            return spb.RecallMessageResponse(status=status(error_code(exc), str(exc)))
        return spb.RecallMessageResponse(status=status(C.OK), message_id=r.msg_id)
