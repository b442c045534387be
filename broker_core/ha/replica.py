"""The slave's side of the log: apply the master's bytes, or cut back to the master.

``apply_chunk`` writes raw commit-log bytes at exactly the master's offsets
(RocketMQ ``appendToCommitLog`` on an HA slave) and then does what an append
does: publish the commit position and write the consume-queue units of the
range, so readers of the slave see the messages; the key index follows through
the dispatch service. Every record is checked first (magic, sizes, both CRCs,
its own offset): a chunk that fails is refused whole, nothing of it visible.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core import recovery
from broker_core.dispatch import queue_unit_fields
from broker_core.errors import ReplicationError
from broker_core.ha.epochs import truncate_epochs
from broker_core.metadata import TopicConfig
from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    SKIP_MAGIC,
    RecordCheck,
    check_record,
    intact,
)
from broker_core.schedule.progress import PROGRESS_FILE
from broker_core.validation import is_system_topic

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)

#: One consume-queue unit to write: (queue offset, log offset, size, tag code).
Unit = tuple[int, int, int, int]


def check_chunk(
    data: bytes | memoryview,
    start: int,
    segment_size: int,
    delay_ms: Callable[[int], int],
) -> tuple[int, dict[tuple[str, int], list[Unit]]]:
    """Validate a chunk of log that starts at ``start``; return its end and the
    consume-queue units of its records, by queue.

    The chunk must lie in one segment and hold whole records, each at its own
    offset with intact CRCs (the ``__CRC32#`` record CRC required, so every
    byte is covered: ``record.intact``), optionally closed by the segment's
    blank marker, after which the log goes on at the next segment (the
    returned end). Raises ``ReplicationError`` otherwise.
    """
    view = memoryview(data)
    n = len(view)
    seg_end = start - start % segment_size + segment_size
    if n == 0:
        raise ReplicationError("an empty chunk")
    if start + n > seg_end:
        raise ReplicationError(f"a chunk at {start} of {n} bytes crosses a segment")
    units: dict[tuple[str, int], list[Unit]] = {}
    pos = 0
    while pos < n:
        off = start + pos
        if n - pos < 8:
            raise ReplicationError(f"a torn record at {off}")
        total, magic = BLANK.unpack_from(view, pos)
        if magic == BLANK_MAGIC:
            # The marker alone comes: the rest of the segment is filler.
            if off + total != seg_end or pos + 8 != n:
                raise ReplicationError(f"a misplaced end-of-segment marker at {off}")
            return seg_end, units
        if magic == SKIP_MAGIC:  # a range the master quarantined: kept as it is
            chk = check_record(view, pos, n, False)
            if chk.status is not RecordCheck.SKIP:
                raise ReplicationError(f"a torn quarantine marker at {off}")
            pos += chk.size
            continue
        if not 0 < total <= n - pos or not intact(view, pos, total, off):
            raise ReplicationError(f"the record at {off} fails its checks")
        if off + total + 8 > seg_end:
            raise ReplicationError(f"the record at {off} leaves no room for a blank")
        try:
            topic, qid, qoff, sysflag, size, code = queue_unit_fields(
                view, pos, delay_ms
            )
        except (ValueError, IndexError, struct.error):
            raise ReplicationError(f"the record at {off} is malformed") from None
        if sysflag & 0xC in (0, 8):
            units.setdefault((topic, qid), []).append((qoff, off, size, code))
        pos += total
    return start + n, units


def apply_chunk(store: MessageStore, start: int, data: bytes | memoryview) -> int:
    """Append the master's log bytes at ``start``; return the new log end.

    ``start`` must equal the replica's commit position. Raises
    ``ReplicationError`` (nothing applied) if it does not or the bytes fail
    their checks; ``StoreError`` for a disk fault (the bytes past the commit
    position are then overwritten by the next chunk or cut by recovery).
    """
    store.check_open()
    end, units = check_chunk(
        data, start, store.config.segment_size, store.config.delay_ms
    )
    state = store.state
    with state.append_lock:
        if state.dispatched_pos != state.commit_pos:
            store.repair_dispatch()
        if state.commit_pos != start:
            raise ReplicationError(
                f"a chunk at {start} does not continue the log at {state.commit_pos}"
            )
        _ensure_topics(store, units)
        store.commitlog.write(start, [bytes(data)])
        # Readers may read the records from now on; their queue units follow.
        state.commit_pos = end
        cqs = store.cqs
        for (topic, qid), lst in units.items():
            cq = cqs.get(topic, qid)
            first = lst[0][0]
            if first != cq.max_offset() or lst[-1][0] - first != len(lst) - 1:
                log.warning(
                    "replica queue %s/%d: units %d..%d written at end %d",
                    topic, qid, first, lst[-1][0], cq.max_offset(),
                )  # fmt: skip
                for qoff, off, size, code in lst:
                    cq.put_units(qoff, [(off, size, code)])
            else:
                cq.put_units(first, [(off, size, code) for _q, off, size, code in lst])
        state.dispatched_pos = end
    return end


def _ensure_topics(
    store: MessageStore, units: dict[tuple[str, int], list[Unit]]
) -> None:
    """Give every queue in ``units`` a topic config (append lock held).

    Topics come from the master's ``topics.json`` by config sync, which may
    lag the log: a queue must be readable as soon as its units exist.
    """
    registry = store.topic_registry
    registry.reload()
    limits = registry.queue_limits
    need: dict[str, int] = {}
    for topic, qid in units:
        if limits.get(topic, 0) <= qid:
            need[topic] = max(need.get(topic, 0), qid + 1)
    if not need:
        return
    topics = registry.table.topics
    for topic, n in need.items():
        cfg = topics.get(topic)
        if cfg is None:
            n = max(n, store.config.default_queue_nums)
            topics[topic] = TopicConfig(topic, n, n)
        else:
            cfg.read_queue_nums = max(cfg.read_queue_nums, n)
            cfg.write_queue_nums = max(cfg.write_queue_nums, n)
    registry.save()


def truncate(store: MessageStore, end: int) -> bool:
    """Cut the replica's log at ``end`` (a master that restarted shorter, or
    one whose epochs say the log parts from this one there).

    Consume-queue units and index entries past ``end`` go too, as recovery
    cuts them (index entries in a file that begins below ``end`` stay: a
    query reads the record they point at and drops what is not its key);
    records below ``end`` are read with their CRCs checked from now on. The
    epochs that start past ``end`` go, and so does a delay progress whose
    ``logPos`` is past it (a cache of the log: the delay service rebuilds it
    from the log). Returns False if the log already ends at or before ``end``.
    """
    store.check_open()
    state = store.state
    with state.append_lock:
        if state.dispatched_pos != state.commit_pos:
            store.repair_dispatch()
        if state.commit_pos <= end:
            return False
        log.warning("replica log cut from %d to %d", state.commit_pos, end)
        keep_cut_tail(store, end, state.commit_pos)
        parts = store.parts
        with state.index_lock:
            store.commitlog.truncate(end)
            for topic, qid in store.cqs.on_disk():
                store.cqs.get(topic, qid).truncate_beyond(end)
            store.index.truncate_beyond(end)
            state.reset(end, min(state.flushed_pos, end), min(state.indexed_pos, end))
        store.forget_append_cache()
        store.commitlog.flush(max(0, end - end % store.config.segment_size), end)
        recovery.write_progress(parts)
        truncate_epochs(store.root, end)
        _drop_delay_progress_past(store.root, end)
    return True


#: where a cut tail is kept (``STORE/ha/cut/<from>-<to>.log`` and ``.json``)
CUT_DIR = "ha/cut"
#: at most this many messages are listed in a cut's summary
CUT_LISTED = 10_000


def keep_cut_tail(store: MessageStore, start: int, end: int) -> dict[str, Any] | None:
    """Before the log is cut at ``start``: keep the records of ``[start, end)``
    (what this store took as a master that its new master never had: with
    ASYNC replication, acknowledged messages lost to the cluster) as raw
    records in ``ha/cut/<start>-<end>.log`` and a summary beside it: every
    message's id, key, tags and topic, so that an operator can tell the
    producers which messages to send again (``cut_tails`` reads them).
    A failure to keep them is logged and does not stop the cut."""
    from broker_core.metadata import atomic_write_json

    folder = store.root / CUT_DIR
    name = f"{start:020d}-{end:020d}"
    messages: list[dict[str, Any]] = []
    count = 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{name}.log", "wb") as raw:
            for m in store.iter_messages(start, end, verify_crc=False):
                raw.write(m.raw_record())
                count += 1
                if len(messages) < CUT_LISTED:
                    messages.append({
                        "msg_id": m.msg_id, "offset_msg_id": m.offset_msg_id,
                        "topic": m.topic, "keys": m.keys, "tags": m.tags,
                        "born_timestamp": m.born_timestamp,
                        "store_timestamp": m.store_timestamp,
                    })  # fmt: skip
            raw.flush()
            os.fsync(raw.fileno())
        summary = {
            "from": start, "to": end, "bytes": end - start, "messages": count,
            "cut_at_ms": int(time.time() * 1000), "listed": messages,
        }  # fmt: skip
        atomic_write_json(folder / f"{name}.json", summary)
    except Exception as exc:  # noqa: BLE001 - the cut itself must go on
        log.error("the cut tail %d-%d was not kept: %s", start, end, exc)
        return None
    user = [m for m in messages if not is_system_topic(m["topic"])]
    log.error(
        "%d messages (%d bytes; %d in client topics) this store took as a "
        "master are not in its new master's log: kept in %s (.json lists "
        "their ids and keys)", count, end - start, len(user), folder / name,
    )  # fmt: skip
    return summary


def cut_tails(root: Path) -> list[dict[str, Any]]:
    """The cut tails kept in ``root`` (newest first), without their lists."""
    out = []
    for path in sorted((root / CUT_DIR).glob("*.json"), reverse=True):
        try:
            summary = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        listed = summary.pop("listed", [])
        summary["client_messages"] = sum(
            1 for m in listed if not is_system_topic(m.get("topic", ""))
        )
        summary["file"] = str(path)
        out.append(summary)
    return out


def _drop_delay_progress_past(root: Path, end: int) -> None:
    path = root / "config" / PROGRESS_FILE
    try:
        pos = int(json.loads(path.read_bytes()).get("logPos", 0))
    except (FileNotFoundError, ValueError, TypeError, AttributeError):
        return
    if pos > end:
        log.warning("delay progress at log offset %d is past the cut: dropped", pos)
        path.unlink(missing_ok=True)


def last_record(store: MessageStore, end: int) -> int | None:
    """Return the offset of the last record that ends by ``end`` (None: none).

    A consume queue gives a record start near ``end`` (as recovery finds
    one); the walk from there reads record headers only.
    """
    if end <= 0:
        return None
    size = store.config.segment_size
    floor = (end - 1) - (end - 1) % size
    seg = store.commitlog.segments.segment(floor)
    if seg is None:
        return None
    pos = recovery.boundary_near(store.parts, end - 1, floor) - seg.base
    limit = min(seg.size, end - seg.base)
    last = None
    while pos < limit:
        chk = check_record(seg.view, pos, limit, False)
        if chk.status in (RecordCheck.OK, RecordCheck.SKIP):
            if chk.status is RecordCheck.OK:
                last = seg.base + pos
            pos += chk.size
            continue
        break
    return last


def fingerprint(store: MessageStore, offset: int) -> dict[str, object] | None:
    """Return what identifies the record at ``offset``: its size and record CRC.

    Two logs with the same fingerprint at the same offset hold the same record
    there (the ``__CRC32#`` CRC covers every byte, the offset included).
    """
    seg = store.commitlog.segments.segment(offset)
    if seg is None:
        return None
    pos = offset - seg.base
    chk = check_record(seg.view, pos, seg.size, False)
    if chk.status is not RecordCheck.OK:
        return None
    tail = bytes(seg.view[pos + chk.size - 20 : pos + chk.size])
    return {"offset": offset, "size": chk.size, "crc": tail.hex()}


def last_fingerprint(store: MessageStore, end: int) -> dict[str, object] | None:
    """Return the fingerprint of the last record before ``end`` (None: none)."""
    at = last_record(store, end)
    return None if at is None else fingerprint(store, at)
