"""Decisions under the store's append lock: exactly one outcome per half.

Every state change of a half (outcome, check, discard, resume) is decided and
written in one ``MessageStore.exclusive_appends`` section: fold the records the
state table has not seen, read the half's entry, refuse or write the records,
fold them. The lock serialises threads and processes; the records are the
decision, so a crash before the write leaves nothing and a crash after it
leaves the decision, found again by the fold. A commit writes the real message
before its op record in one append: if only the message survives a torn write,
the fold still reads it as the outcome, so a retry cannot commit twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from broker_core.errors import MessageNotFoundError
from broker_core.message import MessageInner, PutResult
from broker_core.store import MessageStore
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S
from broker_core.transaction.statetable import StateTable

log = logging.getLogger(__name__)

SOURCE_CODES = {
    "CLIENT": S.SOURCE_CLIENT,
    "CHECK": S.SOURCE_CHECK,
    "OPERATOR": S.SOURCE_OPERATOR,
}
SOURCE_NAMES = {v: k for k, v in SOURCE_CODES.items()}


class Ledger:
    """Folds transaction records into the ``StateTable`` and appends decisions."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.table = StateTable(store.root)

    # -- folding -------------------------------------------------------------
    def catch_up(self, max_records: int | None = None) -> bool:
        """Fold records up to the log's end, or ``max_records`` of them; return True
        when the table is at the end (call inside ``exclusive_appends``)."""
        store = self.store
        table = self.table
        target = store.max_physical_offset()
        pos = table.applied_pos
        if pos > target:
            log.warning(
                "log ends at %d below the state table (%d): rebuilding", target, pos
            )
            table.reset()
            pos = 0
        if pos >= target:
            return True
        n = 0
        for req in store.iter_dispatch(pos, target):
            ev = R.classify(req)
            if ev is not None:
                try:
                    self.apply(ev)
                except Exception:  # one damaged record must not block the others
                    log.exception("cannot fold transaction record at %d", ev.log_offset)
            n += 1
            if max_records is not None and n >= max_records:
                table.applied_pos = req.next_offset
                return req.next_offset >= target
        table.applied_pos = target
        return True

    def _queue_offset(self, ev: R.TxEvent) -> int:
        if ev.queue_offset >= 0:
            return ev.queue_offset
        try:
            return self.store.read_message(ev.half_offset).queue_offset
        except MessageNotFoundError:
            return -1

    def apply(self, ev: R.TxEvent) -> None:
        """Fold one event: final outcomes are never overwritten."""
        table = self.table
        qoff = ev.queue_offset
        if qoff < 0:
            qoff = self._queue_offset(ev)
            if qoff < 0:
                return
        state, checks, source, commit_off, op_off = table.get(qoff)
        kind = ev.kind
        props = ev.properties
        if kind == R.HALF:
            if state == S.NONE:
                table.set(
                    qoff, S.PENDING, _int(props.get(R.PROPERTY_TRANSACTION_CHECK_TIMES))
                )
        elif kind == R.COMMIT_MSG:
            if state in (S.PENDING, S.DISCARDED):
                # The outcome record (folded next, or before) names who
                # decided; a discarded half's op offset is its discard's, which
                # kept the outcome's source and operator out.
                table.set(qoff, S.COMMITTED, checks, source, ev.log_offset, -1)
            elif state == S.COMMITTED and commit_off < 0:
                table.set(qoff, S.COMMITTED, checks, source, ev.log_offset, op_off)
        elif kind == R.OUTCOME:
            outcome = props.get(R.PROPERTY_OUTCOME)
            src = SOURCE_CODES.get(props.get(R.PROPERTY_SOURCE, ""), S.SOURCE_NONE)
            new = S.COMMITTED if outcome == "COMMIT" else S.ROLLED_BACK
            if state in (S.PENDING, S.DISCARDED):
                table.set(qoff, new, checks, src, commit_off, ev.log_offset)
            elif state == new and op_off < 0:
                table.set(qoff, new, checks, src, commit_off, ev.log_offset)
        elif kind == R.CHECK:
            if state == S.PENDING:
                n = _int(props.get(R.PROPERTY_TRANSACTION_CHECK_TIMES))
                table.set(qoff, S.PENDING, max(n, checks), source, commit_off, op_off)
        elif kind == R.DISCARD:
            if state == S.PENDING:
                table.set(qoff, S.DISCARDED, checks, source, commit_off, ev.log_offset)
        elif kind == R.RESUME:
            if state == S.DISCARDED:
                table.set(qoff, S.PENDING, 0, source, commit_off, -1)

    def append(
        self, inners: Sequence[MessageInner], events: Sequence[R.TxEvent | None]
    ) -> list[PutResult]:
        """Append records and fold their events (inside ``exclusive_appends``).

        ``events[i]`` describes ``inners[i]`` with ``log_offset`` unknown yet. When
        nothing lies between the table's position and the new records they are
        folded directly; otherwise (a segment roll's blank) by scanning.
        """
        results = self.store.put_inner_batch(inners)
        table = self.table
        pos = table.applied_pos
        for res, ev in zip(results, events, strict=True):
            if res.commit_log_offset != pos:
                self.catch_up()
                return results
            pos = res.commit_log_offset + res.size
            if ev is not None:
                ev.log_offset = res.commit_log_offset
                ev.next_offset = pos
                ev.store_timestamp = res.store_timestamp
                if ev.kind == R.HALF:
                    ev.half_offset = res.commit_log_offset
                    ev.queue_offset = res.queue_offset
                self.apply(ev)
            table.applied_pos = pos
        return results


def event(
    kind: str, inner: MessageInner, half_offset: int = -1, queue_offset: int = -1
) -> R.TxEvent:
    """Return the (not yet placed) event of a record about to be appended."""
    return R.TxEvent(
        kind,
        -1,
        -1,
        0,
        half_offset,
        queue_offset,
        inner.properties,
        inner.born_timestamp,
    )


def _int(raw: str | None) -> int:
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0
