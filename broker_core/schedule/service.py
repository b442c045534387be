"""``DelayService``: delivers delay-level and timer messages when due, exactly once.

Level messages sit in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with their due
time in the consume-queue tag field; each level is delivered in queue order
(RocketMQ ``ScheduleMessageService``). Timer messages sit in
``rmq_sys_wheel_timer`` queue 0; a per-process ``TimerWheel`` built from that
queue hands out the due ones. Every delivered copy carries ``DELAY_SRC`` naming
the record it delivers, so delivery progress is derivable from the log: the
progress file (``progress.py``) is a cache, and a process that takes over
delivery (after a crash, or from another process) replays the log from the
file's ``logPos`` before delivering anything. A put that fails leaves the same
messages pending; they are retried after a back-off, never skipped.

One process delivers at a time (``config/delaySchedule.lock``, an ``flock``
released by the kernel if the holder dies).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from broker_core.broker import Broker
from broker_core.errors import (
    BrokerError,
    MessageNotFoundError,
    RecallError,
    ReplicaReadOnlyError,
    TopicExistsError,
)
from broker_core.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageInner,
    PutResult,
    SendResult,
)
from broker_core.schedule.browse import ScheduleBrowser
from broker_core.schedule.progress import Progress, ProgressFile, RangeSet
from broker_core.schedule.results import (
    DelayStats,
    DeliveryResult,
    RecallResult,
    ScheduledMessage,
    ScheduleKind,
)
from broker_core.schedule.rewrite import (
    PROPERTY_DELAY_SRC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_PROPERTIES,
    install_send_hook,
    schedule_properties,
)
from broker_core.schedule.wheel import TimerEntry, TimerWheel
from broker_core.shared import FileLock
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC

log = logging.getLogger(__name__)

PutBatch = Callable[[Sequence[MessageInner]], list[PutResult]]
_DROP_ON_DELIVERY = (PROPERTY_DELAY, *TIMER_PROPERTIES)


def wall_ms() -> int:
    return int(time.time() * 1000)


class DelayService:
    """Schedules and delivers delayed messages of one open ``Broker``.

    ``max_delay_ms`` bounds timer delays (default: the store's
    ``timer_max_delay_s``, RocketMQ's 3 days); ``bucket_ms`` is the
    timer wheel's bucket width; ``batch_size`` bounds one put of delivered
    copies; ``poll_ms`` is how often ``deliver_due`` looks for new due messages
    inside its budget; ``persist_interval_ms`` how often progress is saved
    while delivering (it is always saved when ``deliver_due`` returns).
    ``install_hook`` registers the send hook that parks ``DELAY`` / timer sends.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        max_delay_ms: int | None = None,
        bucket_ms: int = 100,
        batch_size: int = 512,
        poll_ms: int = 10,
        persist_interval_ms: int = 1000,
        install_hook: bool = True,
    ) -> None:
        self.broker = broker
        self.store = broker.store
        #: asked before each pass: False holds every delivery (a cluster
        #: node sets it: a SYNC group short of its in-sync copies)
        self.may_deliver: Callable[[], bool] | None = None
        self.levels_ms = list(self.store.config.delay_levels_ms)
        if max_delay_ms is None:
            max_delay_ms = self.store.config.timer_max_delay_s * 1000
        self.max_delay_ms = max_delay_ms
        self.batch_size = max(1, batch_size)
        self.poll_s = poll_ms / 1000
        self.persist_interval_s = persist_interval_ms / 1000
        self._file = ProgressFile(self.store.root / "config")
        self._lock = FileLock(self._file.lock_path)
        self._token = 0
        self.progress = Progress()
        self.wheel = TimerWheel(bucket_ms)
        #: Read-only views for the console (browse.py), given the state above.
        self.browser = ScheduleBrowser(broker, self.levels_ms)
        self._timer_cursor: int | None = None
        #: Effective due time of level messages stored before a clock jump back.
        self._jump_due: dict[tuple[int, int], int] = {}
        self._level_next: dict[int, int] = {}
        self._queue_nums: dict[str, int] = {}
        self._dirty = False
        self._last_persist = time.monotonic()
        self._backoff_until = 0.0
        self._backoff_s = 0.0
        #: After a whole pass: the log's end it saw, and the next due time it
        #: left (None: nothing pending). Until the log grows or that time
        #: comes a pass has nothing to do, and is skipped.
        self._quiet: tuple[int, int | None] | None = None
        self.last_error: str | None = None
        #: The put used for deliveries; a test may wrap it to inject faults.
        self.put_batch: PutBatch = self.store.put_inner_batch
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ensure_topics()
        if install_hook:
            install_send_hook(broker, max_delay_ms)

    # -- setup ---------------------------------------------------------------
    def _ensure_topics(self) -> None:
        store = self.store
        if store.replica:
            return  # a slave's topics are its master's (the config sync)
        if store.topic_config(TIMER_TOPIC) is None:
            try:
                store.create_topic(TIMER_TOPIC, 1)
            except TopicExistsError:
                pass  # made meanwhile by another process
        cfg = store.topic_config(SCHEDULE_TOPIC)
        if cfg is not None and cfg.queue_nums < len(self.levels_ms):
            n = len(self.levels_ms)
            store.update_topic(SCHEDULE_TOPIC, read_queue_nums=n, write_queue_nums=n)

    # -- taking over: load, correct, replay the log --------------------------
    def _sync(self, claim: bool = True) -> None:
        """Make ``progress`` current (lock held); with ``claim``, take over delivery.

        A read-only caller (stats, browsing) does not claim, so the delivering
        process keeps its in-memory state instead of reloading after each look.
        """
        if self._token and self._file.read_token() == self._token:
            return
        loaded = self._file.load()
        if loaded is None:
            loaded = Progress()
        if loaded.log_pos < 0:
            loaded.log_pos = self._first_schedule_log_pos()
        self._correct(loaded)
        self.progress = loaded
        self._level_next.clear()
        self._replay(loaded.log_pos)
        if not claim:
            self._token = 0
            return
        self._token = secrets.randbits(63) | 1
        self._file.write_token(self._token)
        self._dirty = True

    def _first_schedule_log_pos(self) -> int:
        """Where a rebuild without a progress file starts: the oldest parked record."""
        store = self.store
        firsts = []
        queues = [(SCHEDULE_TOPIC, q) for q in range(len(self.levels_ms))] + [
            (TIMER_TOPIC, 0)
        ]
        for topic, q in queues:
            lo = store.min_offset(topic, q)
            if store.max_offset(topic, q) > lo:
                units = store.get_queue_units(topic, q, lo, 1)
                if units:
                    firsts.append(units[0][0])
        return min(firsts) if firsts else store.max_physical_offset()

    def _correct(self, p: Progress) -> None:
        """Clamp offsets into each queue's [min, max] (``correctDelayOffset``)."""
        store = self.store
        for level in range(1, len(self.levels_ms) + 1):
            lo, hi = (
                store.min_offset(SCHEDULE_TOPIC, level - 1),
                store.max_offset(SCHEDULE_TOPIC, level - 1),
            )
            off = p.offsets.get(level, 0)
            if off < lo or off > hi:
                log.warning(
                    "delay level %d offset %d outside [%d, %d]", level, off, lo, hi
                )
                if off > hi:
                    # Delivered beyond the queue's end: its units were lost.
                    p.lost[level] = max(p.lost.get(level, 0), off)
                off = min(max(off, lo), hi)
            p.offsets[level] = off
            if p.lost.get(level, hi) <= hi:
                p.lost.pop(level, None)  # the queue reaches it again
            dead = p.cancelled.get(level)
            if dead:
                dead.intersection_update(range(off, hi))
        lo, hi = store.min_offset(TIMER_TOPIC, 0), store.max_offset(TIMER_TOPIC, 0)
        if p.timer_low < lo:
            p.set_timer_low(lo)
        if p.timer_low > hi:
            log.warning("timer queue done up to %d beyond its end %d", p.timer_low, hi)
            p.lost[0] = max(p.lost.get(0, 0), p.timer_low)  # 0: the timers
            p.timer_low, p.timer_done = hi, RangeSet()
        if p.lost.get(0, hi) <= hi:
            p.lost.pop(0, None)

    def _replay(self, start: int) -> None:
        """Apply every delivered copy and recall marker from log offset ``start``."""
        end = self.store.max_physical_offset()
        p = self.progress
        for req in self.store.iter_dispatch(start, end):
            src = req.properties.get(PROPERTY_DELAY_SRC)
            if src is None:
                continue
            marker = req.topic == TIMER_TOPIC
            if marker:
                p.mark_timer_done(req.consume_queue_offset)
            elif not self._is_copy_of(src, req.uniq_key):
                continue
            self._apply_src(src, cancel=marker)
        p.log_pos = end

    def _is_copy_of(self, src: str, uniq: str | None) -> bool:
        """True if the parked record named by ``src`` has the message id ``uniq``."""
        kind, _, qoff_s = src.partition(":")
        try:
            qoff = int(qoff_s)
            topic, q = (
                (TIMER_TOPIC, 0) if kind == "T" else (SCHEDULE_TOPIC, int(kind[1:]) - 1)
            )
            units = self.store.get_queue_units(topic, q, qoff, 1)
            if not units:
                return False
            parked = self.store.read_message(units[0][0])
        except (ValueError, BrokerError):
            return False
        return parked.properties.get(PROPERTY_UNIQ_KEY) == uniq

    def _apply_src(self, src: str, cancel: bool) -> None:
        kind, _, qoff_s = src.partition(":")
        qoff = int(qoff_s)
        if kind == "T":
            self.progress.mark_timer_done(qoff)
        elif cancel:
            self.progress.cancel_level(int(kind[1:]), qoff)
        else:
            self.progress.advance_level(int(kind[1:]), qoff + 1)

    # -- the timer queue into the wheel --------------------------------------
    def _enqueue_timers(self) -> bool:
        """Put the timer queue's new entries in the wheel; whether it left
        some it could not read yet (the next pass must not be skipped)."""
        store, p = self.store, self.progress
        hi = store.max_offset(TIMER_TOPIC, 0)
        cursor = self._timer_cursor
        if cursor is None:
            cursor = max(p.timer_low, store.min_offset(TIMER_TOPIC, 0))
        batch: list[TimerEntry] = []
        # A unit can be seen before its record is readable (another process is
        # between writing the queue and publishing its position): stop there.
        visible = store.max_physical_offset()
        behind = False
        while cursor < hi:
            units = store.get_queue_units(TIMER_TOPIC, 0, cursor, 4096)
            if not units:
                behind = True
                break
            for phys, _size, _code in units:
                if phys >= visible:
                    hi = cursor
                    behind = True
                    break
                qoff = cursor
                if p.timer_is_done(qoff):
                    cursor += 1
                    continue
                try:
                    props = store.read_message(phys).properties
                except MessageNotFoundError:
                    # Not readable yet from this process: take it next pass
                    # (which is not skipped as idle).
                    hi = cursor
                    behind = True
                    break
                cursor += 1
                src = props.get(PROPERTY_DELAY_SRC)
                if src is not None:  # a recall marker
                    p.mark_timer_done(qoff)
                    self._apply_src(src, cancel=True)
                    self._dirty = True
                    continue
                batch.append((int(props.get(PROPERTY_TIMER_OUT_MS, "0")), qoff, phys))
        self._timer_cursor = cursor
        if len(batch) > 64:
            self.wheel.add_unsorted(batch)
        else:
            for entry in batch:
                self.wheel.add(entry)
        return behind

    # -- delivering ----------------------------------------------------------
    def _copy(self, m: MessageExt, src: str, timer: bool, now_ms: int) -> MessageInner:
        """Build the message delivered to the real topic and queue."""
        props = {k: v for k, v in m.properties.items() if k not in _DROP_ON_DELIVERY}
        topic = props.get(PROPERTY_REAL_TOPIC, m.topic)
        qid = int(props.get(PROPERTY_REAL_QID, "0"))
        if timer:
            # RocketMQ 5 drops REAL_TOPIC/REAL_QID from timers; levels keep them.
            props.pop(PROPERTY_REAL_TOPIC, None)
            props.pop(PROPERTY_REAL_QID, None)
            props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
        props[PROPERTY_DELAY_SRC] = src
        nq = self._queue_nums.get(topic)
        if nq is None:
            cfg = self.store.topic_config(topic)
            nq = self._queue_nums[topic] = 0 if cfg is None else cfg.queue_nums
        if nq and not 0 <= qid < nq:
            # The topic shrank since the send: use a queue that exists rather
            # than leave the message stuck forever (RocketMQ #4226).
            qid %= nq
        return MessageInner(
            topic=topic,
            queue_id=qid,
            body=m.body,
            properties=props,
            flag=m.flag,
            sysflag=m.sysflag,
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
            reconsume_times=m.reconsume_times,
        )

    def _level_due(self, level: int, qoff: int, due: int, now: int) -> int:
        """Return the effective due time of a level message.

        A due time further ahead than the level's delay means the clock went back
        after the message was stored (RocketMQ ``correctDeliverTimestamp``): the
        message then waits one full delay from when that is first noticed.
        """
        delay = self.levels_ms[level - 1]
        if due > now + delay:
            return self._jump_due.setdefault((level, qoff), now + delay)
        return due

    def _put(self, copies: list[MessageInner]) -> None:
        self.put_batch(copies)

    def _deliver_level(self, level: int, now: int, res: DeliveryResult) -> None:
        store, p, q = self.store, self.progress, level - 1
        cached = self._level_next.get(level)
        if cached is not None and cached > now:
            return
        while True:
            off = p.level_offset(level)
            if store.max_offset(SCHEDULE_TOPIC, q) <= off:
                self._level_next.pop(level, None)
                return
            units = store.get_queue_units(SCHEDULE_TOPIC, q, off, self.batch_size)
            if not units:
                return
            cancelled = p.cancelled.get(level, ())
            copies: list[MessageInner] = []
            next_off = off
            blocked = None
            visible = store.max_physical_offset()
            for phys, _size, due in units:
                if phys >= visible:
                    break
                if next_off not in cancelled:
                    eff = self._level_due(level, next_off, due, now)
                    if eff > now:
                        blocked = eff
                        break
                    src = f"L{level}:{next_off}"
                    copies.append(self._copy(store.read_message(phys), src, False, now))
                next_off += 1
            if copies:
                self._put(copies)
                for o in range(off, next_off):
                    self._jump_due.pop((level, o), None)
                res.levels_delivered += len(copies)
                res.delivered += len(copies)
                p.count_delivered(now, len(copies))
            if next_off > off:
                p.advance_level(level, next_off)
                self._dirty = True
            if blocked is not None:
                self._level_next[level] = blocked
                return
            if next_off - off < len(units) or len(units) < self.batch_size:
                return  # a record not yet readable, or the queue's end

    def _deliver_timers(self, now: int, res: DeliveryResult) -> None:
        p, store = self.progress, self.store

        def done(e: TimerEntry) -> bool:
            return p.timer_is_done(e[1])

        while True:
            entries = self.wheel.pop_due(now, self.batch_size, done)
            if not entries:
                return
            try:
                copies = [
                    self._copy(store.read_message(phys), f"T:{qoff}", True, now)
                    for _due, qoff, phys in entries
                ]
                self._put(copies)
            except Exception:
                for e in entries:
                    self.wheel.add(e)
                raise
            for e in entries:
                p.mark_timer_done(e[1])
            res.timers_delivered += len(entries)
            res.delivered += len(entries)
            p.count_delivered(now, len(entries))
            self._dirty = True

    def _pass(self, now: int, res: DeliveryResult, may_skip: bool = False) -> None:
        res.passes += 1
        if time.monotonic() < self._backoff_until:
            return
        if self.may_deliver is not None and not self.may_deliver():
            return  # e.g. too few in-sync copies: nothing stored on one alone
        # Nothing appended anywhere (by any process: the shared end of the
        # log) since the last whole pass, and nothing due yet: no level or
        # timer has anything new. An idle broker's passes (every poll_ms)
        # then cost one read, not a lock, a token read and a look at every
        # level's queue (6% of a core, idle).
        pos = self.store.max_physical_offset()
        quiet = self._quiet
        if (
            may_skip
            and quiet is not None
            and quiet[0] == pos
            and (quiet[1] is None or now < quiet[1])
        ):
            return
        self._quiet = None
        with self._lock:
            self._queue_nums = {}  # topic -> queue count, looked up once a pass
            try:
                self._sync()
                behind = self._enqueue_timers()
                for level in range(1, len(self.levels_ms) + 1):
                    self._deliver_level(level, now, res)
                self._deliver_timers(now, res)
                if not behind:
                    self._quiet = (pos, self.next_due_ms())
            except Exception as exc:
                # Nothing is skipped: drop the in-memory view (the next pass
                # rebuilds it from the progress file and the log) and back off.
                if isinstance(exc, ReplicaReadOnlyError):
                    # A slave, or a master without its controller lease.
                    log.warning("delayed delivery paused: %s", exc)
                else:
                    log.exception("delayed delivery failed; retrying the same messages")
                res.failures += 1
                self.last_error = res.last_error = f"{type(exc).__name__}: {exc}"
                self._token = 0
                self._timer_cursor = None
                self.wheel = TimerWheel(self.wheel.bucket_ms)
                self._backoff_s = min(max(self._backoff_s * 2, 0.1), 10.0)
                self._backoff_until = time.monotonic() + self._backoff_s
                return
            self._backoff_s = 0.0
            if (
                self._dirty
                and time.monotonic() - self._last_persist >= self.persist_interval_s
            ):
                self._persist()

    def _persist(self) -> None:
        """Save progress (lock held), once the copies it reflects are on disk."""
        store = self.store
        pos = store.max_physical_offset()
        store.flusher.wait_flushed(store.state.commit_pos, 5.0)
        self.progress.log_pos = pos
        self._file.save(self.progress)
        self._dirty = False
        self._last_persist = time.monotonic()

    def next_due_ms(self) -> int | None:
        """Return the earliest due time of anything pending, as this process knows."""
        cands = [v for v in self._level_next.values()]
        for level in range(1, len(self.levels_ms) + 1):
            if level not in self._level_next:
                off = self.progress.level_offset(level)
                if self.store.max_offset(SCHEDULE_TOPIC, level - 1) > off:
                    return wall_ms()
        nxt = self.wheel.next_due()
        if nxt is not None:
            cands.append(nxt)
        return min(cands) if cands else None

    def deliver_due(
        self, now_ms: int | None = None, budget_s: float = 0.0
    ) -> DeliveryResult:
        """Deliver everything due; with ``budget_s`` keep delivering until it runs out.

        With ``now_ms`` (an injected clock) one pass runs at that time. With a
        budget the call polls every ``poll_ms`` and sleeps until each due time,
        so deliveries inside the window are on time to within a few ms.
        """
        started = time.monotonic()
        deadline = started + budget_s
        res = DeliveryResult()
        while True:
            before = res.delivered
            # Skipped when idle on the wall clock only (an injected clock
            # is a test's: each of its passes runs).
            self._pass(wall_ms() if now_ms is None else now_ms, res, now_ms is None)
            if now_ms is not None or budget_s <= 0:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if res.delivered > before:
                continue  # more may have become due meanwhile
            wait = self.poll_s
            # The due time the last whole pass left (if it still stands, a
            # skipped pass changed nothing), else a look at every level.
            quiet = self._quiet
            nxt = self.next_due_ms() if quiet is None else quiet[1]
            if nxt is not None:
                wait = min(wait, max(0.0005, (nxt - time.time() * 1000) / 1000))
            backoff = self._backoff_until - time.monotonic()
            if backoff > 0:
                wait = backoff
            if self._stop.wait(min(wait, remaining)):
                break  # stop(): a shutdown does not wait out the budget
        with self._lock:
            if self._dirty and self._token and self._file.read_token() == self._token:
                self._persist()
            res.next_due_ms = self.next_due_ms()
        res.elapsed_s = time.monotonic() - started
        return res

    # -- embedded use --------------------------------------------------------
    # -- sending -------------------------------------------------------------
    def send_delayed(
        self,
        message: Message,
        *,
        level: int | None = None,
        deliver_at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> SendResult:
        """Send ``message`` for later delivery: a level, an absolute time or a delay.

        Exactly one of the three must be given. Raises ``InvalidDelayError``
        (negative, beyond ``max_delay_ms``, none or several given) and the send
        errors of ``Broker.send``.
        """
        props = dict(message.properties or {})
        props.update(schedule_properties(level, deliver_at_ms, delay_ms))
        msg = Message(
            message.topic,
            message.body,
            message.tags,
            message.keys,
            props,
            message.queue_id,
            message.flag,
        )
        return self.broker.send(msg)

    # -- recall --------------------------------------------------------------
    def recall(self, msg_id: str) -> RecallResult:
        """Cancel a scheduled message (level or timer) before it is delivered.

        ``msg_id`` is its UNIQ_KEY or offset id. Raises ``RecallError`` if no
        such scheduled message exists or it was already delivered or recalled.
        """
        with self._lock:
            self._sync()
            m = self.browser.find(msg_id)
            p = self.progress
            uniq = m.properties.get(PROPERTY_UNIQ_KEY, m.offset_msg_id)
            real = m.properties.get(PROPERTY_REAL_TOPIC, "")
            if m.topic == SCHEDULE_TOPIC:
                level, qoff = m.queue_id + 1, m.queue_offset
                if qoff in p.cancelled.get(level, ()):
                    raise RecallError(f"message {msg_id!r} was already recalled")
                if not p.level_pending(level, qoff):
                    raise RecallError(f"message {msg_id!r} was already delivered")
                src, kind = f"L{level}:{qoff}", ScheduleKind.LEVEL
                due = m.store_timestamp + self.levels_ms[level - 1]
            else:
                level, qoff = 0, m.queue_offset
                if p.timer_is_done(qoff):
                    raise RecallError(
                        f"message {msg_id!r} was already delivered or recalled"
                    )
                src, kind = f"T:{qoff}", ScheduleKind.TIMER
                due = int(m.properties.get(PROPERTY_TIMER_OUT_MS, "0"))
            marker = MessageInner(
                topic=TIMER_TOPIC,
                queue_id=0,
                body=b"recall",
                properties={
                    PROPERTY_TIMER_DEL_UNIQKEY: f"{real}+{uniq}",
                    PROPERTY_DELAY_SRC: src,
                },
            )
            put = self.store.put_inner(marker)
            p.mark_timer_done(put.queue_offset)
            self._apply_src(src, cancel=True)
            self._level_next.pop(level, None)
            self._persist()
        return RecallResult(msg_id, kind, level, due, real)

    # -- console -------------------------------------------------------------
    def stats(self, now_ms: int | None = None) -> DelayStats:
        """Return per-level and timer statistics (see ``DelayStats``)."""
        with self._lock:
            self._sync(claim=False)
            self._enqueue_timers()
            now = wall_ms() if now_ms is None else now_ms
            return self.browser.stats(
                self.progress, self.wheel, now, self._level_due, self.last_error
            )

    def list_scheduled(
        self,
        kind: ScheduleKind | str | None = None,
        level: int | None = None,
        limit: int = 50,
        start: int = 0,
    ) -> list[ScheduledMessage]:
        """Return pending scheduled messages, earliest due first (for browsing)."""
        with self._lock:
            self._sync(claim=False)
            self._enqueue_timers()
            return self.browser.scheduled(
                self.progress, self.wheel, kind, level, limit, start
            )

    def start(self) -> None:
        """Deliver in a background thread until ``stop()`` (embedded brokers)."""
        if self._thread is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.deliver_due(budget_s=0.5)
                except Exception:
                    log.exception("delay delivery loop failed")
                    self._stop.wait(1.0)

        self._thread = threading.Thread(target=run, name="delay-service", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None

    def close(self) -> None:
        """Stop delivering and save progress; the broker stays open."""
        self.stop()
        with self._lock:
            if self._dirty and self._token and self._file.read_token() == self._token:
                self._persist()
        self._file.close()
        self._lock.close()
