"""Read side of the transaction service for the console: list, detail, metrics.

``HalfQueries`` reads the pending-transaction index (``index.py``) and the
store; ``TransactionService`` holds one and exposes its methods."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from broker_core.errors import MessageNotFoundError, UnknownTransactionError
from broker_core.record import offset_msg_id
from broker_core.transaction import statetable as S
from broker_core.transaction.fold import LATENCY_BUCKETS
from broker_core.transaction.types import (
    HalfDetail,
    HalfInfo,
    HalfPage,
    HistoryEvent,
    ResolutionSource,
    TransactionMetrics,
    TransactionState,
)

if TYPE_CHECKING:
    from broker_core.message import MessageExt
    from broker_core.store import MessageStore
    from broker_core.transaction.index import PendingIndex

_STATE_CODES = {
    TransactionState.PENDING: S.PENDING,
    TransactionState.COMMITTED: S.COMMITTED,
    TransactionState.ROLLED_BACK: S.ROLLED_BACK,
    TransactionState.DISCARDED: S.DISCARDED,
}
_CODE_STATES = {v: k for k, v in _STATE_CODES.items()}


class HalfQueries:
    """Queries over the pending-transaction index."""

    def __init__(self, store: MessageStore, index: PendingIndex) -> None:
        self.store = store
        self.index = index
        #: offset -> the record's own offset id (records never change)
        self._ids: dict[int, str] = {}

    def record_id(self, offset: int) -> str:
        """The offset id of the record at ``offset`` as its bytes say: the
        store host it was written with. A half replicated to a slave that was
        then promoted keeps the id clients and operators saw on the old
        master; this store's own host is only the fallback for a record that
        cannot be read."""
        oid = self._ids.get(offset)
        if oid is None:
            try:
                oid = self.store.read_message(offset).offset_msg_id
            except Exception:  # noqa: BLE001 - damaged or gone: this store's
                ip, port = self.store.store_ip, self.store.store_port
                return offset_msg_id(ip, port, offset)
            if len(self._ids) >= 100_000:
                self._ids.clear()
            self._ids[offset] = oid
        return oid

    def refresh_index(self, time_budget_s: float | None = None) -> int:
        """Fold new log records into the index; return how many were read."""
        deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
        return self.index.catch_up(deadline=deadline)

    def _info(self, row: tuple[Any, ...]) -> HalfInfo:
        (
            half_off,
            qoff,
            msg_id,
            group,
            topic,
            qid,
            tags,
            keys,
            born,
            checks,
            last_check,
            due,
            state,
            outcome_at,
            source,
            operator,
            commit_off,
            reason,
        ) = row
        return HalfInfo(
            transaction_id=self.record_id(half_off),
            msg_id=msg_id,
            half_offset=half_off,
            queue_offset=qoff,
            producer_group=group,
            topic=topic,
            queue_id=qid,
            tags=tags,
            keys=keys,
            born_timestamp=born,
            check_count=checks,
            last_check_at=last_check,
            next_check_at=due,
            state=_CODE_STATES[state],
            outcome_at=outcome_at,
            outcome_source=ResolutionSource[source] if source else None,
            operator=operator,
            commit_offset_msg_id=None
            if commit_off is None
            else self.record_id(commit_off),
            discard_reason=reason,
        )

    def list_halves(
        self,
        *,
        state: TransactionState
        | str
        | list[TransactionState | str]
        | None = TransactionState.PENDING,
        producer_group: str | None = None,
        topic: str | None = None,
        key: str | None = None,
        min_age_s: float | None = None,
        min_checks: int | None = None,
        sort: str = "born",
        page: int = 1,
        page_size: int = 50,
        count_total: bool = True,
        total_limit: int = 100_000,
        refresh: bool = True,
    ) -> HalfPage:
        """Return one page of halves from the pending-transaction index.

        ``state``: one state, a list, or None for all (default PENDING).
        ``key``: one token of the message's KEYS. ``min_age_s``: born at least that
        long ago. ``sort``: born, checks, last_check, next_check, each optionally
        prefixed with "-" for descending. ``refresh`` folds new log records first
        (bounded to 2 s). ``total`` counts at most ``total_limit`` matches
        (``total_capped`` then), except for a state-only filter (exact, from the
        per-topic gauges). Raises ``ValueError`` for a bad sort, state or page.
        """
        if page < 1 or not 1 <= page_size <= 1000:
            raise ValueError("page must be >= 1 and page_size within 1..1000")
        if refresh:
            self.refresh_index(2.0)
        states = None
        if state is not None:
            items = state if isinstance(state, list) else [state]
            states = [_STATE_CODES[TransactionState.coerce(s)] for s in items]
        born_before = None
        if min_age_s is not None:
            born_before = int(time.time() * 1000 - min_age_s * 1000)
        rows, total, capped = self.index.list_halves(
            states,
            producer_group,
            topic,
            key,
            born_before,
            min_checks,
            sort,
            page_size,
            (page - 1) * page_size,
            count_total,
            total_limit,
        )
        return HalfPage([self._info(r) for r in rows], page, page_size, total, capped)

    def get_half(self, half: MessageExt, transaction_id: str) -> HalfDetail:
        """Return ``half`` (named ``transaction_id``) with its properties, body
        and full history.

        Raises ``UnknownTransactionError`` if the index has not reached it.
        """
        self.refresh_index(5.0)
        row = self.index.get_row(half.commit_log_offset)
        if row is None:
            raise UnknownTransactionError(
                f"transaction {transaction_id!r} is not indexed yet"
            )
        history = [
            HistoryEvent(
                at=at,
                kind=kind,
                source=src,
                operator=op,
                transport=tr,
                target=tg,
                answer=ans,
                latency_ms=lat,
                check_no=no,
                detail=det,
                log_offset=lo,
            )
            for at, kind, src, op, tr, tg, ans, lat, no, det, lo in self.index.events(
                half.commit_log_offset
            )
        ]
        try:
            body = half.body
        except MessageNotFoundError:  # pragma: no cover - retention
            body = b""
        return HalfDetail(self._info(row), dict(half.properties), body, history)

    def counts_by_group(
        self, refresh: bool = True
    ) -> dict[str, dict[TransactionState, int]]:
        """Return the number of halves in each state per producer group (gauges,
        no scan)."""
        if refresh:
            self.refresh_index(2.0)
        out: dict[str, dict[TransactionState, int]] = {}
        for group, state, n in self.index.group_counts():
            out.setdefault(group, {})[_CODE_STATES[state]] = n
        return out

    def metrics(self, refresh: bool = True) -> TransactionMetrics:
        """Return pending halves per topic and the outcome and check counters."""
        if refresh:
            self.refresh_index(2.0)
        by_topic: dict[str, int] = {}
        pending = discarded = 0
        for topic, state, n in self.index.topic_counts():
            if state == S.PENDING:
                by_topic[topic] = n
                pending += n
            elif state == S.DISCARDED:
                discarded += n
        c = self.index.counters()
        return TransactionMetrics(
            pending_by_topic=by_topic,
            pending=pending,
            discarded=discarded,
            commits=c.get("commits", 0),
            rollbacks=c.get("rollbacks", 0),
            discards=c.get("discards", 0),
            resumes=c.get("resumes", 0),
            checks_sent=c.get("checks_sent", 0),
            checks_answered=c.get("checks_answered", 0),
            checks_failed=c.get("checks_failed", 0),
            checks_commit=c.get("checks_answered_commit", 0),
            checks_rollback=c.get("checks_answered_rollback", 0),
            checks_unknown=c.get("checks_answered_unknown", 0),
            checks_no_producer=c.get("checks_failed_no_producer", 0),
            checks_timeout=c.get("checks_failed_timeout", 0),
            checks_error=c.get("checks_failed_error", 0),
            half_to_outcome_ms={
                b: c.get(f"latency_le_{b}", 0) for b in LATENCY_BUCKETS
            },
            half_to_outcome_count=c.get("latency_count", 0),
            half_to_outcome_sum_ms=c.get("latency_sum_ms", 0),
        )
