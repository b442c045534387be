"""Client message ids (``UNIQ_KEY``, RocketMQ ``MessageClientIDSetter``).

16 bytes as 32 uppercase hex digits: IPv4 address, pid (short), a per-process
random int, milliseconds since the start of the local month (int, wrapping) and
a per-process counter (short).
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import threading
import time


def _local_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


def _month_start_ms(now: float) -> int:
    d = datetime.datetime.fromtimestamp(now)
    start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqKeyGenerator:
    """Generate ``UNIQ_KEY`` values for one process (fork-safe: pid re-checked)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._init()

    def _init(self) -> None:
        self._pid = os.getpid()
        fixed = _local_ip() + struct.pack(
            ">hi", self._pid & 0x7FFF, random.getrandbits(31)
        )
        self._prefix = fixed.hex().upper()
        now = time.time()
        self._month_start = _month_start_ms(now)
        self._next_month = _month_start_ms(
            (
                datetime.datetime.fromtimestamp(now).replace(day=28)
                + datetime.timedelta(days=5)
            ).timestamp()
        )
        self._counter = random.getrandbits(15)

    def next(self, now_ms: int | None = None) -> str:
        """Return a new id."""
        if os.getpid() != self._pid:
            self._init()
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms >= self._next_month:
            self._init()
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFF
            c = self._counter
        diff = ms - self._month_start
        if -1_000_000 < diff < 0:
            diff = 0
        return f"{self._prefix}{diff & 0xFFFFFFFF:08X}{c:04X}"

    def next_many(self, n: int, now_ms: int) -> list[str]:
        """Return ``n`` new ids sharing one timestamp (for batches)."""
        if os.getpid() != self._pid or now_ms >= self._next_month:
            self._init()
        with self._lock:
            c0 = self._counter
            self._counter = (c0 + n) & 0xFFFF
        diff = now_ms - self._month_start
        if -1_000_000 < diff < 0:
            diff = 0
        head = f"{self._prefix}{diff & 0xFFFFFFFF:08X}"
        return [f"{head}{(c0 + i + 1) & 0xFFFF:04X}" for i in range(n)]
