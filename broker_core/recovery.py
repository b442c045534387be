"""Crash recovery and progress checkpoints (RocketMQ §3.4, §3.5).

The first process to open a store (no other process has it open) runs
``recover``: it validates the log's tail record by record (sizes, magic, body
CRC, physical offset), cuts a torn or damaged tail, re-dispatches consume-queue
units from the checkpoint's ``logics_offset``, drops units and index files that
point past the new end, and resets the shared positions. Without an ``abort``
marker (clean shutdown) only the tail of the last segment is re-verified.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_core.checkpoint import (
    Checkpoint,
    abort_exists,
    read_checkpoint,
    write_checkpoint,
)
from broker_core.consumequeue import ConsumeQueue
from broker_core.dispatch import decode_dispatch

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoveryInfo:
    """What recovery did; services use ``log_end`` to drop state past a cut."""

    abnormal: bool
    verified_from: int
    log_end: int
    truncated: bool
    redispatched_from: int
    seconds: float


def _boundary_near(store: MessageStore, target: int, floor: int) -> int:
    """Return the largest record start in ``[floor, target]`` known to a queue."""
    best = floor
    for topic, qid in store.cqs.on_disk():
        cq: ConsumeQueue = store.cqs.get(topic, qid)
        lo, hi = cq.min_offset(), cq.max_offset()
        if hi <= lo:
            continue
        # Largest unit with log offset <= target (units ascend by log offset).
        first = cq.read_units(lo, 1)
        if not first or first[0][0] > target:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            u = cq.read_units(mid, 1)
            if u and u[0][0] <= target:
                lo = mid
            else:
                hi = mid
        off = cq.read_units(lo, 1)[0][0]
        if off > best:
            best = off
    return best


def recover(store: MessageStore) -> RecoveryInfo:
    """Repair the store after the previous run; call with the append lock, alone."""
    t0 = time.monotonic()
    root = store.root
    cp = read_checkpoint(root / "checkpoint")
    abnormal = abort_exists(root)
    bases = store.commitlog.segments.list_bases()
    if not bases:
        store.state.reset(0, 0, 0)
        return RecoveryInfo(abnormal, 0, 0, False, 0, time.monotonic() - t0)
    size = store.config.segment_size
    if cp.logics_offset <= 0 or cp.logics_offset < bases[0]:
        abnormal = True  # no usable checkpoint: rebuild from the first segment
    if abnormal:
        safe = max(min(cp.logics_offset, cp.flushed_offset), bases[0])
        verify_from = safe - safe % size
        redispatch_from = max(cp.logics_offset, verify_from)
    else:
        last = bases[-1]
        target = max(last, cp.logics_offset - store.config.recover_verify_max_bytes)
        verify_from = _boundary_near(store, target, last) if target > last else last
        redispatch_from = max(verify_from, cp.logics_offset)
    log_end = verify_from
    dispatch_from = redispatch_from
    # One pass: verify every record; re-dispatch those at or past dispatch_from.
    units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    scan = store.commitlog.scan(verify_from, None, verify_crc=True)
    for seg, pos, _size in scan:
        off = seg.base + pos
        if off >= dispatch_from:
            req = decode_dispatch(seg.view, pos, store.config.delay_ms)
            if req.sysflag & 0xC in (0, 8):
                units.setdefault((req.topic, req.queue_id), []).append(
                    (req.consume_queue_offset, off, req.msg_size, req.tags_code)
                )
    log_end = store.commitlog.last_end
    if dispatch_from > log_end:
        dispatch_from = log_end
    # Bytes after the end are a torn or damaged tail: cut them.
    tail_seg = store.commitlog.segments.segment(log_end)
    truncated = False
    if tail_seg is not None:
        pos = log_end - tail_seg.base
        if pos < tail_seg.size and bytes(tail_seg.view[pos : pos + 8]) != bytes(8):
            truncated = True
    later = [b for b in bases if b > log_end - log_end % size]
    if truncated or later or store.commitlog.stopped_on_corruption:
        truncated = True
        log.warning("commit log cut at %d (abnormal=%s)", log_end, abnormal)
        _zero_tail(store, log_end)
    for (topic, qid), lst in units.items():
        cq = store.cqs.get(topic, qid)
        for qoff, off, sz, code in lst:
            cq.put_units(qoff, [(off, sz, code)])
    for topic, qid in store.cqs.on_disk():
        store.cqs.get(topic, qid).truncate_beyond(log_end)
    store.index.truncate_beyond(log_end)
    store.commitlog.flush(verify_from, log_end)
    store.cqs.flush()
    indexed = min(cp.index_offset, log_end)
    store.state.reset(log_end, log_end, indexed)
    write_checkpoint(
        root / "checkpoint",
        Checkpoint(
            cp.physic_timestamp,
            cp.logics_timestamp,
            cp.index_timestamp,
            log_end,
            log_end,
            log_end,
            indexed,
        ),
    )
    info = RecoveryInfo(
        abnormal, verify_from, log_end, truncated, dispatch_from, time.monotonic() - t0
    )
    log.info("recovered store %s: %s", root, info)
    return info


def _zero_tail(store: MessageStore, end: int) -> None:
    """Zero from ``end`` while bytes are non-zero, then drop later segments."""
    segs = store.commitlog.segments
    seg = segs.segment(end)
    if seg is not None:
        pos = end - seg.base
        chunk = 1 << 20
        while pos < seg.size:
            stop = min(seg.size, pos + chunk)
            if bytes(seg.view[pos:stop]) == bytes(stop - pos):
                break
            seg.zero(pos, stop)
            pos = stop
    for base in segs.list_bases():
        if base > segs.base_of(end):
            segs._drop(base)


def dispatch_queues(store: MessageStore, start: int, end: int) -> None:
    """Write consume-queue units for records in ``[start, end)`` from the log."""
    for seg, pos, _size in store.commitlog.scan(start, end):
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
        if req.sysflag & 0xC in (0, 8):
            store.cqs.get(req.topic, req.queue_id).put_units(
                req.consume_queue_offset,
                [(req.commit_log_offset, req.msg_size, req.tags_code)],
            )


def write_progress(store: MessageStore) -> None:
    """Flush every consume queue and the index; record how far they reach."""
    state = store.state
    flushed = state.flushed_pos
    dispatched = state.dispatched_pos
    indexed = state.indexed_pos
    for name, cfg in list(store.topics.topics.items()):
        for q in range(cfg.queue_nums):
            store.cqs.get(name, q)
    store.cqs.flush()
    store.index.flush()
    now = int(time.time() * 1000)
    write_checkpoint(
        store.root / "checkpoint",
        Checkpoint(
            now,
            now,
            now,
            flushed,
            flushed,
            min(dispatched, flushed),
            min(indexed, flushed),
        ),
    )
