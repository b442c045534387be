"""The log read as dispatch requests, and index building: the store's
``DispatchService`` (what RocketMQ's ``ReputMessageService`` feeds).

Services that keep derived state (the transaction index and ledger, the
delay timers) read ``iter_dispatch`` from the position they persisted; the
key index is built behind the appends from ``indexed_pos`` under its own
lock, so it never slows a put.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from broker_core.commitlog import CommitLog
from broker_core.config import StoreConfig
from broker_core.dispatch import (
    DispatchRequest,
    decode_dispatch,
    iter_index_keys,
)
from broker_core.index import IndexService
from broker_core.shared import SharedState

log = logging.getLogger(__name__)


class DispatchService:
    """Reads the log as dispatch requests and builds the key index from it."""

    def __init__(
        self,
        state: SharedState,
        commitlog: CommitLog,
        index: IndexService,
        config: StoreConfig,
    ) -> None:
        self.state = state
        self.commitlog = commitlog
        self.index = index
        self.config = config
        self._delay_ms = config.delay_ms

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
