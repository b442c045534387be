"""The message store: commit log, consume queues, index and metadata together
(RocketMQ ``DefaultMessageStore``).

This is the layer transaction, schedule and protocol services build on:
``put_inner`` / ``put_inner_batch`` (no sendable-topic check, every field set
by the caller), ``read_message`` by commit-log offset, ``iter_messages`` over a
log range, ``get_queue_units`` for consume-queue units, ``iter_dispatch`` for
what derived state is built from, and min/max offsets per queue. ``Broker`` is
the client facade.
"""

from __future__ import annotations

import contextlib
import logging
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from broker_core import recovery
from broker_core.checkpoint import create_abort, remove_abort
from broker_core.commitlog import CommitLog
from broker_core.config import (
    StoreConfig,
    adopt_geometry,
    new_store_id,
    store_geometry,
    store_id,
)
from broker_core.consumequeue import ConsumeQueueTable, pack_unit
from broker_core.diskio import DiskGuard
from broker_core.dispatch import (
    DispatchRequest,
    decode_dispatch,
    iter_index_keys,
)
from broker_core.dispatcher import DispatchService
from broker_core.errors import (
    AppendBusyError,
    InvalidOffsetError,
    InvalidQueueError,
    LeaseExpiredError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    ReplicaReadOnlyError,
    StorageFullError,
    StoreClosedError,
    StoreError,
)
from broker_core.flush import FlushHooks, FlushService
from broker_core.groups import GroupRegistry
from broker_core.index import IndexService
from broker_core.message import (
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    MessageExt,
    MessageInner,
    PutResult,
    SendStatus,
    encode_properties,
)
from broker_core.metadata import (
    PERM_READ,
    PERM_WRITE,
    MessageType,
    OffsetTable,
    TopicConfig,
    TopicTable,
    atomic_write_json,
)
from broker_core.offsets import ConsumerOffsets
from broker_core.parts import StoreParts
from broker_core.quarantine import Quarantine
from broker_core.record import (
    HEADER,
    HEADER_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    PROP_CRC_SIZE,
    PROPS_LEN,
    names_queue_record,
    offset_msg_id,
    parse_host,
    prop_crc,
)
from broker_core.scrub import Scrubber
from broker_core.shared import (
    _Q,
    COMMIT_AT,
    DISPATCHED_AT,
    LEASE_AT,
    REPLICA_AT,
    TOPICS_V_AT,
    SharedState,
)
from broker_core.tags import tags_code
from broker_core.topics import TopicRegistry
from broker_core.validation import SCHEDULE_TOPIC, validate_group

log = logging.getLogger(__name__)
#: after the disk refused the index its blocks, lookups read the records not
#: yet indexed from the log for this long before trying to index them again
INDEX_FULL_RETRY_S = 5.0

#: One append, as the hot path carries it: topic, queue id, body, encoded
#: properties, tag code, delay level, flag, sysflag, born timestamp (0 = now),
#: born host (packed, port), reconsume times, prepared-transaction offset.
PutItem = tuple[str, int, bytes, bytes, int, int, int, int, int, bytes, int, int, int]

_topic_bytes_cache: dict[str, tuple[bytes, int, bytes]] = {}


def _topic_parts(topic: str) -> tuple[bytes, int, bytes]:
    """Return (encoded topic, magic, topic length field), cached."""
    hit = _topic_bytes_cache.get(topic)
    if hit is None:
        tb = topic.encode()
        if len(tb) > 127:
            hit = (tb, MAGIC_V2, len(tb).to_bytes(2, "big"))
        else:
            hit = (tb, MAGIC_V1, bytes((len(tb),)))
        if len(_topic_bytes_cache) < 100_000:
            _topic_bytes_cache[topic] = hit
    return hit


class MessageStore:
    """One open store directory; several processes may open the same one.

    It appends and reads itself and delegates to named collaborators: the
    ``commitlog``, the consume queues (``cqs``), the key ``index``, the
    ``topic_registry``, the ``consumer_offsets``, the ``dispatch`` service
    (dispatchers and index building), the ``flusher``, the ``scrubber`` and
    the ``quarantine``; ``recovery`` runs over the same parts.
    """

    def __init__(self, root: str | Path, config: StoreConfig) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "config").mkdir(exist_ok=True)
        # The store's own file sizes win over the caller's defaults.
        adopt_geometry(self.root, config)
        self.config = config
        self.closed = False
        #: ``index_query``: no index build before this (monotonic; full disk)
        self._index_full_until = 0.0
        #: ``_unindexed``: (start, end, keys) of the log past the index
        self._tail: tuple[int, int, dict[str, list[tuple[int, int]]]] = (0, 0, {})
        self.state = SharedState(self.root)
        self.commitlog = CommitLog(self.root, config.segment_size)
        #: Refuses appends above ``disk_space_warning_ratio`` (RocketMQ's 90%).
        self.disk_guard = DiskGuard(
            self.root,
            config.disk_space_warning_ratio,
            config.disk_check_interval_ms / 1000,
        )
        self.cqs = ConsumeQueueTable(self.root, config.cq_units_per_file)
        self.index = IndexService(self.root, config.index_slots, config.index_entries)
        geometry = self.root / "config" / "store.json"
        if store_id(self.root) is None:
            # The file sizes this store was created with, for whoever opens
            # it without the caller's settings, and the id that tells it from
            # another store placed at the same path (the reports' export).
            saved = {**store_geometry(config), "store_id": new_store_id()}
            try:
                atomic_write_json(geometry, saved)
            except StoreError as exc:  # a full disk must not stop the open
                log.warning("config/store.json not written: %s", exc)
        #: Damaged log ranges found so far (``quarantine/``).
        self.quarantine = Quarantine(self.root)
        self.topics = TopicTable(self.root / "config" / "topics.json")
        self.offsets = OffsetTable(self.root / "config" / "consumerOffset.json")
        #: Consumer group settings (FIFO, delivery attempts), shared by processes.
        self.groups = GroupRegistry(self.root / "config" / "subscriptionGroup.json")
        #: Commits in memory, written by the flusher (``offsets.ConsumerOffsets``).
        self.consumer_offsets = ConsumerOffsets(self.offsets, self.state)
        #: Topic configurations, reloaded when another process changes them.
        self.topic_registry = TopicRegistry(
            self.topics, self.state, self.cqs, self.consumer_offsets, config
        )
        #: The log end after this process's last append (-1: none yet).
        self._own_end = -1
        #: Queues whose cached end is exact while no other process appends.
        self._trusted_ends: set[tuple[str, int]] = set()
        self.topic_registry.on_reload = self._trusted_ends.clear
        self.store_ip, self.store_port = parse_host(config.store_host)
        self._delay_ms = config.delay_ms
        #: The log read as dispatch requests, and index building.
        self.dispatch = DispatchService(self.state, self.commitlog, self.index, config)
        #: The parts recovery, the flusher and the scrubber work on.
        self.parts = StoreParts(
            self.root,
            config,
            self.state,
            self.commitlog,
            self.cqs,
            self.index,
            self.quarantine,
            self.topics,
        )
        #: What the open found: ``recovery.RecoveryInfo`` (None unless first opener).
        self.recovery_info: recovery.RecoveryInfo | None = None
        with self.state.append_lock:
            if self.state.try_exclusive_presence():
                self.recovery_info = recovery.recover(
                    self.parts, verify_all=config.verify_on_open
                )
                create_abort(self.root)
            self.state.share_presence()
            # Only now: recovery checks every record it reads, whoever wrote it.
            self.commitlog.trusted_from = lambda: self.state.trusted_from
            self.topic_registry.reload(force=True)
            if self.recovery_info is not None:
                self.topic_registry.adopt_orphan_queues()
            self.topic_registry.ensure_system_topics()
            self.repair_dispatch()
        self.flusher = FlushService(
            self.parts,
            FlushHooks(
                build_index=self.build_index,
                write_progress=self.flush_derived,
                persist_offsets=self.persist_offsets,
                is_closed=lambda: self.closed,
            ),
        )
        self.flusher.start()
        #: Re-checks the whole log now and then (off unless scrub_interval_s).
        self.scrubber = Scrubber(self.parts, lambda: self.closed)
        self.scrubber.start()

    # -- topics (``TopicRegistry``) -------------------------------------------
    def refresh_topics(self) -> None:
        """Reload topic configs if another process changed them (one mapped read)."""
        self.check_open()
        if self.state.topics_version != self.topic_registry.version:
            self.topic_registry.reload()

    def has_topic(self, topic: str) -> bool:
        """Whether ``topic`` exists now (another process's creation seen)."""
        self.refresh_topics()
        return topic in self.topics.topics

    def topic_config(self, topic: str) -> TopicConfig | None:
        """Return the current configuration of ``topic`` (None if unknown)."""
        return self.topic_registry.find(topic)

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        message_type: str = MessageType.NORMAL.value,
    ) -> TopicConfig:
        """Create a topic (``TopicRegistry.create``)."""
        self.check_config_writable()
        return self.topic_registry.create(
            topic, read_queue_nums, write_queue_nums, perm, message_type
        )

    def update_topic(
        self,
        topic: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> TopicConfig:
        """Change a topic's settings (``TopicRegistry.update``)."""
        self.check_config_writable()
        return self.topic_registry.update(
            topic, read_queue_nums, write_queue_nums, perm, message_type
        )

    def delete_topic(self, topic: str) -> None:
        """Delete a topic's config, queues and offsets; its records stay."""
        self.check_config_writable()
        self.topic_registry.delete(topic)

    def list_topics(self) -> list[TopicConfig]:
        """Return every topic's configuration, sorted by name."""
        self.check_open()
        return self.topic_registry.all()

    def get_topic(self, topic: str) -> TopicConfig:
        """Return one topic's configuration; ``TopicNotFoundError`` if unknown."""
        return self.topic_registry.get(topic)

    # -- consumer offsets (``ConsumerOffsets``) ------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` (the next to consume) for a group on one queue.

        Kept in memory and written within ``offset_persist_interval_ms`` (and at
        close); ``persist_offsets`` writes at once. Internal groups such as
        ``CID_RMQ_SYS_TRANS`` are allowed on system topics. Raises
        ``InvalidGroupError``, ``TopicNotFoundError``, ``InvalidQueueError`` and
        ``InvalidOffsetError`` (negative or past the queue's max offset).
        """
        self.check_open()
        validate_group(group)
        cfg = self.get_topic(topic)
        if not 0 <= queue_id < cfg.queue_nums:
            raise InvalidQueueError(
                f"queue id {queue_id} is out of range for {topic!r}"
            )
        max_off = self.cqs.get(topic, queue_id).max_offset()
        if not 0 <= offset <= max_off:
            raise InvalidOffsetError(
                f"offset {offset} is outside [0, {max_off}] "
                f"for {topic!r} queue {queue_id}"
            )
        self.consumer_offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Return the committed offset of a group on a queue, or -1 if none."""
        self.check_open()
        validate_group(group)
        return self.consumer_offsets.get(group, topic, queue_id)

    def persist_offsets(self) -> None:
        """Write the offsets committed in this process now (else on a timer)."""
        self.consumer_offsets.persist()

    def all_offsets(self) -> dict[str, dict[int, int]]:
        """Return every committed offset: ``{"topic@group": {queue_id: offset}}``."""
        return self.consumer_offsets.all()

    # -- dispatch requests and the index (``DispatchService``) ---------------
    def iter_dispatch(
        self, start: int, end: int | None = None
    ) -> Iterator[DispatchRequest]:
        """Yield the ``DispatchRequest`` of every record in ``[start, end)``."""
        return self.dispatch.iter_dispatch(start, end)

    def build_index(self, time_budget_s: float | None = None) -> None:
        """Index records up to the dispatched position (all, or within a budget)."""
        self.dispatch.build_index(time_budget_s)

    def index_query(self, key: str, begin: int, end: int, limit: int) -> list[int]:
        """Offsets of the records of ``key`` (``topic#key``) within ``[begin,
        end]`` ms: the index brought up to date first; where it cannot be (a
        full disk refuses its blocks), the records not yet indexed are read
        from the log, so a lookup is never short for want of disk room."""
        if time.monotonic() >= self._index_full_until:
            try:
                self.build_index()
            except StorageFullError as exc:
                # Not tried again for a while: each try re-reads the records
                # it could not index (a lookup took ~90 ms on a full tmpfs).
                self._index_full_until = time.monotonic() + INDEX_FULL_RETRY_S
                log.warning("index lookup on a full disk: %s; reading the rest", exc)
        out = self.index.query(key, begin, end, limit)
        state = self.state
        if state.indexed_pos < state.dispatched_pos and len(out) < limit:
            for phys, ts in self._unindexed(
                state.indexed_pos, state.dispatched_pos
            ).get(key, ()):
                if begin <= ts <= end:
                    out.append(phys)
        return out

    def _unindexed(self, start: int, end: int) -> dict[str, list[tuple[int, int]]]:
        """``topic#key`` -> (offset, store time) of the records in ``[start,
        end)`` of the log, the part the index does not cover: read once and
        extended as the log grows (each lookup read all of it: ~175 ms a
        lookup with a few MB unindexed on a full disk)."""
        first = max(start, self.commitlog.first_offset())
        cached_start, cached_end, keys = self._tail
        if cached_start != first or cached_end > end:
            cached_start, cached_end, keys = first, first, {}
        for phys, _size, ts, topic, names in iter_index_keys(
            self.commitlog, cached_end, end, verify_crc=True
        ):
            for k in names:
                keys.setdefault(f"{topic}#{k}", []).append((phys, ts))
        self._tail = (cached_start, end, keys)
        return keys

    def rebuild_index(self) -> None:
        """Drop the index files and index the whole log again (``verify
        --repair`` when the index disagrees with the log: it is derived)."""
        state = self.state
        with state.index_lock:
            self.index.close()
            for path in self.index.directory.glob("*"):
                if path.name.isdigit():
                    path.unlink()
            state.indexed_pos = self.commitlog.first_offset()
        self.build_index()

    # -- appending -----------------------------------------------------------
    def check_open(self) -> None:
        """Raise ``StoreClosedError`` once the store is closed."""
        if self.closed:
            raise StoreClosedError("the store is closed")

    def check_config_writable(self) -> None:
        """Raise ``StoreClosedError`` once closed and ``ReplicaReadOnlyError``
        on a slave: its topics come from its master (``ha``'s config sync),
        a topic made here would be the slave's alone."""
        self.check_open()
        if self.state.replica:
            raise ReplicaReadOnlyError(
                "this store is a slave: its topics are its master's"
            )

    def repair_dispatch(self) -> None:
        """Write the queue units a killed appender left out (append lock held:
        the replication layer calls it before reading the commit position)."""
        state = self.state
        start, end = state.dispatched_pos, state.commit_pos
        if start >= end:
            return
        log.warning(
            "re-dispatching log range [%d, %d) left by a dead process", start, end
        )
        recovery.dispatch_queues(self.parts, start, end)
        state.dispatched_pos = end

    def forget_append_cache(self) -> None:
        """Drop what the append path remembers of the log's end and of the
        queues it checked (append lock held): after the log was cut under it
        (``ha.replica.truncate``)."""
        self._trusted_ends.clear()
        self._own_end = -1

    def put_inner(self, msg: MessageInner) -> PutResult:
        """Append one fully specified message; see ``put_inner_batch``."""
        return self.put_inner_batch([msg])[0]

    def put_inner_batch(self, msgs: Sequence[MessageInner]) -> list[PutResult]:
        """Append messages exactly as given, bypassing client send checks.

        The sendable-topic rule is not applied (system topics are allowed); an
        unknown topic is created with ``max(default_queue_nums, queue_id + 1)``
        queues. Consume-queue units are written for NOT/COMMIT records only; the
        index skips ROLLBACK records. Raises ``InvalidQueueError`` for a queue id
        outside the topic and ``MessageTooLargeError`` for oversized parts.
        """
        return self.put_items(self.prepare_inner(msgs), auto_create=True, inner=True)

    def prepare_inner(self, msgs: Sequence[MessageInner]) -> list[PutItem]:
        """Convert ``MessageInner`` values to the append path's items."""
        items: list[PutItem] = []
        for m in msgs:
            props = m.properties
            pb = encode_properties(props).encode()
            if len(pb) > 0xFFFF:
                raise PropertiesTooLargeError("properties exceed 65535 bytes")
            delay = 0
            if m.topic == SCHEDULE_TOPIC and props.get(PROPERTY_DELAY):
                try:
                    delay = int(props[PROPERTY_DELAY])
                except ValueError:
                    delay = 0
            bip, bport = parse_host(m.born_host)
            items.append(
                (
                    m.topic,
                    m.queue_id,
                    bytes(m.body),
                    pb,
                    tags_code(props.get(PROPERTY_TAGS)),
                    delay,
                    m.flag,
                    m.sysflag,
                    m.born_timestamp,
                    bip,
                    bport,
                    m.reconsume_times,
                    m.prepared_transaction_offset,
                )
            )
        return items

    def put_items(
        self, items: Sequence[PutItem], auto_create: bool, inner: bool = False
    ) -> list[PutResult]:
        """Append prepared items; return a ``PutResult`` per item."""
        offsets, sizes, qoffs, now, status = self.append_items(
            items, auto_create, inner
        )
        return [
            PutResult(
                off,
                size,
                q,
                now,
                offset_msg_id(self.store_ip, self.store_port, off),
                status,
            )
            for off, size, q in zip(offsets, sizes, qoffs, strict=True)
        ]

    def append_items(
        self,
        items: Sequence[PutItem],
        auto_create: bool,
        inner: bool = False,
        blocking: bool = True,
    ) -> tuple[list[int], list[int], list[int], int, SendStatus]:
        """Append prepared items under the append lock: the hot path.

        Returns (log offsets, record sizes, queue offsets, store timestamp, status).
        The record layout is packed here, in one pass, rather than through
        ``record.encode_record``: per-message call overhead dominates in Python.
        Nothing becomes visible unless every item is valid: bytes written before
        a validation error lie past the commit position and are overwritten.
        With ``blocking=False`` it raises ``AppendBusyError`` (nothing appended)
        rather than wait for the append lock or, in sync flush mode, the disk.
        """
        if self.closed:
            raise StoreClosedError("the store is closed")
        sync = self.config.flush == "sync"
        if sync and not blocking:
            raise AppendBusyError("a sync-flush append waits for the disk")
        if sync:
            self.flusher.begin_put()
            try:
                pos, offsets, sizes, qoffs, now = self._append_locked(
                    items, auto_create, inner, True
                )
            except BaseException:
                self.flusher.abort_put()
                raise
        else:
            pos, offsets, sizes, qoffs, now = self._append_locked(
                items, auto_create, inner, blocking
            )
        status = SendStatus.SEND_OK
        if sync:
            ok = self.flusher.wait_flushed(
                pos, self.config.sync_flush_timeout_ms / 1000
            )
            if not ok:
                status = SendStatus.FLUSH_DISK_TIMEOUT
        return offsets, sizes, qoffs, now, status

    def _encode(self, items: Sequence[PutItem]) -> tuple[list[tuple[Any, ...]], int]:
        """Do the position-independent part of encoding, outside the append lock.

        Per item: the bytes after the body, the record size, the body CRC and
        the CRC of the bytes after the body (the record CRC continues over the
        header once its offsets are known); and the bytes of all records.
        """
        max_record = self.config.max_message_size + 65536
        crc32 = zlib.crc32
        plen = PROPS_LEN.pack
        topic_cache = _topic_bytes_cache
        out = []
        nbytes = 0
        for item in items:
            (topic, qid, body, pb, code, delay, flag, sysflag, born, bip, bport,
             recon, prep) = item  # fmt: skip
            tparts = topic_cache.get(topic) or _topic_parts(topic)
            suffix = b"".join((tparts[2], tparts[0], plen(len(pb) + PROP_CRC_SIZE), pb))
            blen = len(body)
            total = HEADER_SIZE + blen + len(suffix) + PROP_CRC_SIZE
            if total > max_record:
                raise MessageTooLargeError(f"record of {total} bytes is too large")
            nbytes += total
            out.append(
                (topic, qid, body, suffix, total, tparts[1], crc32(body) & 0x7FFFFFFF,
                 crc32(suffix), code, delay, flag, sysflag & ~0x30, born, bip, bport,
                 recon, prep, blen)
            )  # fmt: skip
        return out, nbytes

    def _append_locked(
        self, items: Sequence[PutItem], auto_create: bool, inner: bool, blocking: bool
    ) -> tuple[int, list[int], list[int], list[int], int]:
        encoded, nbytes = self._encode(items)
        # Before the lock: refuse while the disk is above its usage limit.
        self.disk_guard.check(nbytes)
        commitlog = self.commitlog
        state = self.state
        mm = state.mm
        qunpack, qpack = _Q.unpack_from, _Q.pack_into
        crc32 = zlib.crc32
        pack = HEADER.pack
        unit_pack = pack_unit
        cqs = self.cqs
        sip, sport = self.store_ip, self.store_port
        next_q: dict[tuple[str, int], int] = {}
        # Per queue of this batch: (its ConsumeQueue, first offset, packed units).
        cq_batch: dict[tuple[str, int], tuple[Any, int, list[bytes]]] = {}
        parts: list[bytes] = []
        offsets: list[int] = []
        sizes: list[int] = []
        qoffs: list[int] = []
        lock = state.append_lock
        if not lock.acquire(blocking):
            raise AppendBusyError("the append lock is held")
        try:
            if qunpack(mm, REPLICA_AT)[0]:
                raise ReplicaReadOnlyError(
                    "this store is a slave: it takes appends from its master only"
                )
            lease = qunpack(mm, LEASE_AT)[0]
            if lease and time.monotonic_ns() >= lease:
                raise LeaseExpiredError(
                    "this master's controller lease has run out: it takes no "
                    "writes until it leads again"
                )
            pos = qunpack(mm, COMMIT_AT)[0]
            if qunpack(mm, DISPATCHED_AT)[0] != pos:
                self.repair_dispatch()
                pos = qunpack(mm, COMMIT_AT)[0]
            registry = self.topic_registry
            if qunpack(mm, TOPICS_V_AT)[0] != registry.version:
                registry.reload()
            qlimits = registry.queue_limits
            trusted = self._trusted_ends
            if pos != self._own_end:
                trusted.clear()
            now = int(time.time() * 1000)
            first_pos = pos
            try:
                chunk_start = pos
                seg_end = commitlog.segment_end(pos)
                for (topic, qid, body, suffix, total, magic, bcrc, scrc, code, delay,
                     flag, sysflag, born, bip, bport, recon, prep, blen
                     ) in encoded:  # fmt: skip
                    lim = qlimits.get(topic)
                    if lim is None or not 0 <= qid < lim:
                        registry.ensure_queues(((topic, qid),), auto_create, inner)
                        qlimits = registry.queue_limits
                    if pos + total + 8 > seg_end:
                        # The record starts the next segment; a blank marks the rest.
                        commitlog.check_fits_segment(total)
                        parts.append(commitlog.blank(pos))
                        commitlog.write(chunk_start, parts)
                        parts = []
                        pos = chunk_start = seg_end
                        seg_end = commitlog.segment_end(pos)
                    if not sysflag & 0x4:  # NOT or COMMIT: a consume-queue unit
                        key = (topic, qid)
                        q = next_q.get(key)
                        if q is None:
                            cq = cqs.get(topic, qid)
                            # A queue end read since the last append by another
                            # process is exact; otherwise read forward to the end.
                            q = cq.cached_max if key in trusted else None
                            if q is None:
                                q = cq.max_offset()
                                trusted.add(key)
                            cq_batch[key] = (cq, q, [])
                        next_q[key] = q + 1
                        if delay > 0:
                            code = now + (self._delay_ms(delay) or 1000)
                        cq_batch[key][2].append(unit_pack(pos, total, code))
                    else:
                        q = 0
                    head = pack(
                        total, magic, bcrc, qid, flag, q, pos, sysflag, born or now,
                        bip, bport, now, sip, sport, recon, prep, blen,
                    )  # fmt: skip
                    parts += (
                        head,
                        body,
                        suffix,
                        prop_crc(crc32(head, scrc) & 0x7FFFFFFF),
                    )
                    offsets.append(pos)
                    sizes.append(total)
                    qoffs.append(q)
                    pos += total
                commitlog.write(chunk_start, parts)
                for cq, first, lst in cq_batch.values():
                    if first + len(lst) >= cq.reserved_upto:
                        cq.reserve(first, len(lst))
            except BaseException:
                # Nothing of a failed append may stay: not acknowledged, not
                # found by a later recovery, and the next append starts here.
                if parts or pos > first_pos:
                    commitlog.discard(first_pos, max(pos, chunk_start))
                raise
            # Readers may read the records from now on; their queue units follow.
            qpack(mm, COMMIT_AT, pos)
            for cq, first, lst in cq_batch.values():
                cq.put_packed(first, len(lst), b"".join(lst))
            qpack(mm, DISPATCHED_AT, pos)
            self._own_end = pos
        finally:
            lock.release()
        return pos, offsets, sizes, qoffs, now

    @contextlib.contextmanager
    def exclusive_appends(self) -> Iterator[None]:
        """Hold the append lock across reads and puts: check-then-append for services.

        Inside, no other thread or process appends, every record in the log is
        visible (a dead appender's undispatched range is repaired first) and
        ``put_inner`` may be called.
        """
        self.check_open()
        with self.state.append_lock:
            if self.state.dispatched_pos != self.state.commit_pos:
                self.repair_dispatch()
            yield

    # -- replication (``broker_core.ha``) -----------------------------------
    def replica_append(self, start: int, data: bytes | memoryview) -> int:
        """Append a master's raw log bytes at ``start``; return the new log end.

        For an HA slave (``ha.replica.apply_chunk``): ``start`` must equal the
        commit position; the records are checked whole before any is visible.
        Raises ``ReplicationError`` (nothing applied) or ``StoreError``.
        """
        from broker_core.ha.replica import apply_chunk

        return apply_chunk(self, start, data)

    @property
    def replica(self) -> bool:
        """Whether the store follows a master: client appends are refused
        (``ReplicaReadOnlyError``) and only replicated bytes are appended. Seen
        by every process of the store (``SharedState.replica``)."""
        return self.state.replica

    @replica.setter
    def replica(self, value: bool) -> None:
        self.state.replica = value

    def replica_truncate(self, end: int) -> bool:
        """Cut the log, its queue units and index entries at ``end``
        (``ha.replica.truncate``); False if the log ends at or before it."""
        from broker_core.ha.replica import truncate

        return truncate(self, end)

    # -- reading -------------------------------------------------------------
    def max_physical_offset(self) -> int:
        """The log offset after the last record visible to readers."""
        return self.state.dispatched_pos

    def read_message(self, offset: int) -> MessageExt:
        """Return the record at log ``offset``; ``MessageNotFoundError`` if none."""
        self.check_open()
        return self.commitlog.read_message(offset, self.state.dispatched_pos)

    def iter_messages(
        self, start: int = 0, end: int | None = None, verify_crc: bool = True
    ) -> Iterator[MessageExt]:
        """Yield decoded records from log offset ``start`` (a boundary) to ``end``.

        ``start`` below the first segment begins at the first segment.
        """
        self.check_open()
        stop = (
            self.state.dispatched_pos
            if end is None
            else min(end, self.state.dispatched_pos)
        )
        start = max(start, self.commitlog.first_offset())
        from broker_core.record import decode_record

        for seg, pos, _size in self.commitlog.scan(start, stop, verify_crc):
            yield decode_record(seg.view, pos)

    def get_queue_units(
        self, topic: str, queue_id: int, start: int, count: int
    ) -> list[tuple[int, int, int]]:
        """Return consume-queue units ``(log offset, size, tag code)`` from ``start``,
        each checked to name a record of its size (``repair_units`` rebuilds a
        run that does not, from the log, and they are read again).

        For ``SCHEDULE_TOPIC_XXXX`` the tag code is the delivery timestamp (ms).
        """
        self.check_open()
        cq = self.cqs.get(topic, queue_id)
        # Units are written before the log's visible end moves past their
        # records: those past the end read before the units are in flight
        # (an appender of this or another process between the two), not
        # damage, and are left for the next look. Checking them found
        # "damage" in a busy timer queue and rebuilt units under the writer.
        visible = self.state.dispatched_pos
        written = cq.max_offset()
        read = cq.read_units(start, count)
        units = self._visible_units(read, visible)
        for _ in range(4):  # each round rebuilds one damaged run
            bad = [
                i
                for i, (p, n, _c) in enumerate(units)
                if not self._names_record(p, n, queue_id, start + i)
            ]
            if bad:
                at = start + bad[0]
            elif (
                len(units) == len(read)  # not cut at units in flight
                and len(units) < count
                and len(units) < written - start
            ):
                # A zeroed unit reads as the queue's end although units follow.
                at = start + len(units)
            else:
                break
            if not self.repair_units(topic, queue_id, at):
                break
            read = cq.read_units(start, count)
            units = self._visible_units(read, visible)
        return units

    @staticmethod
    def _visible_units(
        units: list[tuple[int, int, int]], visible: int
    ) -> list[tuple[int, int, int]]:
        """``units`` without their tail of units whose records start at or
        past the log's visible end: in flight, the newest of the queue. One
        such unit followed by a unit below the end is not in flight but
        damaged, and is kept (for the check to rebuild it)."""
        i = len(units)
        while i > 0 and units[i - 1][1] != 1 and units[i - 1][0] >= visible:
            i -= 1
        return units[:i]

    def _names_record(self, phys: int, size: int, queue_id: int, q: int) -> bool:
        """Whether the unit at queue offset ``q`` of queue ``queue_id`` names
        the record that starts at ``phys`` with ``size`` and was written at
        that queue offset (a placeholder of a damaged record, size 1, counts
        as naming it)."""
        if size == 1 or 0 <= phys < self.commitlog.first_offset():
            return True  # a placeholder, or a record gone with its segment
        seg = self.commitlog.segments.segment(phys) if phys >= 0 else None
        return seg is not None and names_queue_record(
            seg.view, phys - seg.base, size, phys, queue_id, q
        )

    #: How far ``repair_units`` walks from a damaged unit to a good neighbour.
    REPAIR_WALK = 1 << 16

    def repair_units(self, topic: str, queue_id: int, q: int) -> int:
        """Rebuild from the log the run of damaged units around queue offset
        ``q`` of a queue (units that name no record of their size: a flipped
        or zeroed consume-queue file), while the store is open; return how
        many units were rewritten.

        The run's records lie in the log between its good neighbours (a
        queue's records are in log order), so only that stretch is read, CRC
        checked; a unit whose record is not there (damaged) becomes a
        placeholder that readers step over. Every process would write the
        same units, so none needs a lock beyond the queue's own files.
        """
        cq = self.cqs.get(topic, queue_id)
        lo_q, hi_q = cq.min_offset(), cq.max_offset()
        first = q
        low = self.commitlog.first_offset()
        while first > lo_q and q - first < self.REPAIR_WALK:
            ((p, n, _c),) = cq.read_units(first - 1, 1) or [(-1, 0, 0)]
            if n != 1 and self._names_record(p, n, queue_id, first - 1):
                low = p + n
                break
            first -= 1
        last = q + 1
        high = self.state.dispatched_pos
        while last < hi_q and last - q < self.REPAIR_WALK:
            ((p, n, _c),) = cq.read_units(last, 1) or [(-1, 0, 0)]
            if n != 1 and self._names_record(p, n, queue_id, last):
                high = p
                break
            last += 1
        found: dict[int, tuple[int, int, int]] = {}
        damage: list[Any] = []
        for seg, pos, _size in self.commitlog.scan(low, high, True, damage):
            req = decode_dispatch(seg.view, pos, self.config.delay_ms)
            if (
                (req.topic, req.queue_id) == (topic, queue_id)
                and first <= req.consume_queue_offset < last
                and not self.topics.hides(topic, req.commit_log_offset)
            ):
                found[req.consume_queue_offset] = (
                    req.commit_log_offset, req.msg_size, req.tags_code
                )  # fmt: skip
        holes = [d.start for d in damage] or [low]
        for off in range(first, last):
            cq.put_units(off, [found.get(off, (holes[0], 1, 0))])
        log.warning(
            "consume queue %s/%d: units %d..%d named no record; rebuilt from the "
            "log [%d, %d): %d found, %d damaged (placeholders)", topic, queue_id,
            first, last - 1, low, high, len(found), last - first - len(found),
        )  # fmt: skip
        return last - first

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.cqs.get(topic, queue_id).min_offset()

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next logical offset of a queue (its message count, nothing purged)."""
        return self.cqs.get(topic, queue_id).max_offset()

    def flush_derived(self) -> None:
        """Flush consume queues and index; record their progress in the checkpoint."""
        recovery.write_progress(self.parts)

    # -- lifecycle -----------------------------------------------------------
    def close(self) -> None:
        """Flush and close; the last process to close marks a clean shutdown."""
        if self.closed:
            return
        if self.state.forked:
            # A copy inherited through fork: the parent still has the store
            # open, owns its locks and flushes it. Drop the copy, touch nothing.
            self.closed = True
            self.cqs.close()
            self.index.close()
            self.commitlog.close()
            self.state.close()
            return
        self.scrubber.stop()
        self.flusher.stop()
        try:
            self.consumer_offsets.persist()
        except StoreError:
            log.exception("consumer offsets could not be written at close")
        with self.state.append_lock:
            try:
                self.repair_dispatch()
                self.flusher.flush_log()
                self.flush_derived()
            except StoreError:
                # A full or failing disk: close anyway. The abort marker stays,
                # so the next open runs the abnormal recovery it needs.
                log.exception("the store could not be flushed at close")
            else:
                if self.state.try_exclusive_presence():
                    remove_abort(self.root)
            self.closed = True
            self.cqs.close()
            self.index.close()
            self.commitlog.close()
        self.state.close()
