"""Processes for the multi-process and crash tests: ``python _workers.py CMD ...``.

produce STORE PRODUCER COUNT FLUSH [ACK_FILE]: send COUNT messages to topic "MP"
(bodies "PRODUCER:i", alternately single sends and batches of 7); after each
send returns, append the acknowledged sequence numbers to ACK_FILE.
COUNT of -1 sends until killed. Exits with os._exit so nothing is closed
cleanly when the test wants a crash-like end (``--no-close``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from broker_core import Broker, Message  # noqa: E402

SMALL = {
    "segment_size": 64 * 1024,
    "cq_units_per_file": 256,
    "index_slots": 1024,
    "index_entries": 8192,
    "flush_interval_ms": 50,
}


def produce(
    store: str, producer: str, count: int, flush: str, ack: str | None, close: bool
) -> None:
    b = Broker.open(store, flush=flush, **SMALL)
    fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if ack else None
    i = 0
    while count < 0 or i < count:
        n = 1 if (i // 7) % 2 == 0 else min(7, count - i if count >= 0 else 7)
        msgs = [
            Message(
                "MP",
                f"{producer}:{i + k}".encode() + b"." * (i % 50),
                keys=f"{producer}-{i + k}",
            )
            for k in range(n)
        ]
        if n == 1:
            b.send(msgs[0])
        else:
            b.send_batch(msgs)
        if fd is not None:
            os.write(fd, "".join(f"{i + k}\n" for k in range(n)).encode())
        i += n
    if close:
        b.close()
    os._exit(0)


if __name__ == "__main__":
    cmd, store, producer, count, flush, *rest = sys.argv[1:]
    ack = rest[0] if rest and rest[0] != "-" else None
    produce(store, producer, int(count), flush, ack, "--no-close" not in rest)
