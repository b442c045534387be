"""``TransactionService``: half messages, end-transaction, resume, and the check.

Layered over the store facade: every write goes through
``MessageStore.put_inner`` inside ``exclusive_appends`` (see ``ledger.py``), so
each half gets exactly one outcome across threads, processes and restarts.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

from broker_core.broker import Broker
from broker_core.errors import (
    IllegalTransactionOperationError,
    InvalidQueueError,
    MessageNotFoundError,
    TopicNotFoundError,
    TransactionConflictError,
    UnknownTransactionError,
    ValidationError,
    WrongProducerGroupError,
)
from broker_core.message import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageInner,
)
from broker_core.msgid import UniqKeyGenerator
from broker_core.record import decode_offset_msg_id, offset_msg_id
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S
from broker_core.transaction.checker import CheckRunner
from broker_core.transaction.index import PendingIndex
from broker_core.transaction.ledger import SOURCE_NAMES, Ledger, event
from broker_core.transaction.queries import HalfQueries
from broker_core.transaction.transports import CheckerRegistry
from broker_core.transaction.types import (
    CheckRunResult,
    EndTransactionRequest,
    EndTransactionResult,
    EndTransactionStatus,
    HalfDetail,
    ResolutionSource,
    TransactionConfig,
    TransactionResolution,
    TransactionSendResult,
    TransactionState,
)
from broker_core.transaction.writes import StateWrites
from broker_core.validation import (
    TRANS_HALF_TOPIC,
    validate_body,
    validate_group,
    validate_properties_size,
    validate_send_topic,
)

_RECENT_MAX = 4096

STATE_NAMES = {
    S.PENDING: TransactionState.PENDING,
    S.COMMITTED: TransactionState.COMMITTED,
    S.ROLLED_BACK: TransactionState.ROLLED_BACK,
    S.DISCARDED: TransactionState.DISCARDED,
}


log = logging.getLogger(__name__)


class TransactionService:
    """Transactional messages over an open ``Broker``; one per process and store.

    ``TransactionService(broker, config=None, **settings)``: ``settings`` are
    ``TransactionConfig`` fields. ``checkers`` chooses check-back transports.
    """

    def __init__(
        self, broker: Broker, config: TransactionConfig | None = None, **settings: Any
    ) -> None:
        if config is None:
            config = TransactionConfig(**settings)
        elif settings:
            raise ValueError("pass either config or settings, not both")
        self.broker = broker
        self.store = broker.store
        self.config = config
        self.ledger = Ledger(self.store)
        self.index = PendingIndex(
            self.store, config.transaction_timeout_ms, config.check_interval_ms
        )
        self.checkers = CheckerRegistry(
            self.store.root / "transaction" / "checkers.json"
        )
        # Collaborators: the read side over the index (queries.py) and the
        # state writes besides outcomes (writes.py). Their methods are this
        # service's API; those that name a half by id are defined below.
        self.queries = HalfQueries(self.store, self.index)
        self.writes = StateWrites(self.store, self.ledger, config)
        self.refresh_index = self.queries.refresh_index
        self.list_halves = self.queries.list_halves
        self.counts_by_group = self.queries.counts_by_group
        self.metrics = self.queries.metrics
        self.record_check = self.writes.record_check
        self.record_answer = self.writes.record_answer
        self.discard = self.writes.discard
        self._rr: dict[str, itertools.count[int]] = {}
        self._ids = UniqKeyGenerator()
        #: Halves sent by this process and not yet ended (bounded): their content.
        self._recent: dict[str, R.HalfView] = {}
        self._ip, self._port = self.store.store_ip, self.store.store_port
        info = self.store.recovery_info
        with self.store.exclusive_appends():
            if (
                info is not None
                and info.truncated
                and info.log_end < self.ledger.table.applied_pos
            ):
                self.ledger.table.reset()
            why = self.ledger.table.rebuild_reason()
            if why is not None:
                # Derived from the log: folded again (a flipped entry read as
                # an unknown state and failed every call on the half).
                log.error("%s: folding the transaction state again", why)
                self.ledger.table.reset()
        # A long backlog is folded in slices so that appends are not held up.
        done = False
        while not done:
            with self.store.exclusive_appends():
                done = self.ledger.catch_up(max_records=20_000)
        if (
            info is not None
            and info.truncated
            and info.log_end < self.index.applied_pos
        ):
            self.index.rebuild()
        self.runner = CheckRunner(self)

    def close(self) -> None:
        """Stop the check threads (waiting for calls in flight) and close the index."""
        self.runner.close()
        self.index.close()
        self.ledger.table.close()

    def __enter__(self) -> TransactionService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending -------------------------------------------------------------
    def send_half(self, producer_group: str, message: Message) -> TransactionSendResult:
        """Store ``message`` as a half, invisible to consumers until committed.

        Raises ``InvalidGroupError``, ``InvalidTopicError``, ``TopicNotAllowedError``,
        ``InvalidMessageError``, ``MessageTooLargeError``, ``InvalidQueueError``,
        ``TopicNotFoundError`` (unknown topic with ``auto_create_topic`` off).
        """
        return self.send_halves(producer_group, (message,))[0]

    def send_halves(
        self, producer_group: str, messages: Sequence[Message]
    ) -> list[TransactionSendResult]:
        """Store several halves of one producer group in one append.

        Each half is exactly what ``send_half`` stores; the batch takes the append
        lock and writes the log once, which is what a server grouping concurrent
        requests, or a producer with many transactions open, wants. All or
        nothing: an invalid message raises (as ``send_half``) before anything
        is written.
        """
        validate_group(producer_group)
        now = int(time.time() * 1000)
        inners = [self._half_inner(producer_group, m, now) for m in messages]
        if not inners:
            return []
        with self.store.exclusive_appends():
            results = self.ledger.append(inners, [event(R.HALF, i) for i in inners])
        recent = self._recent
        out = []
        for inner, res in zip(inners, results, strict=True):
            oid = res.offset_msg_id
            props = inner.properties
            uniq = props[PROPERTY_UNIQ_KEY]
            recent[oid] = R.HalfView(
                TRANS_HALF_TOPIC,
                props,
                inner.body,
                inner.flag,
                inner.sysflag,
                now,
                inner.born_host,
                0,
                res.commit_log_offset,
                res.queue_offset,
                uniq,
                oid,
            )
            out.append(
                TransactionSendResult(
                    uniq,
                    oid,
                    int(props[PROPERTY_REAL_QID]),
                    res.queue_offset,
                    res.status,
                    props[PROPERTY_REAL_TOPIC],
                    res.commit_log_offset,
                    transaction_id=oid,
                )
            )
        while len(recent) > _RECENT_MAX:
            del recent[next(iter(recent))]
        return out

    def _half_inner(
        self, producer_group: str, message: Message, now: int
    ) -> MessageInner:
        """Validate ``message`` and build its half record (outside the lock)."""
        topic = message.topic
        validate_send_topic(topic)
        cfg_store = self.store.config
        validate_body(message.body, cfg_store.max_message_size)
        tcfg = self.store.topic_config(topic)
        if tcfg is None and not cfg_store.auto_create_topic:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        if tcfg is not None:
            tcfg.check_writable()
        nq = tcfg.write_queue_nums if tcfg else cfg_store.default_queue_nums
        if message.queue_id is None:
            counter = self._rr.get(topic)
            if counter is None:
                counter = self._rr[topic] = itertools.count()
            qid = next(counter) % max(nq, 1)
        else:
            qid = message.queue_id
            limit = tcfg.queue_nums if tcfg else cfg_store.default_queue_nums
            if not 0 <= qid < limit:
                raise InvalidQueueError(f"queue id {qid} is out of range for {topic!r}")
        props = {
            k: str(v) for k, v in (message.properties or {}).items() if v is not None
        }
        if message.tags:
            props[PROPERTY_TAGS] = message.tags
        keys = message.keys_string()
        if keys:
            props[PROPERTY_KEYS] = keys
        inner = R.half_inner(
            topic,
            qid,
            bytes(message.body),
            props,
            producer_group,
            self._ids.next(now),
            message.flag,
            now,
        )
        props = inner.properties
        # UTF-8 takes at most 4 bytes a character: encode only when it could matter.
        if 4 * (
            sum(map(len, props)) + sum(map(len, props.values())) + 2 * len(props)
        ) > (cfg_store.max_properties_size):
            validate_properties_size(
                "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode(),
                cfg_store.max_properties_size,
            )
        return inner

    # -- looking up ----------------------------------------------------------
    def get_half(self, transaction_id: str) -> HalfDetail:
        """Return a half with its properties, body and full history.

        Raises ``UnknownTransactionError``.
        """
        return self.queries.get_half(self.locate(transaction_id), transaction_id)

    def resume(self, transaction_id: str, operator: str) -> TransactionState:
        """Resume a discarded half: its check count is reset and it is checked again.

        Returns the new state (PENDING; also for a half that was already pending).
        Raises ``UnknownTransactionError``, ``TransactionConflictError`` for a
        committed or rolled-back half.
        """
        return self.writes.resume(self.locate(transaction_id), operator)

    def locate(self, transaction_id: str) -> MessageExt:
        """Return the half named by ``transaction_id`` (its offset id or its UNIQ_KEY).

        Raises ``UnknownTransactionError``.
        """
        if not isinstance(transaction_id, str) or not transaction_id:
            raise UnknownTransactionError("empty transaction id")
        decoded = decode_offset_msg_id(transaction_id)
        if decoded is not None:
            try:
                msg = self.store.read_message(decoded[1])
            except MessageNotFoundError:
                msg = None
            wanted = transaction_id.upper()
            if (
                msg is not None
                and _is_half(msg)
                and wanted
                # The record's own id (the host it was written with, also
                # after a failover), or this store's host at that offset.
                in (msg.offset_msg_id, offset_msg_id(self._ip, self._port, decoded[1]))
            ):
                return msg
        try:
            msg = self.broker.get_message(transaction_id, topic=TRANS_HALF_TOPIC)
        except (MessageNotFoundError, ValidationError):
            msg = None
        if msg is not None and _is_half(msg):
            return msg
        raise UnknownTransactionError(
            f"no half message with transaction id {transaction_id!r}"
        )

    def state(self, transaction_id: str) -> TransactionState:
        """Return the half's current state, from the authoritative state table."""
        half = self.locate(transaction_id)
        with self.store.exclusive_appends():
            self.ledger.catch_up()
            st = self.ledger.table.get(half.queue_offset)[0]
        return STATE_NAMES[st]

    # -- ending --------------------------------------------------------------
    def record_check_answer(
        self,
        transaction_id: str,
        answer: str,
        target: str = "",
        latency_ms: float | None = None,
    ) -> None:
        """Record what an asynchronous checker answered to a check-back
        (COMMIT, ROLLBACK or UNKNOWN): shown in the half's history, counted in
        the metrics. A COMMIT or ROLLBACK is still applied by
        ``end_transaction``; an UNKNOWN changes nothing but is no longer
        invisible. Raises ``UnknownTransactionError`` or ``ValueError``."""
        answer = str(answer).upper()
        if answer not in ("COMMIT", "ROLLBACK", "UNKNOWN"):
            raise ValueError(f"answer {answer!r} is not COMMIT, ROLLBACK or UNKNOWN")
        half = self.locate(transaction_id)
        latency_us = None if latency_ms is None else int(latency_ms * 1000)
        self.record_answer(half, answer, target, latency_us)

    def end_transaction(
        self,
        transaction_id: str,
        producer_group: str | None,
        resolution: TransactionResolution | str,
        source: ResolutionSource | str = ResolutionSource.CLIENT,
        *,
        operator: str | None = None,
        msg_id: str | None = None,
        queue_offset: int | None = None,
    ) -> EndTransactionResult:
        """Commit, roll back, or (UNKNOWN) leave a half to the check.

        COMMIT writes the message to its real topic and queue and an op record;
        ROLLBACK writes only the op. A repeat of the recorded outcome returns it
        (``ALREADY_RESOLVED``) without writing. ``producer_group`` must be the
        half's (optional for OPERATOR); ``msg_id``/``queue_offset``, when given,
        must match the half (RocketMQ's header checks).

        Raises ``UnknownTransactionError`` (no such half, offsets wrong),
        ``WrongProducerGroupError``, ``TransactionConflictError`` (another outcome
        is recorded, or the half was discarded and the source is not OPERATOR:
        the message names the existing state), ``IllegalTransactionOperationError``
        (a CLIENT outcome after the half's ``CHECK_IMMUNITY_TIME_IN_SECONDS``, 604),
        ``ValueError`` for an unknown resolution or source.
        """
        out = self.end_transactions(
            (
                EndTransactionRequest(
                    transaction_id,
                    producer_group,
                    resolution,
                    source,
                    operator,
                    msg_id,
                    queue_offset,
                ),
            ),
            return_exceptions=True,
        )[0]
        if isinstance(out, Exception):
            raise out
        return out

    @overload
    def end_transactions(
        self,
        requests: Iterable[EndTransactionRequest],
        *,
        return_exceptions: Literal[False] = False,
    ) -> list[EndTransactionResult]: ...

    @overload
    def end_transactions(
        self,
        requests: Iterable[EndTransactionRequest],
        *,
        return_exceptions: Literal[True],
    ) -> list[EndTransactionResult | Exception]: ...

    def end_transactions(
        self,
        requests: Iterable[EndTransactionRequest],
        *,
        return_exceptions: bool = False,
    ) -> list[EndTransactionResult] | list[EndTransactionResult | Exception]:
        """End several transactions under one append lock and one log write.

        Each request is decided exactly as ``end_transaction`` would decide it,
        in order (a later request about the same half sees the earlier one's
        outcome). With ``return_exceptions`` a refused request yields its
        exception in its place and the others go ahead; without it the first
        refusal is raised after every request has been decided and written.
        """
        reqs = list(requests)
        out: list[EndTransactionResult | Exception | None] = [None] * len(reqs)
        checked: list[tuple[int, Any]] = []
        for i, rq in enumerate(reqs):
            try:
                checked.append((i, self._check_end(rq)))
            except Exception as exc:  # returned or raised below
                out[i] = exc
        if checked:
            self._decide_ends(checked, out)
        if not return_exceptions:
            for item in out:
                if isinstance(item, Exception):
                    raise item
        return out  # type: ignore[return-value]

    def _check_end(self, rq: EndTransactionRequest) -> tuple[Any, ...]:
        """The checks that need no lock: arguments, the half, group and ids."""
        res = TransactionResolution.coerce(rq.resolution)
        src = ResolutionSource.coerce(rq.source)
        tid_in = rq.transaction_id
        half: MessageExt | R.HalfView
        half = self._recent.pop(tid_in, None) or self.locate(tid_in)
        props = half.properties
        tid = half.offset_msg_id
        group = rq.producer_group
        if group is not None or src is not ResolutionSource.OPERATOR:
            if props.get(PROPERTY_PRODUCER_GROUP) != group:
                raise WrongProducerGroupError(
                    f"producer group {group!r} does not own transaction {tid} "
                    f"(it belongs to {props.get(PROPERTY_PRODUCER_GROUP)!r})"
                )
        if rq.msg_id is not None and rq.msg_id != half.msg_id:
            raise UnknownTransactionError(
                f"message id {rq.msg_id!r} does not match {tid}"
            )
        if rq.queue_offset is not None and rq.queue_offset != half.queue_offset:
            raise UnknownTransactionError(
                f"transaction state table offset {rq.queue_offset} is wrong for {tid}"
            )
        operator = rq.operator
        if operator is not None:
            operator = R.clean_value(operator, 128)
        if src is ResolutionSource.OPERATOR and not operator:
            raise ValidationError("an OPERATOR resolution needs the operator's name")
        return half, tid, res, src, operator

    def _decide_ends(
        self,
        checked: list[tuple[int, Any]],
        out: list[EndTransactionResult | Exception | None],
    ) -> None:
        """Decide and write under the append lock (see ``ledger.py``)."""
        ledger = self.ledger
        table = ledger.table
        inners: list[MessageInner] = []
        events: list[R.TxEvent | None] = []
        written: list[tuple[int, str, int, str | None]] = []
        in_batch: set[int] = set()
        with self.store.exclusive_appends():
            ledger.catch_up()
            for i, (half, tid, res, src, operator) in checked:
                qoff = half.queue_offset
                if qoff in in_batch:  # decide on what the earlier request wrote
                    ledger.append(inners, events)
                    inners, events = [], []
                    in_batch.clear()
                try:
                    records = self._decide_end(half, tid, res, src, operator)
                except Exception as exc:  # the request's refusal
                    out[i] = exc
                    continue
                if isinstance(records, EndTransactionResult):
                    out[i] = records
                    continue
                inners += records[0]
                events += records[1]
                in_batch.add(qoff)
                written.append((i, tid, qoff, operator))
            if inners:
                ledger.append(inners, events)
            for i, tid, qoff, operator in written:
                st = table.get(qoff)
                out[i] = self._result(
                    tid,
                    EndTransactionStatus.RESOLVED,
                    STATE_NAMES[st[0]],
                    st[2],
                    st[3],
                    st[4],
                    operator,
                )

    def _decide_end(
        self,
        half: MessageExt | R.HalfView,
        tid: str,
        res: TransactionResolution,
        src: ResolutionSource,
        operator: str | None,
    ) -> EndTransactionResult | tuple[list[MessageInner], list[R.TxEvent | None]]:
        """Return the answer that needs no write, or the records to write."""
        qoff = half.queue_offset
        state, _checks, code, commit_off, op_off = self.ledger.table.get(qoff)
        if state == S.NONE:
            raise UnknownTransactionError(f"transaction {tid} is not recorded")
        current = STATE_NAMES[state]
        if current.final:
            same = (current is TransactionState.COMMITTED) == (
                res is TransactionResolution.COMMIT
            )
            if res is TransactionResolution.UNKNOWN or same:
                status = (
                    EndTransactionStatus.UNCHANGED
                    if res is TransactionResolution.UNKNOWN
                    else EndTransactionStatus.ALREADY_RESOLVED
                )
                return self._result(tid, status, current, code, commit_off, op_off)
            raise TransactionConflictError(
                f"transaction {tid} is already {current.value} "
                f"(by {SOURCE_NAMES.get(code, 'unknown source')}); "
                f"{res.value} refused"
            )
        if res is TransactionResolution.UNKNOWN:
            return self._result(
                tid, EndTransactionStatus.UNCHANGED, current, code, -1, -1
            )
        if (
            current is TransactionState.DISCARDED
            and src is not ResolutionSource.OPERATOR
        ):
            raise TransactionConflictError(
                f"transaction {tid} is DISCARDED after too many checks; an operator "
                f"must resume or resolve it ({res.value} from {src.value} refused)"
            )
        props = half.properties
        if src is ResolutionSource.CLIENT:
            raw = props.get(R.PROPERTY_CHECK_IMMUNITY)
            limit = (
                R.end_immunity_ms(raw, self.config.transaction_timeout_ms)
                if raw
                else None
            )
            if limit is not None and int(time.time() * 1000) - half.born_timestamp > (
                limit
            ):
                raise IllegalTransactionOperationError(
                    f"transaction {tid} is older than its check immunity "
                    f"({limit} ms): it is left to the check-back"
                )
        half_off = half.commit_log_offset
        extra = {
            R.PROPERTY_OUTCOME: res.value,
            R.PROPERTY_SOURCE: src.value,
            R.PROPERTY_OPERATOR: operator,
        }
        op = R.op_inner(
            R.TAG_OUTCOME, half_off, qoff, props.get(PROPERTY_REAL_TOPIC, ""), extra
        )
        if res is TransactionResolution.COMMIT:
            msg = R.commit_inner(half)
            return (
                [msg, op],
                [
                    event(R.COMMIT_MSG, msg, half_off, qoff),
                    event(R.OUTCOME, op, half_off, qoff),
                ],
            )
        return [op], [event(R.OUTCOME, op, half_off, qoff)]

    def _result(
        self,
        tid: str,
        status: EndTransactionStatus,
        state: TransactionState,
        code: int,
        commit_off: int,
        op_off: int,
        operator: str | None = None,
    ) -> EndTransactionResult:
        src = SOURCE_NAMES.get(code)
        if operator is None and op_off >= 0 and src == "OPERATOR":
            try:
                operator = self.store.read_message(op_off).properties.get(
                    R.PROPERTY_OPERATOR
                )
            except MessageNotFoundError:
                operator = None
        return EndTransactionResult(
            tid,
            status,
            state,
            ResolutionSource[src] if src else None,
            operator,
            offset_msg_id(self._ip, self._port, commit_off)
            if commit_off >= 0
            else None,
        )

    # -- operator actions ----------------------------------------------------
    def commit(self, transaction_id: str, operator: str) -> EndTransactionResult:
        """Commit a half as an operator (pending or discarded)."""
        return self.end_transaction(
            transaction_id,
            None,
            TransactionResolution.COMMIT,
            ResolutionSource.OPERATOR,
            operator=operator,
        )

    def rollback(self, transaction_id: str, operator: str) -> EndTransactionResult:
        """Roll back a half as an operator (pending or discarded)."""
        return self.end_transaction(
            transaction_id,
            None,
            TransactionResolution.ROLLBACK,
            ResolutionSource.OPERATOR,
            operator=operator,
        )

    # -- check ---------------------------------------------------------------
    def run_check(
        self,
        time_budget_s: float | None = None,
        now_ms: int | None = None,
        wait: bool = True,
        max_checks: int | None = None,
    ) -> CheckRunResult:
        """Check back the pending halves that are due (``CheckRunner.run``)."""
        return self.runner.run(time_budget_s, now_ms, wait, max_checks)


def _is_half(msg: MessageExt) -> bool:
    return (
        msg.topic == TRANS_HALF_TOPIC
        and msg.properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    )


__all__ = ["TransactionService"]
