"""Delivery progress of the schedule service, persisted atomically.

``{root}/config/delayOffset.json`` keeps RocketMQ's ``offsetTable`` (level ->
next consume-queue offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``) and
adds what RocketMQ lacks: recalled level offsets, the timer queue's done set
(a low-water mark plus the offsets above it already delivered or recalled),
per-minute delivery counts, ``logPos``, the commit-log position up to which
every delivered copy and recall marker is reflected in the file, and
``unitsLostUpTo`` (only when a level's queue was found shorter than its
delivered offset: ``Progress.lost``).

The file is a cache of what the log says: each delivered copy and each recall
marker carries ``DELAY_SRC``, so whatever happened after ``logPos`` (a process
killed between its puts and its persist) is recovered by scanning the log from
there. ``{root}/config/delaySchedule.token`` holds 8 random bytes rewritten by
whichever process last took over delivery; a process whose own token is still
there knows nobody else changed the progress since it last looked.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.metadata import atomic_write_json

PROGRESS_FILE = "delayOffset.json"
TOKEN_FILE = "delaySchedule.token"
LOCK_FILE = "delaySchedule.lock"
_TOKEN = struct.Struct("<Q")
#: fastjson writes integer map keys unquoted (``{1:35}``); quote them for ``json``.
_BARE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")
_MINUTES_KEPT = 60


def _ranges(values: set[int]) -> list[list[int]]:
    """Compress a set of ints to sorted ``[first, last]`` runs."""
    out: list[list[int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


def _unranges(runs: list[list[int]]) -> set[int]:
    out: set[int] = set()
    for first, last in runs:
        out.update(range(int(first), int(last) + 1))
    return out


class RangeSet:
    """A set of ints kept as sorted disjoint runs ``[first, last]``.

    Timers finish roughly in due order, not queue order: above the low-water
    mark the done offsets are long runs broken by the still-pending ones, so
    memory is proportional to the pending timers, not to the delivered ones.
    """

    __slots__ = ("starts", "ends")

    def __init__(self, runs: list[list[int]] | None = None) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for first, last in sorted((int(a), int(b)) for a, b in runs or []):
            if self.ends and first <= self.ends[-1] + 1:
                self.ends[-1] = max(self.ends[-1], last)
            else:
                self.starts.append(first)
                self.ends.append(last)

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self.starts, x) - 1
        return i >= 0 and x <= self.ends[i]

    def __len__(self) -> int:
        return sum(e - s + 1 for s, e in zip(self.starts, self.ends, strict=True))

    def add(self, x: int) -> None:
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(starts, x) - 1
        if i >= 0 and x <= ends[i]:
            return
        left = i >= 0 and ends[i] == x - 1
        right = i + 1 < len(starts) and starts[i + 1] == x + 1
        if left and right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif left:
            ends[i] = x
        elif right:
            starts[i + 1] = x
        else:
            starts.insert(i + 1, x)
            ends.insert(i + 1, x)

    def drop_below(self, low: int) -> None:
        """Forget values below ``low``."""
        i = bisect.bisect_right(self.ends, low - 1)
        del self.starts[:i], self.ends[:i]
        if self.starts and self.starts[0] < low:
            self.starts[0] = low

    def first_run(self) -> tuple[int, int] | None:
        return (self.starts[0], self.ends[0]) if self.starts else None

    def pop_first_run(self) -> None:
        del self.starts[0], self.ends[0]

    def runs(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self.starts, self.ends, strict=True)]


@dataclass
class Progress:
    """What has been delivered or recalled, as of commit-log position ``log_pos``."""

    offsets: dict[int, int] = field(default_factory=dict)
    cancelled: dict[int, set[int]] = field(default_factory=dict)
    timer_low: int = 0
    timer_done: RangeSet = field(default_factory=RangeSet)
    log_pos: int = -1
    delivered: dict[int, int] = field(default_factory=dict)
    #: level (0: the timer queue) -> the offset it had delivered up to when
    #: its queue was found ending below that (units lost: a deleted or cut
    #: consume queue; the offset was then moved back to the end). Kept while
    #: the queue ends below it, so every process's figures show the loss.
    lost: dict[int, int] = field(default_factory=dict)

    # -- levels --------------------------------------------------------------
    def level_offset(self, level: int) -> int:
        return self.offsets.get(level, 0)

    def level_pending(self, level: int, queue_offset: int) -> bool:
        """True if the level message at ``queue_offset`` is still to deliver."""
        return queue_offset >= self.level_offset(
            level
        ) and queue_offset not in self.cancelled.get(level, ())

    def advance_level(self, level: int, next_offset: int) -> None:
        if next_offset > self.level_offset(level):
            self.offsets[level] = next_offset
            dead = self.cancelled.get(level)
            if dead:
                dead.difference_update([o for o in dead if o < next_offset])
                if not dead:
                    del self.cancelled[level]

    def cancel_level(self, level: int, queue_offset: int) -> None:
        if queue_offset >= self.level_offset(level):
            self.cancelled.setdefault(level, set()).add(queue_offset)

    # -- timers --------------------------------------------------------------
    def timer_is_done(self, queue_offset: int) -> bool:
        return queue_offset < self.timer_low or queue_offset in self.timer_done

    def mark_timer_done(self, queue_offset: int) -> None:
        if queue_offset < self.timer_low:
            return
        self.timer_done.add(queue_offset)
        first = self.timer_done.first_run()
        if first is not None and first[0] == self.timer_low:
            self.timer_low = first[1] + 1
            self.timer_done.pop_first_run()

    def set_timer_low(self, low: int) -> None:
        """Move the low-water mark (a queue whose head was removed)."""
        self.timer_low = low
        self.timer_done.drop_below(low)

    # -- counters ------------------------------------------------------------
    def count_delivered(self, now_ms: int, n: int) -> None:
        minute = now_ms // 60_000
        self.delivered[minute] = self.delivered.get(minute, 0) + n
        if len(self.delivered) > _MINUTES_KEPT:
            for m in sorted(self.delivered)[:-_MINUTES_KEPT]:
                del self.delivered[m]

    # -- persistence ---------------------------------------------------------
    def to_json(self) -> dict[str, object]:
        lost = {str(k): v for k, v in sorted(self.lost.items())}
        return {
            "offsetTable": {str(k): v for k, v in sorted(self.offsets.items())},
            "cancelled": {
                str(k): _ranges(v) for k, v in sorted(self.cancelled.items()) if v
            },
            "timerLow": self.timer_low,
            "timerDone": self.timer_done.runs(),
            "logPos": self.log_pos,
            "deliveredPerMinute": {
                str(k): v for k, v in sorted(self.delivered.items())
            },
            **({"unitsLostUpTo": lost} if lost else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Progress:
        def table(name: str) -> dict[int, object]:
            raw = data.get(name) or {}
            assert isinstance(raw, dict)
            return {int(k): v for k, v in raw.items()}

        done = data.get("timerDone") or []
        assert isinstance(done, list)
        p = cls(
            offsets={k: int(v) for k, v in table("offsetTable").items()},  # type: ignore[call-overload]
            cancelled={k: _unranges(v) for k, v in table("cancelled").items()},  # type: ignore[arg-type]
            timer_low=int(data.get("timerLow", 0)),  # type: ignore[call-overload]
            timer_done=RangeSet(done),
            log_pos=int(data.get("logPos", -1)),  # type: ignore[call-overload]
            delivered={k: int(v) for k, v in table("deliveredPerMinute").items()},  # type: ignore[call-overload]
            lost={k: int(v) for k, v in table("unitsLostUpTo").items()},  # type: ignore[call-overload]
        )
        return p


class ProgressFile:
    """The progress JSON and the takeover token of one store's ``config`` directory."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / PROGRESS_FILE
        self.lock_path = config_dir / LOCK_FILE
        self._token_fd = os.open(config_dir / TOKEN_FILE, os.O_RDWR | os.O_CREAT, 0o644)

    def load(self) -> Progress | None:
        """Return the persisted progress; None if missing or unreadable."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
            return Progress.from_json(data)
        except (ValueError, TypeError, AssertionError):
            # A damaged cache: the caller rebuilds from the log.
            return None

    def save(self, progress: Progress) -> None:
        """Persist atomically (temporary file, fsync, rename, fsync the directory)."""
        atomic_write_json(self.path, progress.to_json())

    def read_token(self) -> int:
        raw = os.pread(self._token_fd, _TOKEN.size, 0)
        return _TOKEN.unpack(raw)[0] if len(raw) == _TOKEN.size else 0

    def write_token(self, token: int) -> None:
        os.pwrite(self._token_fd, _TOKEN.pack(token), 0)

    def close(self) -> None:
        os.close(self._token_fd)
