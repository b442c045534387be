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
    def flush_log(self) -> int:
        """Flush the log up to the current commit position; return that position."""
        state = self.store.state
        end = state.commit_pos
        start = min(self._flushed, state.flushed_pos)
        if end > state.flushed_pos:
            self.store.commitlog.flush(start, end)
            self.fsync_count += 1
            state.advance_flushed(end)
        return end

    def wait_flushed(self, target: int, timeout: float) -> bool:
        """Block until the log is on disk up to ``target``; False on timeout."""
        deadline = time.monotonic() + timeout
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
                end = self.flush_log()
            finally:
                with self._cond:
                    self._flushed = max(self._flushed, end)
                    self._flushing = False
                    self._cond.notify_all()

    def _gather(self) -> None:
        """Optionally let more producers append before the leader's fsync.

        Waits while the commit position still moves, at most
        ``group_commit_wait_us`` (default 0: on this machine producers, not the
        disk, were the bottleneck, so waiting did not raise throughput).
        """
        budget = self.store.config.group_commit_wait_us / 1e6
        if budget <= 0:
            return
        state = self.store.state
        deadline = time.monotonic() + budget
        last = state.commit_pos
        while time.monotonic() < deadline:
            time.sleep(budget / 8)
            now = state.commit_pos
            if now == last:
                return
            last = now

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
