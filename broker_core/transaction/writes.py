"""State changes besides end-transaction: resume, check records, discards.

``StateWrites`` writes through the ledger; ``TransactionService`` holds one.

Each is decided and written inside ``exclusive_appends`` like an outcome (see
``ledger.py``), so it applies only to a half still in the expected state.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from broker_core.errors import (
    TopicExistsError,
    TransactionConflictError,
    ValidationError,
)
from broker_core.message import PROPERTY_REAL_TOPIC, MessageExt
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S
from broker_core.transaction.ledger import event
from broker_core.transaction.types import CheckAnswer, TransactionState
from broker_core.validation import TRANS_CHECK_MAX_TIME_TOPIC

if TYPE_CHECKING:
    from broker_core.store import MessageStore
    from broker_core.transaction.ledger import Ledger
    from broker_core.transaction.types import TransactionConfig

_FINAL = {S.COMMITTED: "COMMITTED", S.ROLLED_BACK: "ROLLED_BACK"}


class StateWrites:
    """Resume, check records and discards, each decided under the append lock."""

    def __init__(
        self, store: MessageStore, ledger: Ledger, config: TransactionConfig
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.config = config

    def resume(self, half: MessageExt, operator: str) -> TransactionState:
        """Resume a discarded half: its check count is reset and it is checked again.

        Returns the new state (PENDING; also for a half that was already pending).
        Raises ``TransactionConflictError`` for a committed or rolled-back half.
        """
        operator = R.clean_value(operator, 128) if operator else ""
        if not operator:
            raise ValidationError("resume needs the operator's name")
        qoff = half.queue_offset
        with self.store.exclusive_appends():
            self.ledger.catch_up()
            state = self.ledger.table.get(qoff)[0]
            if state in (S.COMMITTED, S.ROLLED_BACK):
                raise TransactionConflictError(
                    f"transaction {half.offset_msg_id} is already {_FINAL[state]}"
                )
            if state == S.DISCARDED:
                op = R.op_inner(
                    R.TAG_RESUME,
                    half.commit_log_offset,
                    qoff,
                    half.properties.get(PROPERTY_REAL_TOPIC, ""),
                    {R.PROPERTY_SOURCE: "OPERATOR", R.PROPERTY_OPERATOR: operator},
                )
                self.ledger.append(
                    [op], [event(R.RESUME, op, half.commit_log_offset, qoff)]
                )
        return TransactionState.PENDING

    def record_check(
        self,
        half: MessageExt,
        answer: CheckAnswer,
        transport: str,
        target: str,
        started_ms: int,
        latency_us: int,
        detail: str | None,
        failure: str | None = None,
    ) -> int:
        """Write one check's record; return the half's check count after it.

        ``failure`` says why a FAILED check got no answer (``failure_kind``).
        A check delivered to a producer (answered or not) adds one to the
        count of a pending half; one that reached nobody (``failure``
        ``no_producer``: no producer of the group online, no checker) is
        recorded with the count unchanged, so a producer that is offline for
        a while does not lose its checks (``check_max``) meanwhile."""
        qoff = half.queue_offset
        delivered = failure != R.FAILURE_NO_PRODUCER
        with self.store.exclusive_appends():
            self.ledger.catch_up()
            state, checks = self.ledger.table.get(qoff)[:2]
            n = checks + 1 if state == S.PENDING and delivered else checks
            op = R.op_inner(
                R.TAG_CHECK,
                half.commit_log_offset,
                qoff,
                half.properties.get(PROPERTY_REAL_TOPIC, ""),
                {
                    R.PROPERTY_TRANSACTION_CHECK_TIMES: str(n),
                    R.PROPERTY_CHECK_AT: str(started_ms),
                    R.PROPERTY_CHECK_TRANSPORT: transport,
                    R.PROPERTY_CHECK_TARGET: target,
                    R.PROPERTY_CHECK_ANSWER: answer.value,
                    R.PROPERTY_CHECK_LATENCY_US: str(latency_us),
                    R.PROPERTY_DETAIL: detail,
                    R.PROPERTY_CHECK_FAILURE: failure,
                    R.PROPERTY_CHECK_DELIVERED: None if delivered else "false",
                },
            )
            self.ledger.append([op], [event(R.CHECK, op, half.commit_log_offset, qoff)])
        return n

    def record_answer(
        self, half: MessageExt, answer: str, target: str, latency_us: int | None
    ) -> None:
        """Write the answer a checker gave after its check was sent (an
        asynchronous checker: COMMIT, ROLLBACK or UNKNOWN), with its latency."""
        qoff = half.queue_offset
        props: dict[str, str | None] = {
            R.PROPERTY_CHECK_ANSWER: answer,
            R.PROPERTY_CHECK_TARGET: R.clean_value(target or "-"),
            R.PROPERTY_CHECK_AT: str(int(time.time() * 1000)),
        }
        if latency_us is not None:
            props[R.PROPERTY_CHECK_LATENCY_US] = str(latency_us)
        with self.store.exclusive_appends():
            self.ledger.catch_up()
            op = R.op_inner(
                R.TAG_ANSWER,
                half.commit_log_offset,
                qoff,
                half.properties.get(PROPERTY_REAL_TOPIC, ""),
                props,
            )
            self.ledger.append(
                [op], [event(R.ANSWER, op, half.commit_log_offset, qoff)]
            )

    def discard(self, half: MessageExt, reason: str, max_checks: int | None) -> str:
        """Discard (or, if configured and over the maximum, roll back) a pending half.

        ``max_checks`` None skips the count test (file retention). Returns
        "discarded", "rolled_back" or "" when the half was no longer eligible.
        """
        qoff = half.queue_offset
        topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
        with self.store.exclusive_appends():
            self.ledger.catch_up()
            state, checks = self.ledger.table.get(qoff)[:2]
            if state != S.PENDING or (max_checks is not None and checks < max_checks):
                return ""
            if max_checks is not None and self.config.rollback_on_max_checks:
                op = R.op_inner(
                    R.TAG_OUTCOME,
                    half.commit_log_offset,
                    qoff,
                    topic,
                    {
                        R.PROPERTY_OUTCOME: "ROLLBACK",
                        R.PROPERTY_SOURCE: "CHECK",
                        R.PROPERTY_DETAIL: reason,
                    },
                )
                self.ledger.append(
                    [op], [event(R.OUTCOME, op, half.commit_log_offset, qoff)]
                )
                return "rolled_back"
            if self.store.topic_config(TRANS_CHECK_MAX_TIME_TOPIC) is None:
                # RocketMQ creates it on demand with one queue (TCMT_QUEUE_NUMS).
                try:
                    self.store.create_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
                except TopicExistsError:
                    pass
            copy = R.discard_copy(half, checks)
            op = R.op_inner(
                R.TAG_DISCARD,
                half.commit_log_offset,
                qoff,
                topic,
                {R.PROPERTY_SOURCE: "CHECK", R.PROPERTY_DETAIL: reason},
            )
            self.ledger.append(
                [copy, op], [None, event(R.DISCARD, op, half.commit_log_offset, qoff)]
            )
        return "discarded"
