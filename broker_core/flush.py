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
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.errors import StoreError
from broker_core.parts import StoreParts


@dataclass(frozen=True, slots=True)
class FlushHooks:
    """What a flush cycle does beside the log, supplied by the store."""

    #: Index records behind the appends, within a time budget (seconds).
    build_index: Callable[[float], None]
    #: Flush consume queues and the index; write the checkpoint.
    write_progress: Callable[[], None]
    #: Write the consumer offsets committed in memory.
    persist_offsets: Callable[[], None]
    #: Whether the store is closed.
    is_closed: Callable[[], bool]


log = logging.getLogger(__name__)


class FlushService:
    """Flushes one open store; ``start`` launches the background thread."""

    def __init__(self, parts: StoreParts, hooks: FlushHooks) -> None:
        self.parts = parts
        self.hooks = hooks
        self.sync = parts.config.flush == "sync"
        self.interval = parts.config.flush_interval_ms / 1000.0
        self._cond = threading.Condition()
        self._flushing = False
        self._flushed = parts.state.flushed_pos
        #: Sync puts counted by ``begin_put`` that have not reached the wait yet.
        self._appending = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offsets_at = 0.0
        self._reported_at = -60.0
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
        state = self.parts.state
        with state.flush_lock:
            flushed = state.flushed_pos
            if target is not None and flushed >= target:
                return flushed
            end = state.commit_pos
            if end > flushed:
                self.parts.commitlog.flush(min(self._flushed, flushed), end)
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
                    if self.parts.state.flushed_pos >= target:
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
        budget = self.parts.config.group_commit_wait_us / 1e6
        if budget > 0:
            with self._cond:
                self._cond.wait_for(lambda: self._appending <= 0, budget)

    # -- background ----------------------------------------------------------
    def _report(self, exc: Exception) -> None:
        """Log a failed step once a minute, not every interval."""
        now = time.monotonic()
        if now - self._reported_at >= 60:
            self._reported_at = now
            log.error("flush cycle: %s", exc)

    def _run(self) -> None:
        interval = self.interval if not self.sync else max(self.interval, 1.0)
        while not self._stop.wait(interval):
            try:
                self.cycle()
            except StoreError as exc:  # a full disk: retried next interval
                self._report(exc)
            except Exception:  # a failed cycle is retried next interval
                log.exception("flush cycle failed")

    def cycle(self, index_budget_s: float = 0.2) -> None:
        """Flush the log (async mode), queues and index; write the checkpoint."""
        hooks, config = self.hooks, self.parts.config
        if hooks.is_closed():
            return
        if not self.sync:
            end = self.flush_log()
            with self._cond:
                self._flushed = max(self._flushed, end)
        if config.index_in_background:
            try:
                hooks.build_index(index_budget_s)
            except StoreError as exc:
                # The index lags (queries build the rest); queues and the
                # checkpoint must still be written.
                self._report(exc)
        hooks.write_progress()
        now = time.monotonic()
        if now - self._offsets_at >= config.offset_persist_interval_ms / 1000:
            self._offsets_at = now
            hooks.persist_offsets()
