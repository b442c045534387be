"""Crash recovery and progress checkpoints (as in RocketMQ).

The first process to open a store (no other process has it open) runs
``recover``: it validates the log's tail record by record (sizes, magic, body
CRC, physical offset), cuts a torn or damaged tail, re-dispatches consume-queue
units from the checkpoint's ``logics_offset``, drops units and index files that
point past the new end, and resets the shared positions. Without an ``abort``
marker (clean shutdown) only the tail of the last segment is re-verified.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field

from broker_core.checkpoint import (
    Checkpoint,
    abort_exists,
    read_checkpoint,
    write_checkpoint,
)
from broker_core.commitlog import Damage
from broker_core.consumequeue import ConsumeQueue
from broker_core.dispatch import decode_dispatch
from broker_core.errors import StoreError
from broker_core.parts import StoreParts
from broker_core.quarantine import QuarantinedRange
from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    SKIP_MAGIC,
    intact,
    starts_record,
)
from broker_core.segment import Segment

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
    #: Damaged ranges copied to ``quarantine/`` by this recovery.
    quarantined: list[QuarantinedRange] = field(default_factory=list)
    #: Bytes the checkpoint says were flushed but the log no longer has.
    missing_bytes: int = 0
    #: Consume queues rebuilt from the log because they disagreed with it.
    rebuilt_queues: list[tuple[str, int]] = field(default_factory=list)
    #: Whether the index was found missing and is being rebuilt.
    index_rebuilt: bool = False


def _boundary_near(store: StoreParts, target: int, floor: int) -> int:
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
        if best < off <= target:
            best = off
    return best


#: Public name for replication (``ha.replica.last_record``).
boundary_near = _boundary_near


def recover(store: StoreParts, verify_all: bool = False) -> RecoveryInfo:
    """Repair the store after the previous run; call with the append lock, alone.

    Damaged records are copied to ``quarantine/`` and stepped over; every valid
    record after them, in their segment and later ones, is kept. Only a tail
    with no valid record after it is cut. ``verify_all`` CRC-checks the whole
    log (``verify --repair``); otherwise an abnormal recovery verifies from a
    margin before the checkpoint's flushed position, a normal one the tail.
    """
    t0 = time.monotonic()
    root = store.root
    # Before anything maps a queue file (which extends it): short files.
    short = [k for k in store.cqs.on_disk() if not store.cqs.get(*k).files_whole()]
    cp = read_checkpoint(root / "checkpoint")
    abnormal = abort_exists(root)
    bases = store.commitlog.segments.list_bases()
    # A process killed without closing left its commit position in the state
    # file (page cache): with the flushed offset, where committed data ends.
    prev_commit = store.state.commit_pos if store.state.initialised else 0
    info = RecoveryInfo(abnormal, 0, 0, False, 0, 0.0)
    if not bases:
        if cp.flushed_offset > 0:
            try:
                _report_missing(store, info, 0, cp.flushed_offset)
            except StoreError as exc:
                log.error("missing log not recorded in quarantine/: %s", exc)
        store.state.reset(0, 0, 0)
        # Written now, while there is room: later writes reuse its block.
        write_checkpoint(root / "checkpoint", Checkpoint())
        info.seconds = time.monotonic() - t0
        return info
    size = store.config.segment_size
    no_checkpoint = cp.logics_offset <= 0 or cp.logics_offset < bases[0]
    if no_checkpoint:
        abnormal = True  # no usable checkpoint: rebuild from the first segment
    if verify_all:
        verify_from = bases[0]
    elif abnormal:
        safe = min(cp.logics_offset, cp.flushed_offset)
        target = safe - store.config.recover_margin_bytes
        if safe <= 0 or target <= bases[0]:
            verify_from = bases[0]
        else:
            floor = max(bases[0], target - target % size)
            verify_from = _boundary_near(store, target, floor)
    else:
        last = bases[-1]
        target = max(last, cp.logics_offset - store.config.recover_verify_max_bytes)
        verify_from = _boundary_near(store, target, last) if target > last else last
    dispatch_from = verify_from if no_checkpoint else max(verify_from, cp.logics_offset)
    # One pass: verify every record; re-dispatch those at or past dispatch_from.
    units: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    damage: list[Damage] = []
    scan = store.commitlog.scan(
        verify_from, None, True, damage, max(prev_commit, cp.flushed_offset)
    )
    #: the highest queue offset of each queue among the records verified: a
    #: queue that ends at or before it lost its tail (zeroed units read as
    #: its end, and the next sends took the offsets of intact messages)
    seen: dict[tuple[str, int], int] = {}
    for seg, pos, _size in scan:
        off = seg.base + pos
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
        if not req.takes_unit(store.topics):
            continue
        key = (req.topic, req.queue_id)
        if req.consume_queue_offset > seen.get(key, -1):
            seen[key] = req.consume_queue_offset
        if off >= dispatch_from:
            units.setdefault(key, []).append(
                (req.consume_queue_offset, off, req.msg_size, req.tags_code)
            )
    log_end = store.commitlog.last_end
    dispatch_from = min(dispatch_from, log_end)
    kept_tail = False
    # Below it records were committed (acknowledged): the checkpoint's flushed
    # offset or, after a kill, the commit position the process left in state.
    committed = max(prev_commit, cp.flushed_offset)
    try:
        for d in damage:
            after = _quarantine(store, info, d, committed, log_end)
            if after is not None:  # flushed records: stepped over, not cut
                log_end, kept_tail = after, True
        if log_end < cp.flushed_offset:
            _report_missing(store, info, log_end, cp.flushed_offset)
    except StoreError as exc:
        # No room to keep the evidence: leave the damage in place (reads and
        # scans step over it) and say so; the next open tries again.
        log.error("damaged ranges not quarantined: %s", exc)
    # Bytes after the end are a torn or damaged tail: cut them.
    tail_seg = store.commitlog.segments.segment(log_end)
    truncated = store.commitlog.stopped_on_corruption and not kept_tail
    if tail_seg is not None:
        pos = log_end - tail_seg.base
        stop = min(pos + 8, tail_seg.data_end(pos))
        if pos < stop and bytes(tail_seg.view[pos:stop]) != bytes(stop - pos):
            truncated = True
    if truncated:
        log.warning("commit log cut at %d (abnormal=%s)", log_end, abnormal)
        _zero_tail(store, log_end)
    damaged_starts = sorted(d.start for d in damage)
    for (topic, qid), lst in units.items():
        cq = store.cqs.get(topic, qid)
        before = cq.max_offset()
        for qoff, off, sz, code in lst:
            cq.put_units(qoff, [(off, sz, code)])
        _fill_holes(cq, before, lst, damaged_starts)
    for topic, qid in store.cqs.on_disk():
        store.cqs.get(topic, qid).truncate_beyond(log_end)
    store.index.truncate_beyond(log_end)
    for key, top in seen.items():
        if key not in short and store.cqs.get(*key).max_offset() <= top:
            log.error(
                "consume queue %s/%d ends before queue offset %d of the log: "
                "rebuilding it",
                key[0],
                key[1],
                top,
            )
            short.append(key)
    info.rebuilt_queues = check_queues(store, log_end, verify_all, short)
    indexed = min(cp.index_offset, log_end)
    if indexed > bases[0] and not store.index.has_files():
        log.error("index files missing: rebuilding the index from the log")
        indexed = bases[0]
        info.index_rebuilt = True
    store.commitlog.flush(verify_from, log_end)
    store.cqs.flush()
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
    info.abnormal = abnormal
    info.verified_from = verify_from
    info.log_end = log_end
    info.truncated = truncated
    info.redispatched_from = dispatch_from
    info.seconds = time.monotonic() - t0
    log.info("recovered store %s: %s", root, info)
    return info


def _report_missing(
    store: StoreParts, info: RecoveryInfo, log_end: int, flushed: int
) -> None:
    """Record loudly that the log is shorter than the checkpoint says it was."""
    info.missing_bytes = flushed - log_end
    log.error(
        "the commit log ends at %d but the checkpoint says it was flushed to %d: "
        "%d bytes of records are missing (deleted or truncated segment files?)",
        log_end,
        flushed,
        flushed - log_end,
    )
    if not store.quarantine.known(log_end):
        info.quarantined.append(
            store.quarantine.add(
                log_end,
                b"",
                flushed - log_end,
                "missing: the checkpoint says the log was flushed to "
                f"{flushed}, the files end at {log_end}",
                "",
                "lost",
            )
        )


def _quarantine(
    store: StoreParts, info: RecoveryInfo, d: Damage, committed: int, log_end: int
) -> int | None:
    """Copy a damaged range to ``quarantine/`` and lay a filler over it.

    A damaged tail at or past the committed position (``committed``: the
    checkpoint's flushed offset, or the commit position a killed process
    left) is torn (never acknowledged) and cut. One below it held
    acknowledged records: it is stepped over like any other damage, and the
    log goes on after it (returned), so that no later message takes a
    damaged one's offset."""
    segs = store.commitlog.segments
    seg = segs.segment(d.start)
    if seg is None:
        # A whole segment file is missing between others: nothing to copy;
        # say which range is lost (the later segments are kept).
        if d.end > d.start and not store.quarantine.known(d.start):
            log.error(
                "log range [%d, %d) is missing (a deleted segment file): its "
                "records are lost, the later segments' are kept",
                d.start,
                d.end,
            )
            info.quarantined.append(
                store.quarantine.add(
                    d.start,
                    b"",
                    d.end - d.start,
                    "missing: no segment file holds this range",
                    "",
                    "lost",
                )
            )
        return None
    pos = d.start - seg.base
    if d.end < 0:  # a tail: its extent is the non-zero bytes that follow
        data = bytes(seg.view[pos : _tail_extent(seg, pos)]).rstrip(b"\0")
        if not data:
            return None
        torn = committed <= 0 or d.start >= committed
        # (a tail less than a filler from the segment's end cannot be stepped
        # over: it is cut)
        cut = torn or seg.size - pos < 8
        if cut or not store.quarantine.known(d.start):
            reason = (
                "torn tail past the committed position"
                if torn
                else "damaged tail: committed records with no valid record after them"
            )
            action = "cut" if cut else "skipped"
            info.quarantined.append(
                store.quarantine.add(
                    d.start, data, len(data), reason, seg.path.name, action
                )
            )
        if cut:
            return None
        stop = _lay_filler(seg, pos, pos + max(len(data), 8))
        log.error(
            "damaged flushed records at [%d, %d): copied to quarantine/ and "
            "stepped over; the log goes on after them",
            d.start,
            seg.base + stop,
        )
        return seg.base + stop
    stop = d.end - seg.base
    if store.quarantine.known(d.start):
        return None
    data = bytes(seg.view[pos:stop])
    reason = "checks failed" if d.reason == "corrupt" else "zeros where records go on"
    log.error(
        "damaged log range [%d, %d) (%s): copied to quarantine/, later records kept",
        d.start,
        d.end,
        reason,
    )
    info.quarantined.append(
        store.quarantine.add(d.start, data, len(data), reason, seg.path.name, "skipped")
    )
    if stop - pos >= 8:
        _lay_filler(seg, pos, stop)
    return None


def _lay_filler(seg: Segment, pos: int, stop: int) -> int:
    """Lay a filler over ``[pos, stop)`` (at least 8 bytes); return where it
    ends. One that reaches the segment's end (or leaves less than a filler
    after it) is a blank, and the bytes after its marker are zeroed: readers
    take a blank with anything else after it for damage
    (``record.blank_fills_segment``)."""
    if seg.size - stop < 8:
        stop = seg.size
    if stop < seg.size:
        seg.overwrite(pos, BLANK.pack(stop - pos, SKIP_MAGIC))
        return stop
    seg.overwrite(pos, BLANK.pack(stop - pos, BLANK_MAGIC))
    at, limit = pos + 8, seg.data_end(pos + 8)
    while at < limit:
        nxt = min(limit, at + (1 << 16))
        if bytes(seg.view[at:nxt]) != bytes(nxt - at):
            seg.overwrite(at, bytes(nxt - at))
        at = nxt
    return stop


def _fill_holes(
    cq: ConsumeQueue,
    before: int,
    lst: list[tuple[int, int, int, int]],
    damaged: list[int],
) -> None:
    """Write a placeholder unit for each queue offset whose record was damaged.

    A missing unit would read as the queue's end and hide every later message;
    the placeholder (size 1, at the damaged range) fails the read check, so
    consumers step over it.
    """
    have = {q for q, _o, _s, _c in lst}
    top = max(have) if have else before
    for q in range(before, top):
        if q in have:
            continue
        nxt = min((o for qq, o, _s, _c in lst if qq > q), default=0)
        at = max((d for d in damaged if d < nxt), default=nxt)
        cq.put_units(q, [(at, 1, 0)])


def check_queues(
    store: StoreParts,
    log_end: int,
    thorough: bool = False,
    short: list[tuple[str, int]] | None = None,
) -> list[tuple[str, int]]:
    """Compare every consume queue with the log; rebuild the ones that disagree.

    Checked: every file of the queue has its full size, and the last unit (with
    ``thorough``, every unit: ``verify --repair``) points at a whole record of
    that topic and queue with that queue offset and that tag hash. Rebuilding
    reads the log once for all of them.
    """
    bad: list[tuple[str, int]] = list(short or [])
    # Thorough: the log's own count of each queue, so that a queue cut short
    # (zeroed or lost units at its end) or missing altogether is found too.
    holes = _placeholders(store) if thorough else {}
    filled: set[tuple[str, int]] = set()
    ends = _queue_ends(store, log_end, holes, filled) if thorough else {}
    for key in sorted(filled):
        # A placeholder where the log has an intact record (a segment that
        # was missing is back): the message was hidden for good.
        log.error("consume queue %s/%d hides records the log has", *key)
        if key not in bad:
            bad.append(key)
    for topic, qid in sorted(set(store.cqs.on_disk()) | set(ends)):
        cq = store.cqs.get(topic, qid)
        if (topic, qid) in bad:
            continue
        if (
            not cq.files_whole()
            or cq.max_offset() < ends.get((topic, qid), 0)
            or not _units_agree(store, cq, log_end, thorough)
        ):
            bad.append((topic, qid))
    if bad:
        log.error("consume queues disagree with the log, rebuilding: %s", bad)
        rebuild_queues(store, set(bad), log_end)
    return bad


def _placeholders(store: StoreParts) -> dict[tuple[str, int], set[int]]:
    """Each queue's placeholder units (size 1: a damaged or missing record),
    by queue offset."""
    out: dict[tuple[str, int], set[int]] = {}
    for topic, qid in store.cqs.on_disk():
        cq = store.cqs.get(topic, qid)
        q, hi = cq.min_offset(), cq.max_offset()
        while q < hi:
            units = cq.read_units(q, 4096)
            if not units:
                break
            for i, (_phys, size, _code) in enumerate(units):
                if size == 1:
                    out.setdefault((topic, qid), set()).add(q + i)
            q += len(units)
    return out


def _queue_ends(
    store: StoreParts,
    log_end: int,
    holes: dict[tuple[str, int], set[int]] | None = None,
    filled: set[tuple[str, int]] | None = None,
) -> dict[tuple[str, int], int]:
    """Each queue's end by the log: its last record's queue offset + 1; the
    queues of ``holes`` (placeholder queue offsets) whose record the log has
    whole are added to ``filled``."""
    ends: dict[tuple[str, int], int] = {}
    first = store.commitlog.first_offset()
    for seg, pos, _size in store.commitlog.scan(first, log_end, True, []):
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
        if req.takes_unit(store.topics):
            key = (req.topic, req.queue_id)
            ends[key] = max(ends.get(key, 0), req.consume_queue_offset + 1)
            if holes and filled is not None:
                if req.consume_queue_offset in holes.get(key, ()):
                    filled.add(key)
    return ends


def _units_agree(
    store: StoreParts, cq: ConsumeQueue, log_end: int, thorough: bool
) -> bool:
    lo, hi = cq.min_offset(), cq.max_offset()
    if hi <= lo:
        return True
    start = lo if thorough else hi - 1
    q = start
    while q < hi:
        units = cq.read_units(q, 4096)
        if not units:
            return False
        for i, (phys, size, code) in enumerate(units):
            if not _unit_agrees(store, cq, q + i, phys, size, code, log_end):
                return False
        q += len(units)
    return True


def _unit_agrees(
    store: StoreParts,
    cq: ConsumeQueue,
    q: int,
    phys: int,
    size: int,
    code: int,
    log_end: int,
) -> bool:
    """Whether the unit at queue offset ``q`` names the record of that topic,
    queue and queue offset, with its size and tag hash (a damaged record's
    placeholder, or a unit naming a damaged record, agrees: the read check
    steps over it)."""
    if size == 1:
        return True  # a placeholder for a damaged record
    if phys < 0 or size <= 0 or phys + size > log_end:
        return False
    seg = store.commitlog.segments.segment(phys)
    if seg is None:
        return False
    pos = phys - seg.base
    if not starts_record(seg.view, pos, size, phys):
        # A unit naming a quarantined record agrees (its filler fails the read
        # check); otherwise no record of that size and offset starts there:
        # the unit is damaged (or the record's header is, which a rebuild
        # turns into a placeholder).
        return store.quarantine.known(phys)
    if not intact(seg.view, pos, size, phys):
        return True  # a damaged record (CRCs): the read check steps over it
    try:
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
    except (ValueError, struct.error):  # UnicodeDecodeError is a ValueError
        return True
    return (req.topic, req.queue_id, req.consume_queue_offset, req.msg_size) == (
        cq.topic,
        cq.queue_id,
        q,
        size,
    ) and (req.tags_code == code or req.sysflag & 0xC not in (0, 8))


def rebuild_queues(
    store: StoreParts, which: set[tuple[str, int]], log_end: int
) -> None:
    """Rewrite the units of the queues ``which`` from the whole log."""
    for topic, qid in which:
        store.cqs.get(topic, qid).clear()
    lists: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    first = store.commitlog.first_offset()
    damage: list[Damage] = []
    for seg, pos, _size in store.commitlog.scan(first, log_end, True, damage):
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
        key = (req.topic, req.queue_id)
        if key in which and req.takes_unit(store.topics):
            lists.setdefault(key, []).append(
                (req.consume_queue_offset, req.commit_log_offset, req.msg_size,
                 req.tags_code)
            )  # fmt: skip
    starts = sorted(d.start for d in damage)
    for key, lst in lists.items():
        cq = store.cqs.get(*key)
        for qoff, off, sz, code in lst:
            cq.put_units(qoff, [(off, sz, code)])
        _fill_holes(cq, 0, lst, starts)


def _zero_tail(store: StoreParts, end: int) -> None:
    """Zero from ``end`` while bytes are non-zero (later segments are kept)."""
    segs = store.commitlog.segments
    seg = segs.segment(end)
    if seg is not None:
        pos = end - seg.base
        stop = _tail_extent(seg, pos)
        if stop > pos:
            seg.zero(pos, stop)


def _tail_extent(seg: Segment, pos: int) -> int:
    """Return where the bytes from ``pos`` stop being non-zero, in 1 MiB steps
    (never reading past the data: ``Segment.data_end``)."""
    stop, limit = pos, seg.data_end(pos)
    while stop < limit:
        nxt = min(limit, stop + (1 << 20))
        if bytes(seg.view[stop:nxt]) == bytes(nxt - stop):
            break
        stop = nxt
    return stop


def dispatch_queues(store: StoreParts, start: int, end: int) -> None:
    """Write consume-queue units for records in ``[start, end)`` from the log."""
    for seg, pos, _size in store.commitlog.scan(start, end):
        req = decode_dispatch(seg.view, pos, store.config.delay_ms)
        if req.takes_unit(store.topics):
            store.cqs.get(req.topic, req.queue_id).put_units(
                req.consume_queue_offset,
                [(req.commit_log_offset, req.msg_size, req.tags_code)],
            )


def write_progress(store: StoreParts) -> None:
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
