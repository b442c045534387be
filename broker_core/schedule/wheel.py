"""The in-memory timer wheel: pending timers bucketed by due time.

A hashed wheel without a fixed size: bucket ``due_ms // bucket_ms`` holds the
timers due in that interval, and a heap holds the keys of the non-empty
buckets. A tick looks only at the buckets at the top of the heap, so its cost
is the number of due timers plus ``log(buckets)``, never the number pending.
Within a bucket timers are kept sorted by due time (sorted on first pop), and a
timer is handed out only once ``now_ms >= due_ms``: never early.

The wheel is derived state: ``DelayService`` rebuilds it from the timer queue.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator

#: One pending timer: (due time ms, queue offset in the timer queue, log offset).
TimerEntry = tuple[int, int, int]


class TimerWheel:
    """Pending timers by due bucket; entries are ``TimerEntry`` tuples."""

    def __init__(self, bucket_ms: int = 100) -> None:
        if bucket_ms < 1:
            raise ValueError("bucket_ms must be at least 1")
        self.bucket_ms = bucket_ms
        self._buckets: dict[int, list[TimerEntry]] = {}
        self._unsorted: set[int] = set()
        self._heap: list[int] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, entry: TimerEntry) -> None:
        """Add a pending timer."""
        key = entry[0] // self.bucket_ms
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [entry]
            heapq.heappush(self._heap, key)
        elif key in self._unsorted:
            bucket.append(entry)
        elif bucket and entry < bucket[-1]:
            bisect.insort(bucket, entry)
        else:
            bucket.append(entry)
        self._count += 1

    def add_unsorted(self, entries: list[TimerEntry]) -> None:
        """Add many timers at once (a rebuild); buckets are sorted when first popped."""
        for entry in entries:
            key = entry[0] // self.bucket_ms
            bucket = self._buckets.get(key)
            if bucket is None:
                self._buckets[key] = [entry]
                heapq.heappush(self._heap, key)
            else:
                bucket.append(entry)
                self._unsorted.add(key)
        self._count += len(entries)

    def _head(self) -> list[TimerEntry] | None:
        while self._heap:
            key = self._heap[0]
            bucket = self._buckets.get(key)
            if bucket:
                if key in self._unsorted:
                    bucket.sort()
                    self._unsorted.discard(key)
                return bucket
            heapq.heappop(self._heap)
            self._buckets.pop(key, None)
        return None

    def next_due(self) -> int | None:
        """Return the earliest due time, or None when empty."""
        head = self._head()
        return head[0][0] if head else None

    def pop_due(
        self, now_ms: int, limit: int, skip: Callable[[TimerEntry], bool] | None = None
    ) -> list[TimerEntry]:
        """Remove and return up to ``limit`` timers due by ``now_ms``, earliest first.

        Entries for which ``skip`` is true (done elsewhere) are dropped silently.
        """
        out: list[TimerEntry] = []
        while len(out) < limit:
            head = self._head()
            if head is None or head[0][0] > now_ms:
                break
            n = bisect.bisect_right(head, (now_ms, 1 << 62, 1 << 62))
            n = min(n, limit - len(out))
            taken = head[:n]
            del head[:n]
            self._count -= n
            if skip is None:
                out.extend(taken)
            else:
                out.extend(e for e in taken if not skip(e))
        return out

    def iter_buckets(self) -> Iterator[tuple[int, list[TimerEntry]]]:
        """Yield (bucket start ms, entries) in no particular order."""
        for key, bucket in self._buckets.items():
            if bucket:
                yield key * self.bucket_ms, bucket

    def earliest(self, limit: int, start: int = 0) -> list[TimerEntry]:
        """Return the timers ``[start, start + limit)`` in due order (for browsing)."""
        out: list[TimerEntry] = []
        need = start + limit
        for key in sorted(k for k, b in self._buckets.items() if b):
            out.extend(sorted(self._buckets[key]))
            if len(out) >= need:
                break
        return out[start:need]
