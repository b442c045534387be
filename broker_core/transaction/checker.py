"""The transaction check: find due halves, check them back, discard.

One run: fold new records into the index, then walk the pending halves due by
now in ``(due_at, half_offset)`` order (an index range, so halves not yet due
cost nothing). Each due half is discarded (checked ``check_max`` times, or older
than the file retention) or handed to the check thread pool; the scan never
waits for a check-back. A half that fails in any way is counted and skipped:
it never stops the others (RocketMQ #9500). A run that hits its time budget
stops; the next one starts again at the earliest due half, i.e. where this one
stopped. Only one run at a time per store (``transaction/check.lock``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from broker_core.errors import CheckBackError, TransactionError
from broker_core.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    MessageExt,
)
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S
from broker_core.transaction.transports import CheckRequest
from broker_core.transaction.types import (
    CheckAnswer,
    CheckRunResult,
    CheckRunStatus,
    ResolutionSource,
)

if TYPE_CHECKING:
    from broker_core.transaction.service import TransactionService

log = logging.getLogger(__name__)

#: Check-backs queued or running at once; past it a run stops and the next resumes.
MAX_IN_FLIGHT = 10000

#: What one check-back produced, and whether it reached anybody.
_Done = tuple[CheckAnswer, bool]


def failure_kind(exc: BaseException) -> str:
    """Why a check-back got no answer, by the error's type: a
    ``CheckBackError``'s own ``failure`` (``no_producer``: it reached nobody;
    ``timeout``; ``error``), ``timeout`` for a ``TimeoutError`` from a
    transport of the caller's own, else ``error``."""
    if isinstance(exc, CheckBackError):
        return exc.failure
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error"


class CheckRunner:
    """Runs checks for one ``TransactionService``; owns the check thread pool."""

    def __init__(self, service: TransactionService) -> None:
        self.svc = service
        self.pool = ThreadPoolExecutor(
            max_workers=service.config.check_threads, thread_name_prefix="tx-check"
        )
        self._inflight: set[int] = set()
        self._lock = threading.Lock()
        # Fairness: one group's slow checker may hold at most half the threads,
        # its other checks wait in its own queue instead of ahead of other groups.
        self._group_limit = max(1, service.config.check_threads // 2)
        self._running: dict[str, int] = {}
        self._queued: dict[str, deque[tuple[MessageExt, int, Future[_Done]]]] = {}
        self._lock_path = service.store.root / "transaction" / "check.lock"
        #: group -> (monotonic time of its last "reached nobody" line, checks
        #: not logged since): one line a group a minute, not one a half.
        self._nobody_log: dict[str, tuple[float, int]] = {}

    def close(self) -> None:
        """Wait for check-backs in flight; drop the queued ones."""
        with self._lock:
            for q in self._queued.values():
                for half, _n, fut in q:
                    fut.cancel()
                    self._inflight.discard(half.commit_log_offset)
                q.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def run(
        self,
        time_budget_s: float | None = None,
        now_ms: int | None = None,
        wait_checks: bool = True,
        max_checks: int | None = None,
    ) -> CheckRunResult:
        """Run one check; return its summary.

        ``time_budget_s`` bounds the run (default ``run_time_budget_s``); ``now_ms``
        overrides the clock for due times and ages; with ``wait_checks`` the run
        waits (within the budget) for the check-backs it started, so their
        outcomes are recorded when it returns. Status BUSY if another run holds
        the store's check lock. ``max_checks`` bounds the check-backs this run
        starts (status BUDGET_EXHAUSTED when it stops there).
        """
        cfg = self.svc.config
        t0 = time.monotonic()
        budget = cfg.run_time_budget_s if time_budget_s is None else time_budget_s
        deadline = t0 + budget
        result = CheckRunResult(
            CheckRunStatus.COMPLETED, started_at=int(time.time() * 1000)
        )
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                result.status = CheckRunStatus.BUSY
                return result
            futures = self._scan(result, deadline, now_ms, max_checks)
            if wait_checks and futures:
                pending = set(futures)
                while pending and time.monotonic() < deadline:
                    _done, pending = wait(
                        pending,
                        timeout=deadline - time.monotonic(),
                        return_when=FIRST_COMPLETED,
                    )
            for f in futures:
                if f.done() and not f.cancelled() and f.exception() is None:
                    answer, delivered = f.result()
                    name = answer.value
                    result.answers[name] = result.answers.get(name, 0) + 1
                    if not delivered:
                        result.not_delivered += 1
                else:
                    result.in_flight += 1
            if time.monotonic() < deadline:
                self.svc.index.catch_up(deadline=deadline)
        finally:
            os.close(fd)  # releases the flock
            result.duration_s = time.monotonic() - t0
        return result

    def _scan(
        self,
        result: CheckRunResult,
        deadline: float,
        now_ms: int | None,
        max_checks: int | None,
    ) -> list[Future[_Done]]:
        svc = self.svc
        cfg = svc.config
        t0 = time.monotonic()
        result.indexed_records = svc.index.catch_up(deadline=t0 + (deadline - t0) / 2)
        if svc.ledger.table.applied_pos < svc.store.max_physical_offset():
            # Records this process did not write through the ledger (appended
            # by a replica link, now promoted): fold them before reading states.
            with svc.store.exclusive_appends():
                svc.ledger.catch_up()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        reserved_ms = int(cfg.file_reserved_hours * 3600 * 1000)
        table = svc.ledger.table
        futures: list[Future[_Done]] = []
        for due, half_off, qoff, _group, _topic, born in svc.index.iter_due(now):
            if (
                time.monotonic() > deadline
                or len(self._inflight) >= MAX_IN_FLIGHT
                or (max_checks is not None and result.checks_sent >= max_checks)
            ):
                result.status = CheckRunStatus.BUDGET_EXHAUSTED
                result.resume_after = (due, half_off)
                break
            result.scanned += 1
            try:
                state, checks = table.get(qoff)[:2]
                if state != S.PENDING:
                    continue  # resolved since the index last caught up
                with self._lock:
                    if half_off in self._inflight:
                        continue
                half = svc.store.read_message(half_off)
                if now - born > reserved_ms:
                    if svc.discard(
                        half,
                        f"older than the file retention ({cfg.file_reserved_hours} h)",
                        None,
                    ):
                        result.skipped_expired += 1
                    continue
                if checks >= cfg.check_max:
                    done = svc.discard(
                        half,
                        f"checked {checks} times (maximum {cfg.check_max})",
                        cfg.check_max,
                    )
                    if done == "discarded":
                        result.discarded += 1
                    elif done == "rolled_back":
                        result.rolled_back += 1
                    continue
                with self._lock:
                    self._inflight.add(half_off)
                futures.append(self._submit(half, checks + 1))
                result.checks_sent += 1
            except Exception:
                result.errors += 1
                log.exception("transaction check of the half at %d failed", half_off)
        return futures

    def _submit(self, half: MessageExt, check_no: int) -> Future[_Done]:
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        fut: Future[_Done] = Future()
        with self._lock:
            if self._running.get(group, 0) >= self._group_limit:
                self._queued.setdefault(group, deque()).append((half, check_no, fut))
                return fut
            self._running[group] = self._running.get(group, 0) + 1
        try:
            self.pool.submit(self._run_item, group, half, check_no, fut)
        except RuntimeError:
            with self._lock:
                self._running[group] -= 1
                self._inflight.discard(half.commit_log_offset)
            raise
        return fut

    def _run_item(
        self, group: str, half: MessageExt, check_no: int, fut: Future[_Done]
    ) -> None:
        while True:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(self._check_one(half, check_no))
                except BaseException as exc:
                    fut.set_exception(exc)
            with self._lock:
                q = self._queued.get(group)
                if not q:
                    self._running[group] -= 1
                    self._queued.pop(group, None)
                    return
                half, check_no, fut = q.popleft()

    def _log_nobody(self, group: str, tid: str, count: int) -> None:
        """Log a check that reached nobody (at most once a minute a group)."""
        now = time.monotonic()
        with self._lock:
            last, quiet = self._nobody_log.get(group, (float("-inf"), 0))
            if now - last < 60.0:
                self._nobody_log[group] = (last, quiet + 1)
                return
            self._nobody_log[group] = (now, 0)
        log.info(
            "check-back of %s (producer group %r): no producer online, not "
            "counted (%d of %d so far); %d more such checks of the group in "
            "the last minute",
            tid,
            group,
            count,
            self.svc.config.check_max,
            quiet,
        )

    def _check_one(self, half: MessageExt, check_no: int) -> _Done:
        """Call the group's checker, record the check, apply a COMMIT/ROLLBACK;
        return the answer and whether the check reached anybody."""
        svc = self.svc
        props = half.properties
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        tid = half.offset_msg_id
        try:
            chain = svc.checkers.chain_for(group)
            started = int(time.time() * 1000)
            t = time.perf_counter()
            detail: str | None = None
            failure: str | None = None
            if not chain:
                answer, name, target = CheckAnswer.FAILED, "none", "-"
                detail = f"no checker configured for producer group {group!r}"
                failure = R.FAILURE_NO_PRODUCER
            else:
                try:
                    qid = int(props.get(PROPERTY_REAL_QID, "0"))
                except ValueError:
                    qid = 0
                request = CheckRequest(
                    transaction_id=tid,
                    msg_id=half.msg_id,
                    producer_group=group,
                    topic=props.get(PROPERTY_REAL_TOPIC, ""),
                    queue_id=qid,
                    tags=half.tags,
                    keys=half.keys,
                    properties=dict(props),
                    body=half.body,
                    born_timestamp=half.born_timestamp,
                    check_no=check_no,
                    half_offset=half.commit_log_offset,
                    queue_offset=half.queue_offset,
                )
                failures: list[str] = []
                kinds: list[str] = []
                for transport in chain:
                    name, target = transport.name, transport.target
                    try:
                        answer = transport.check(request)
                    except Exception as exc:  # any failure of the call fails it
                        answer = CheckAnswer.FAILED
                        failures.append(f"{name}: {type(exc).__name__}: {exc}")
                        kinds.append(failure_kind(exc))
                        continue
                    name, target = transport.name, transport.target
                    break
                # A check answered after the live producers failed says so.
                detail = "; ".join(failures) or None
                if answer is not CheckAnswer.FAILED:
                    failure = None
                elif all(k == R.FAILURE_NO_PRODUCER for k in kinds):
                    failure = R.FAILURE_NO_PRODUCER  # reached nobody at all
                else:
                    # Reached someone (a webhook that timed out, a producer
                    # whose reply was bad): the most telling other reason.
                    failure = next(k for k in kinds if k != R.FAILURE_NO_PRODUCER)
            if failure == R.FAILURE_NO_PRODUCER:
                detail = f"no producer online, not counted: {detail}"
                self._log_nobody(group, tid, check_no - 1)
            latency_us = int((time.perf_counter() - t) * 1e6)
            svc.record_check(
                half, answer, name, target, started, latency_us, detail, failure
            )
            if answer in (CheckAnswer.COMMIT, CheckAnswer.ROLLBACK):
                try:
                    svc.end_transaction(
                        tid, group, answer.value, ResolutionSource.CHECK
                    )
                except TransactionError as exc:
                    log.info(
                        "check answer %s for %s not applied: %s", answer.value, tid, exc
                    )
            return answer, failure != R.FAILURE_NO_PRODUCER
        finally:
            with self._lock:
                self._inflight.discard(half.commit_log_offset)
