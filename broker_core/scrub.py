"""The background scrubber: re-checks the whole log slowly in a running broker.

Disks rot where nobody reads. With ``scrub_interval_s`` set, a thread CRC-checks
every record from the first segment to the end, at most ``scrub_bytes_per_s``,
once per interval. A damaged range it finds is copied to ``quarantine/`` and
logged at once; reads already refuse damaged records, and the next recovery or
``verify --repair`` lays the filler over it (the log is not rewritten under
other processes' feet).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from broker_core.commitlog import Damage
from broker_core.errors import BrokerError
from broker_core.parts import StoreParts

log = logging.getLogger(__name__)


class Scrubber:
    """Owns the scrub thread of one open store."""

    def __init__(self, parts: StoreParts, is_closed: Callable[[], bool]) -> None:
        self.parts = parts
        self._is_closed = is_closed
        self.interval = parts.config.scrub_interval_s
        self.rate = max(1, parts.config.scrub_bytes_per_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: What the last complete pass found: (finished at, bytes, new ranges).
        self.last_pass: tuple[float, int, list[Damage]] | None = None

    def start(self) -> None:
        if self.interval <= 0:
            return
        self._thread = threading.Thread(
            target=self._run, name="broker-core-scrub", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.scrub_once()
            except BrokerError:
                log.exception("scrub pass failed")

    def scrub_once(self) -> list[Damage]:
        """Check the log once, throttled; return the damaged ranges found new."""
        parts = self.parts
        log_ = parts.commitlog
        end = parts.state.dispatched_pos
        damage: list[Damage] = []
        started = time.monotonic()
        checked = 0
        start = log_.first_offset()
        for _seg, _pos, size in log_.scan(start, end, True, damage, trust=False):
            checked += size
            if self._stop.is_set() or self._is_closed():
                return []
            ahead = checked / self.rate - (time.monotonic() - started)
            if ahead > 0.05:
                time.sleep(ahead)
        new = [d for d in damage if not parts.quarantine.known(d.start)]
        for d in new:
            seg = log_.segments.segment(d.start)
            stop = d.end if d.end > 0 else d.start
            data = b""
            if seg is not None:
                data = bytes(seg.view[d.start - seg.base : stop - seg.base])
            log.error("scrubber: damaged log range [%d, %d)", d.start, d.end)
            parts.quarantine.add(
                d.start,
                data,
                len(data),
                "found by the scrubber: checks failed",
                seg.path.name if seg is not None else "",
                "reported",
            )
        self.last_pass = (time.time(), checked, new)
        return new
