"""Dispatchers and index building: the store's ``DispatchService``
(RocketMQ ``ReputMessageService`` and ``IndexService`` feeding).

Dispatchers see every record once, in log order, whichever process appended
it; the key index is built behind the appends from ``indexed_pos`` under its
own lock, so it never slows a put.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from broker_core.commitlog import CommitLog
from broker_core.config import StoreConfig
from broker_core.dispatch import (
    Dispatcher,
    DispatchRequest,
    decode_dispatch,
    iter_index_keys,
)
from broker_core.index import IndexService
from broker_core.shared import SharedState

log = logging.getLogger(__name__)


class _DispatcherSlot:
    __slots__ = ("name", "callback", "pos")

    def __init__(self, name: str, callback: Dispatcher, pos: int) -> None:
        self.name = name
        self.callback = callback
        self.pos = pos


class DispatchService:
    """Feeds registered dispatchers and builds the key index, from the log."""

    def __init__(
        self,
        state: SharedState,
        commitlog: CommitLog,
        index: IndexService,
        config: StoreConfig,
        is_closed: Callable[[], bool],
    ) -> None:
        self.state = state
        self.commitlog = commitlog
        self.index = index
        self.config = config
        self._is_closed = is_closed
        self._delay_ms = config.delay_ms
        self._dispatchers: list[_DispatcherSlot] = []
        self._dispatch_lock = threading.RLock()
        self._local = threading.local()
        self._reput_thread: threading.Thread | None = None
        self._reput_stop = threading.Event()

    @property
    def active(self) -> bool:
        """Whether this thread is inside a dispatch (or an exclusive append)."""
        return bool(getattr(self._local, "active", False))

    @active.setter
    def active(self, value: bool) -> None:
        self._local.active = value

    @property
    def has_dispatchers(self) -> bool:
        return bool(self._dispatchers)

    def stop(self) -> None:
        """Stop the reput thread."""
        self._reput_stop.set()
        if self._reput_thread is not None:
            self._reput_thread.join(timeout=10)
            self._reput_thread = None

    def iter_dispatch(
        self, start: int, end: int | None = None
    ) -> Iterator[DispatchRequest]:
        """Yield the ``DispatchRequest`` of every record in ``[start, end)``."""
        stop = (
            self.state.dispatched_pos
            if end is None
            else min(end, self.state.dispatched_pos)
        )
        # CRCs checked: a damaged record is stepped over, never decoded.
        for seg, pos, _size in self.commitlog.scan(
            max(start, self.commitlog.first_offset()), stop, verify_crc=True
        ):
            yield decode_dispatch(seg.view, pos, self._delay_ms)

    # -- dispatchers ---------------------------------------------------------
    def register(
        self, name: str, callback: Dispatcher, from_offset: int | None = None
    ) -> None:
        """Call ``callback`` for every record from ``from_offset`` on, in log order.

        ``from_offset`` None means "records appended from now on". A service that
        keeps derived state persists ``request.next_offset`` of the last record it
        handled and passes it here when it restarts: records in between (its own,
        other processes', those rebuilt by recovery) are replayed before this
        returns. A callback may put messages; exceptions are logged and skipped.
        """
        pos = self.state.dispatched_pos if from_offset is None else from_offset
        pos = max(pos, self.commitlog.first_offset())
        with self._dispatch_lock:
            self._dispatchers.append(_DispatcherSlot(name, callback, pos))
        self.run()
        if self._reput_thread is None:
            self._reput_thread = threading.Thread(
                target=self._reput_loop, name="broker-core-reput", daemon=True
            )
            self._reput_thread.start()

    def unregister(self, name: str) -> None:
        with self._dispatch_lock:
            self._dispatchers = [d for d in self._dispatchers if d.name != name]

    def run(self) -> None:
        """Feed every dispatcher the records it has not seen (any process's)."""
        if self.active:
            return  # a callback's own put: the outer loop picks it up
        with self._dispatch_lock:
            self.active = True
            try:
                while not self._is_closed():
                    target = self.state.dispatched_pos
                    behind = [d for d in self._dispatchers if d.pos < target]
                    if not behind:
                        return
                    start = min(d.pos for d in behind)
                    reached = start
                    for req in self.iter_dispatch(start, target):
                        for d in behind:
                            if d.pos <= req.commit_log_offset:
                                try:
                                    d.callback(req)
                                except Exception:
                                    log.exception("dispatcher %s failed", d.name)
                                d.pos = req.next_offset
                        reached = req.next_offset
                    if reached < target:
                        # The start was not a record boundary (a stale persisted
                        # offset, e.g. past a recovery cut): nothing to replay.
                        log.error(
                            "dispatch from %d stopped at %d before %d: "
                            "records skipped for %s",
                            start,
                            reached,
                            target,
                            [d.name for d in behind],
                        )
                    for d in behind:
                        d.pos = max(d.pos, target)
            finally:
                self.active = False

    def _reput_loop(self) -> None:
        while not self._reput_stop.wait(self.config.reput_interval_ms / 1000):
            if self._is_closed():
                return
            try:
                self.run()
            except Exception:
                log.exception("reput failed")

    # -- index ---------------------------------------------------------------
    def build_index(self, time_budget_s: float | None = None) -> None:
        """Index records up to the dispatched position (all, or within a budget)."""
        state = self.state
        if state.indexed_pos >= state.dispatched_pos:
            return
        with state.index_lock:
            start, end = state.indexed_pos, state.dispatched_pos
            if start >= end:
                return
            deadline = (
                None if time_budget_s is None else time.monotonic() + time_budget_s
            )
            items: list[tuple[int, int, str, list[str]]] = []
            pos = start
            for phys, size, ts, topic, keys in iter_index_keys(
                self.commitlog,
                max(start, self.commitlog.first_offset()),
                min(end, state.dispatched_pos),
                verify_crc=True,
            ):
                if keys:
                    items.append((phys, ts, topic, keys))
                pos = phys + size
                if len(items) >= 2048:
                    self.index.build(items)
                    items = []
                    state.indexed_pos = pos
                    if deadline is not None and time.monotonic() > deadline:
                        return
            self.index.build(items)
            state.indexed_pos = max(pos, end) if pos >= start else start
