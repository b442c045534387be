"""Records built byte for byte as the store writes them, for the unit tests.

``record_at`` encodes a record that names its own commit-log offset and ends
with the ``__CRC32#`` record CRC (``record.prop_crc``), like every record the
store appends; ``fill_log`` appends records to a ``CommitLog`` the way the
append path does (a blank ends a segment a record does not fit).
"""

from __future__ import annotations

import zlib
from pathlib import Path

from broker_core.commitlog import CommitLog
from broker_core.message import encode_properties
from broker_core.record import HEADER_SIZE, PROP_CRC_SIZE, encode_record, prop_crc

BORN_HOST = b"\x0a\x00\x00\x01"
STORE_HOST = b"\x7f\x00\x00\x01"
STORE_TS = 1_700_000_000_000


def record_at(
    phys: int,
    body: bytes,
    *,
    topic: str = "T",
    queue_id: int = 0,
    queue_offset: int = 0,
    properties: dict[str, str] | None = None,
    store_ts: int = STORE_TS,
    with_crc: bool = True,
) -> bytes:
    """One encoded record at log offset ``phys`` (with its record CRC)."""
    props = encode_properties(properties or {"k": "v"}).encode()
    raw = bytearray(
        encode_record(
            topic=topic.encode(),
            queue_id=queue_id,
            flag=0,
            queue_offset=queue_offset,
            physical_offset=phys,
            sysflag=0,
            born_timestamp=store_ts - 5,
            born_host=BORN_HOST,
            born_port=5555,
            store_timestamp=store_ts,
            store_host=STORE_HOST,
            store_port=10911,
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=body,
            properties=props + (bytes(PROP_CRC_SIZE) if with_crc else b""),
        )
    )
    if with_crc:
        seal(raw, len(body))
    return bytes(raw)


def seal(raw: bytearray, body_len: int) -> None:
    """(Re)compute the ``__CRC32#`` property of an IPv4 record in place."""
    tail = len(raw) - PROP_CRC_SIZE
    suffix_crc = zlib.crc32(raw[HEADER_SIZE + body_len : tail])
    raw[tail:] = prop_crc(zlib.crc32(raw[:HEADER_SIZE], suffix_crc) & 0x7FFFFFFF)


def fill_log(
    log: CommitLog, bodies: list[bytes], start: int = 0, **kw: object
) -> tuple[list[tuple[int, int]], int]:
    """Append one record per body from ``start`` as the store's append path
    does; return each record's ``(offset, size)`` and the end of the data."""
    placed: list[tuple[int, int]] = []
    pos = start
    for i, body in enumerate(bodies):
        probe = record_at(pos, body, queue_offset=i, **kw)  # type: ignore[arg-type]
        if pos + len(probe) + 8 > log.segment_end(pos):
            log.check_fits_segment(len(probe))
            log.write(pos, [log.blank(pos)])
            pos = log.segment_end(pos)
        rec = record_at(pos, body, queue_offset=i, **kw)  # type: ignore[arg-type]
        log.write(pos, [rec])
        placed.append((pos, len(rec)))
        pos += len(rec)
    return placed, pos


def segment_file(root: Path, base: int) -> Path:
    """The path of the commit-log segment whose first offset is ``base``."""
    return root / "commitlog" / f"{base:020d}"


def patch(path: Path, pos: int, data: bytes) -> None:
    """Overwrite bytes of a file in place (a damaged sector, a torn write)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(path: Path, pos: int, mask: int = 0xFF) -> None:
    """XOR one byte of a file with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes((b ^ mask,)))
