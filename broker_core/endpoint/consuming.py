"""Pop consumption: ReceiveMessage (long polls), acks, invisibility, dead letters."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.endpoint.coalesce import PER_CALL, Coalescer, TickBatch
from broker_core.endpoint.config import REPOLL_S
from broker_core.endpoint.pop import (
    SHARDING_KEY,
    Entry,
    encode_handle,
    now_ms,
)
from broker_core.endpoint.wire import (
    SYSTEM_PROPS,
    C,
    body_md5,
    client_id_of,
    delimited,
    dur_ms,
    error_code,
    fill_ms,
    ok_ack_response,
    overall_status,
    status,
    too_many,
    ts_ms,
)
from broker_core.errors import Busy, InvalidHandle, ValidationError
from broker_core.validation import validate_read_topic

if TYPE_CHECKING:
    from broker_core.endpoint.clients import ClientTable
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.pop import PopManager
    from broker_core.endpoint.threads import Threads
    from broker_core.endpoint.waits import PollWaits
    from broker_core.store import MessageStore

log = logging.getLogger("broker_core.endpoint")
_FILTER_TYPES = frozenset(pb.FilterType.values())
#: client types (as their settings name them) that change invisibility only
#: to retry a failed message
PUSH_TYPES = frozenset({"PUSH_CONSUMER", "LITE_PUSH_CONSUMER"})
#: receives remembered by attempt id (see ``Consuming.attempts``)
MAX_ATTEMPTS_KEPT = 4096


class Consuming:
    """Pop consumption: ReceiveMessage, acks, invisibility, dead letters."""

    def __init__(
        self,
        *,
        cfg: EndpointConfig,
        store: MessageStore,
        pop: PopManager,
        clients: ClientTable,
        threads: Threads,
        waits: PollWaits,
        counters: dict[str, int],
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.pop = pop
        self.clients = clients
        self.threads = threads
        self.waits = waits
        self.counters = counters
        self.acks = Coalescer(threads.consumer.first, self._ack_all_locked)
        self.ack_tick = TickBatch(self._ack_now)
        #: (client id, group, topic, attempt id) -> what that receive popped.
        #: The official clients send an attempt id with each ReceiveMessage
        #: and send the same one again only when the call failed on their
        #: side (deadline, broken stream, an answer they could not read):
        #: what the first call popped never reached them. A retried attempt
        #: releases it first, so it is delivered now instead of staying
        #: invisible (auto-renewed for a push consumer, up to
        #: ``max_renew_ms``). Apache RocketMQ keeps such messages invisible.
        self.attempts: OrderedDict[tuple[str, str, str, str], list[Any]] = OrderedDict()

    # -- consuming -----------------------------------------------------------
    def _to_pb(self, qid: int, e: Any, invisible_ms: int) -> pb.Message:
        # Filled in place: a sub-message given to a constructor is copied
        # (half the cost of a message, measured).
        m = e.msg
        props = m.properties
        body = m.body
        out = pb.Message(body=body)
        out.topic.name = m.topic
        sp = out.system_properties
        sp.message_id = props.get("UNIQ_KEY") or m.offset_msg_id
        digest = sp.body_digest
        digest.type = pb.MD5
        digest.checksum = body_md5(body)
        sp.body_encoding = pb.IDENTITY
        fill_ms(sp.born_timestamp, m.born_timestamp)
        sp.born_host = m.born_host.rsplit(":", 1)[0]
        fill_ms(sp.store_timestamp, m.store_timestamp)
        sp.store_host = m.store_host
        sp.receipt_handle = encode_handle(qid, e.offset, e.nonce, e.visible_at)
        sp.queue_id = qid
        sp.queue_offset = e.offset
        sp.delivery_attempt = e.attempts
        fill_ms(sp.invisible_duration, invisible_ms)
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
                fill_ms(sp.delivery_timestamp, int(props["TIMER_OUT_MS"]))
        elif m.prepared_transaction_offset:
            sp.message_type = pb.TRANSACTION
        else:
            sp.message_type = pb.NORMAL
        user = {k: v for k, v in props.items() if k not in SYSTEM_PROPS}
        if user:
            out.user_properties.update(user)
        return out

    def _encode(self, qid: int, e: Any, invisible_ms: int) -> bytes:
        """A popped message as its stream answer, encoded (on the consumer
        thread): ``ReceiveMessageResponse{message}`` is the message's own
        bytes behind field 2's key and length, so it is serialized once and
        never copied into a response object on the event loop."""
        raw = self._to_pb(qid, e, invisible_ms).SerializeToString()
        return delimited(2 << 3 | 2, raw)  # ReceiveMessageResponse.message

    async def ReceiveMessage(self, request, context):  # noqa: N802
        group = request.group.name
        topic = request.message_queue.topic.name
        if not group:
            yield spb.ReceiveMessageResponse(
                status=status(C.ILLEGAL_CONSUMER_GROUP, "consumer group is empty")
            )
            return
        try:
            validate_read_topic(topic)
        except ValidationError as exc:
            yield spb.ReceiveMessageResponse(
                status=status(int(exc.grpc_code), str(exc))
            )
            return
        if not self.store.has_topic(topic):
            yield spb.ReceiveMessageResponse(
                status=status(C.TOPIC_NOT_FOUND, f"topic {topic!r} not found")
            )
            return
        fe = request.filter_expression
        if fe.type not in _FILTER_TYPES:
            # An unknown filter type was read as TAG.
            yield spb.ReceiveMessageResponse(
                status=status(C.BAD_REQUEST, f"unknown filter type {fe.type}")
            )
            return
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
        attempt = (
            (client_id_of(context), group, topic, request.attempt_id)
            if request.attempt_id
            else None
        )
        if attempt is not None and (lost := self.attempts.pop(attempt, None)):
            log.debug(
                "receive attempt retried group=%s topic=%s attempt=%s released=%s",
                group,
                topic,
                request.attempt_id,
                [(q, e.offset, e.nonce) for q, e in lost],
            )
            # Only the entries still under the handles that call made are
            # released (acknowledged or changed ones are not touched).
            await asyncio.get_running_loop().run_in_executor(
                self.threads.consumer,
                self.threads.pop_locked,
                self.pop.release,
                group,
                topic,
                lost,
            )
        self.waits.join_poll(topic)
        try:
            while True:
                # Wait-list first, then pop: an append between the two still wakes us.
                ev = self.waits.wait_list(topic)
                renew = (client_id_of(context), self.cfg.max_renew_ms)
                popping = asyncio.get_running_loop().run_in_executor(
                    self.threads.consumer,
                    self.threads.pop_locked,
                    self._pop,
                    group,
                    topic,
                    batch,
                    invisible,
                    expr,
                    expr_type,
                    renew if request.auto_renew else None,
                )
                try:
                    got, messages, cut_short = await asyncio.shield(popping)
                except asyncio.CancelledError:
                    # The call ended (client gone, deadline) while popping: what
                    # was popped never reaches it. Visible again at once, not after
                    # its invisible duration.
                    popping.add_done_callback(self._release_later(group, topic))
                    raise
                except Exception as exc:  # noqa: BLE001
                    code = error_code(exc)
                    if code == C.INTERNAL_ERROR:
                        log.exception("receive failed")
                    yield spb.ReceiveMessageResponse(status=status(code, str(exc)))
                    return
                if got:
                    break
                left = deadline - time.monotonic()
                if self.waits.closing:
                    left = 0  # the endpoint stops: answered, not cut off
                if cut_short and left > 0:
                    # The pop ran out of scanning time with more to read: go
                    # on at once, behind the other consumers' pops.
                    continue
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
        finally:
            # Not waiting any more: with nobody else polling the topic, its
            # wait list is dropped (and the append watcher may sleep).
            self.waits.leave_poll(topic)
        self.counters["received"] += len(got)
        if attempt is not None:
            # the handles only, not the messages
            self.attempts[attempt] = [
                (q, Entry(e.offset, None, e.group, e.attempts, e.visible_at, e.nonce))
                for q, e in got
            ]
            if len(self.attempts) > MAX_ATTEMPTS_KEPT:
                self.attempts.popitem(last=False)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "popped group=%s topic=%s client=%s invisible_ms=%d entries=%s",
                group,
                topic,
                client_id_of(context),
                invisible,
                [(q, e.offset, e.nonce, e.attempts) for q, e in got],
            )
        sent = 0
        try:
            yield spb.ReceiveMessageResponse(status=status(C.OK))
            yield spb.ReceiveMessageResponse(delivery_timestamp=ts_ms(now_ms()))
            for message in messages:
                # Counted before the yield: a message handed to the stream has
                # gone to the client even if the call ends while this generator
                # waits at the yield (the Go client cancels its call as soon as
                # it has read the messages); releasing it then made it visible
                # again under the client's hands, and its ChangeInvisibleDuration
                # was overtaken.
                sent += 1
                yield message  # already encoded (``_encode``)
        except (asyncio.CancelledError, GeneratorExit):
            # The stream broke: the messages not yet handed to it are released.
            rest = got[sent:]
            log.debug(
                "receive stream broke group=%s topic=%s sent=%d released=%s",
                group,
                topic,
                sent,
                [(q, e.offset, e.nonce) for q, e in rest],
            )
            if rest:
                self.threads.consumer.submit(
                    self.threads.pop_locked, self.pop.release, group, topic, rest
                )
            raise

    def _pop(
        self,
        group: str,
        topic: str,
        batch: int,
        invisible: int,
        expr: str,
        expr_type: str,
        renew: tuple[str, int] | None,
    ) -> tuple[list[tuple[int, Any]], list[bytes], bool]:
        """Pop a batch and encode it (on the consumer thread, where the pop
        state lives): the entries, their stream answers (``_encode``: each an
        encoded ``ReceiveMessageResponse`` with its message and receipt
        handle), and whether the pop stopped scanning before the end
        (``cut_short``)."""
        got = self.pop.pop(group, topic, batch, invisible, expr, expr_type)
        if got and renew is not None:
            self.pop.renewals.add(group, topic, got, renew[0], invisible, renew[1])
        messages = [self._encode(qid, e, invisible) for qid, e in got]
        # Read on the pop thread right after the pop: no other pop in between.
        return got, messages, self.pop.cut_short

    def _release_later(self, group: str, topic: str) -> Any:
        def done(fut: Any) -> None:
            if fut.cancelled() or fut.exception() is not None:
                return
            got = fut.result()[0]
            log.debug(
                "receive ended while popping group=%s topic=%s released=%s",
                group,
                topic,
                [(q, e.offset, e.nonce) for q, e in got],
            )
            if got:
                self.threads.consumer.submit(
                    self.threads.pop_locked, self.pop.release, group, topic, got
                )

        return done

    @staticmethod
    def _ack_refusal(request: Any) -> spb.AckMessageResponse | None:
        if not request.entries:
            return spb.AckMessageResponse(status=status(C.BAD_REQUEST, "no entry"))
        if (refused := too_many(len(request.entries), "entries")) is not None:
            return spb.AckMessageResponse(status=refused)
        return None

    @staticmethod
    def _ack_call(request: Any) -> tuple[str, str, list[str]]:
        handles = [e.receipt_handle for e in request.entries]
        return (request.group.name, request.topic.name, handles)

    async def AckMessage(self, request, context):  # noqa: N802
        if (refused := self._ack_refusal(request)) is not None:
            return refused
        call = self._ack_call(request)
        # An ack is one short transaction: done here when the pop state is
        # free in this process and no other process holds its lock, else with
        # the acks arriving meanwhile in one job on the consumer thread (never
        # waiting here for a pop in progress).
        # The acks of one loop iteration go together: one transaction.
        try:
            errors = await self.ack_tick.submit(call)
        except Busy:
            errors = await self.acks.submit(call)
        return self._ack_answer(request, errors)

    def ack_many(self, calls: list[tuple[Any, Any]]) -> list[Any]:
        """AckMessage for many calls at once, on the event loop and without
        waiting (the calls of one drain of the native front): one
        transaction for all. Per call its response, or ``PER_CALL`` for
        ``AckMessage`` to answer it (the pop state is in use)."""
        out: list[Any] = [PER_CALL] * len(calls)
        todo: list[int] = []
        acks: list[tuple[str, str, list[str]]] = []
        for i, (request, _context) in enumerate(calls):
            if (refused := self._ack_refusal(request)) is not None:
                out[i] = refused
                continue
            todo.append(i)
            acks.append(self._ack_call(request))
        # Busy: nothing acknowledged, each call goes the way AckMessage goes.
        return self.ack_tick.run_in_place(
            out, todo, acks, self._ack_now, Busy,
            lambda i, errs: self._ack_answer_encoded(calls[i][0], errs),
        )  # fmt: skip

    def _ack_answer_encoded(self, request: Any, errors: list[str | None]) -> Any:
        """``_ack_answer``, encoded by hand when every entry is acknowledged
        (the usual answer)."""
        if any(err is not None for err in errors):
            return self._ack_answer(request, errors)
        entries = request.entries
        self.counters["acked"] += len(entries)
        return ok_ack_response([(e.message_id, e.receipt_handle) for e in entries])

    def _ack_answer(
        self, request: Any, errors: list[str | None]
    ) -> spb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        out = []
        ok = status(C.OK)
        for e, err in zip(request.entries, errors, strict=True):
            if err is None:
                st = ok
                self.counters["acked"] += 1
            else:
                log.debug(
                    "ack refused group=%s topic=%s handle=%s: %s",
                    group,
                    topic,
                    e.receipt_handle,
                    err,
                )
                st = status(C.INVALID_RECEIPT_HANDLE, err)
            out.append(
                spb.AckMessageResultEntry(
                    message_id=e.message_id, receipt_handle=e.receipt_handle, status=st
                )
            )
        return spb.AckMessageResponse(
            status=overall_status([x.status for x in out]), entries=out
        )

    def _ack_now(
        self, calls: list[tuple[str, str, list[str]]]
    ) -> list[list[str | None]]:
        """``ack_all`` on the event loop: ``Busy`` when the pop state is held
        (a pop in progress here, a transaction in another process), for the
        consumer thread to do it."""
        if not self.threads.pop_lock.acquire(blocking=False):
            raise Busy("the pop state is in use")
        try:
            return self.pop.ack_all(calls, wait=False)
        except sqlite3.DatabaseError as exc:
            # damaged: set aside and started again; the handles are stale
            if not self.pop.recover(exc):
                raise
            raise Busy("the pop state was started again") from exc
        finally:
            self.threads.pop_lock.release()

    def _ack_all_locked(
        self, calls: list[tuple[str, str, list[str]]]
    ) -> list[list[str | None]]:
        """The acks of many AckMessage calls in one transaction (on the
        consumer thread): per call, per handle, None or why it was refused."""
        return self.threads.pop_locked(self.pop.ack_all, calls)

    async def ChangeInvisibleDuration(self, request, context):  # noqa: N802
        ms = dur_ms(request.invisible_duration)
        if ms < 0 or ms > 12 * 3600 * 1000:
            return spb.ChangeInvisibleDurationResponse(
                status=status(C.ILLEGAL_INVISIBLE_TIME),
                receipt_handle=request.receipt_handle,
            )
        # A push consumer changes invisibility only to retry a message it
        # failed: at least the group's backoff for that attempt (the settings
        # it was sent). The Node.js client ignores a customized backoff and
        # asks for 0, which redelivered at once, in a loop, where Apache waits
        # (~20 s: its revive) and our other clients wait the backoff.
        cid = client_id_of(context)
        pusher = self.clients.get(cid) if cid else None
        backoff = (
            self.cfg.consumer_backoff_ms
            if pusher is not None and pusher.client_type in PUSH_TYPES
            else None
        )
        try:
            h = await self.threads.on_consumer_first(
                self.pop.change_invisible,
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                ms,
                backoff,
            )
        except InvalidHandle as exc:
            log.debug(
                "change invisible refused group=%s handle=%s: %s",
                request.group.name,
                request.receipt_handle,
                exc,
            )
            return spb.ChangeInvisibleDurationResponse(
                status=status(C.INVALID_RECEIPT_HANDLE, str(exc)),
                receipt_handle=request.receipt_handle,
            )
        log.debug(
            "invisible changed group=%s handle=%s -> %s (%d ms)",
            request.group.name,
            request.receipt_handle,
            h,
            ms,
        )
        return spb.ChangeInvisibleDurationResponse(
            status=status(C.OK), receipt_handle=h
        )

    async def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: N802
        try:
            await self.threads.on_consumer_first(
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
