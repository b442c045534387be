"""Flushing: the background flusher and sync-flush group commit.

In ``async`` mode a thread writes the log to disk every ``flush_interval_ms``.
In ``sync`` mode each put waits in ``wait_flushed``: the first waiter becomes
the leader and fsyncs everything appended so far (by any thread or process);
the others wait for its result, so concurrent sends share one fsync. In both
modes the thread also flushes consume queues, builds and flushes the index and
writes the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)


class FlushService:
    """Flushes one open store; ``start`` launches the background thread."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.sync = store.config.flush == "sync"
        self.interval = store.config.flush_interval_ms / 1000.0
        self._cond = threading.Condition()
        self._flushing = False
        self._flushed = store.state.flushed_pos
        #: Sync puts counted by ``begin_put`` that have not reached the wait yet.
        self._appending = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Number of log fsyncs done by this process (group commit shows here).
        self.fsync_count = 0

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="broker-core-flush", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # -- log flushing --------------------------------------------------------
    def flush_log(self, target: int | None = None) -> int:
        """Flush the log up to the current commit position; return the flushed end.

        With ``target``, return early when another process's fsync, taken
        while this one waited for the flush lock, already covered it.
        """
        state = self.store.state
        with state.flush_lock:
            flushed = state.flushed_pos
            if target is not None and flushed >= target:
                return flushed
            end = state.commit_pos
            if end > flushed:
                self.store.commitlog.flush(min(self._flushed, flushed), end)
                self.fsync_count += 1
                state.advance_flushed(end)
            return end

    def begin_put(self) -> None:
        """Count a put that will call ``wait_flushed`` (sync mode, before appending)."""
        with self._cond:
            self._appending += 1

    def abort_put(self) -> None:
        """Uncount a put that failed before ``wait_flushed``."""
        with self._cond:
            self._appending -= 1
            self._cond.notify_all()

    def wait_flushed(self, target: int, timeout: float) -> bool:
        """Block until the log is on disk up to ``target``; False on timeout.

        The caller counted itself with ``begin_put`` before appending.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._appending -= 1
            if self._appending == 0:
                self._cond.notify_all()
        while True:
            with self._cond:
                while True:
                    if self._flushed >= target:
                        return True
                    if self.store.state.flushed_pos >= target:
                        self._flushed = max(self._flushed, target)
                        return True
                    if not self._flushing:
                        self._flushing = True
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            end = self._flushed
            try:
                self._gather()
                end = self.flush_log(target)
            finally:
                with self._cond:
                    self._flushed = max(self._flushed, end)
                    self._flushing = False
                    self._cond.notify_all()

    def _gather(self) -> None:
        """Let the puts already under way append before the leader's fsync.

        Producers count themselves before appending (``begin_put``); the leader
        waits until none is still appending, at most ``group_commit_wait_us``,
        so one fsync covers every concurrent put instead of the first few.
        """
        budget = self.store.config.group_commit_wait_us / 1e6
        if budget > 0:
            with self._cond:
                self._cond.wait_for(lambda: self._appending <= 0, budget)

    # -- background ----------------------------------------------------------
    def _run(self) -> None:
        interval = self.interval if not self.sync else max(self.interval, 1.0)
        while not self._stop.wait(interval):
            try:
                self.cycle()
            except Exception:  # a failed cycle is retried next interval
                log.exception("flush cycle failed")

    def cycle(self, index_budget_s: float = 0.2) -> None:
        """Flush the log (async mode), queues and index; write the checkpoint."""
        store = self.store
        if store.closed:
            return
        if not self.sync:
            end = self.flush_log()
            with self._cond:
                self._flushed = max(self._flushed, end)
        if store.config.index_in_background:
            store.build_index(time_budget_s=index_budget_s)
        store.flush_derived()
