"""record.py beyond tests/broker_core/test_record.py: blanks and skips, the
``__CRC32#`` record CRC, the read-path checks (``intact``, ``starts_record``,
``names_queue_record``), ``find_record``, IPv6 layouts and host helpers."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest

from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    HEADER_SIZE,
    HEADER_V6,
    MIN_RECORD_SIZE,
    PROP_CRC_SIZE,
    SKIP_MAGIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    RecordCheck,
    check_record,
    decode_buffer,
    decode_offset_msg_id,
    decode_record,
    find_record,
    format_host,
    header_layout,
    intact,
    names_queue_record,
    offset_msg_id,
    parse_host,
    prop_crc,
    starts_record,
)
from tests.broker_core.unit._records import record_at, seal

BODY = b"payload-0123456789"


def status(buf: bytes, pos: int = 0, end: int | None = None, **kw: bool) -> str:
    chk = check_record(buf, pos, len(buf) if end is None else end, **kw)
    return chk.status.value


# -- blanks, skips, ends ------------------------------------------------------


def test_blank_and_skip_markers() -> None:
    blank = BLANK.pack(64, BLANK_MAGIC) + bytes(56)
    assert (status(blank), check_record(blank, 0, 64).size) == ("blank", 64)
    assert status(blank, end=100) == "blank"  # more bytes readable than it covers
    assert status(blank, end=63) == "corrupt"  # it claims more than there is
    assert status(BLANK.pack(4, BLANK_MAGIC) + bytes(8)) == "corrupt"
    skip = BLANK.pack(40, SKIP_MAGIC) + b"\xee" * 32
    assert (status(skip), check_record(skip, 0, 40).size) == ("skip", 40)
    assert status(skip, end=39) == "corrupt"
    assert status(BLANK.pack(7, SKIP_MAGIC) + bytes(8)) == "corrupt"


def test_fewer_than_eight_bytes_or_zeros_are_the_end() -> None:
    rec = record_at(0, BODY)
    assert status(rec, end=7) == "end"
    assert status(rec, pos=len(rec) - 3) == "end"
    assert status(bytes(8)) == "end"
    assert check_record(bytes(64), 0, 64).size == 0


@pytest.mark.parametrize(
    "field_at, value, why",
    [
        (0, MIN_RECORD_SIZE - 1, "total below the smallest record"),
        (0, 10_000, "total past the readable bytes"),
        (4, 0x12345678, "unknown magic"),
        (HEADER_SIZE - 4, -1, "negative body length"),
        (HEADER_SIZE - 4, 10_000, "body longer than the record"),
    ],
)
def test_inconsistent_sizes_are_corrupt(field_at: int, value: int, why: str) -> None:
    raw = bytearray(record_at(0, BODY))
    struct.pack_into(">i", raw, field_at, value)
    assert status(bytes(raw), verify_crc=False) == "corrupt", why


def test_properties_length_must_end_the_record() -> None:
    raw = bytearray(record_at(0, BODY))
    ppos = HEADER_SIZE + len(BODY) + 1 + 1  # topic length byte, topic "T"
    (plen,) = struct.unpack_from(">H", raw, ppos)
    struct.pack_into(">H", raw, ppos, plen - 1)
    assert status(bytes(raw), verify_crc=False) == "corrupt"
    struct.pack_into(">H", raw, ppos, plen)
    assert status(bytes(raw), verify_crc=False) == "ok"


# -- the record CRC --------------------------------------------------------------


def test_prop_crc_layout() -> None:
    p = prop_crc(1234567890)
    assert len(p) == PROP_CRC_SIZE
    assert p == b"__CRC32#\x010987654321\x02"  # digits least significant first
    assert prop_crc(5) == b"__CRC32#\x015000000000\x02"
    rec = record_at(0, BODY, properties={"a": "b"})
    m = decode_record(rec, 0)
    assert m.properties["a"] == "b"
    assert "__CRC32#" not in m.properties  # the log's own, not the user's


def test_every_single_byte_flip_is_caught() -> None:
    rec = record_at(4096, BODY, topic="TopicA", properties={"KEYS": "k1 k2"})
    assert intact(rec, 0, len(rec), 4096)
    assert status(rec, verify_crc=True, require_prop_crc=True) == "ok"
    for i in range(len(rec)):
        for mask in (0x01, 0x80):
            bad = bytearray(rec)
            bad[i] ^= mask
            raw = bytes(bad)
            assert not intact(raw, 0, len(rec), 4096), (i, mask)
            assert status(raw, verify_crc=True, require_prop_crc=True) != "ok", (
                i,
                mask,
            )


def test_header_damage_needs_the_record_crc() -> None:
    """The body CRC covers the body only: a header change (the queue offset)
    passes a record without ``__CRC32#`` and fails one with it."""
    plain = bytearray(record_at(0, BODY, with_crc=False))
    plain[27] ^= 0x01  # queue offset, last byte
    assert status(bytes(plain)) == "ok"
    assert status(bytes(plain), require_prop_crc=True) == "corrupt"
    assert not intact(bytes(plain), 0, len(plain), 0)  # intact requires it
    sealed = bytearray(record_at(0, BODY))
    sealed[27] ^= 0x01
    assert status(bytes(sealed)) == "corrupt"
    # Topic and properties are covered too.
    sealed = bytearray(record_at(0, BODY))
    sealed[HEADER_SIZE + len(BODY) + 1] ^= 0x20  # the topic "T" -> "t"
    assert status(bytes(sealed)) == "corrupt"
    assert status(bytes(sealed), verify_crc=False) == "ok"


def test_a_resealed_change_is_accepted() -> None:
    """The check is a checksum, not a signature: ``seal`` after an edit."""
    raw = bytearray(record_at(0, BODY))
    struct.pack_into(">q", raw, 20, 99)  # queue offset
    seal(raw, len(BODY))
    assert intact(bytes(raw), 0, len(raw), 0)
    assert decode_record(bytes(raw), 0).queue_offset == 99


# -- read-path checks -------------------------------------------------------------


def test_starts_record_and_names_queue_record() -> None:
    rec = record_at(500, BODY, queue_id=3, queue_offset=41)
    buf = bytes(10) + rec + bytes(10)
    n = len(rec)
    assert starts_record(buf, 10, n, 500)
    assert not starts_record(buf, 10, n, 501)  # another offset
    assert not starts_record(buf, 10, n - 1, 500)  # another size
    assert not starts_record(buf, 11, n, 500)  # not its start
    assert not starts_record(buf, -1, n, 500)
    assert not starts_record(buf, 30, n, 500)  # would run past the buffer
    assert not starts_record(buf, 10, MIN_RECORD_SIZE - 1, 500)
    assert names_queue_record(buf, 10, n, 500, 3, 41)
    assert not names_queue_record(buf, 10, n, 500, 3, 40)
    assert not names_queue_record(buf, 10, n, 500, 2, 41)
    assert not names_queue_record(buf, 10, n, 499, 3, 41)


def test_intact_checks_the_units_size_and_offset() -> None:
    rec = record_at(500, BODY)
    buf = bytes(10) + rec
    assert intact(buf, 10, len(rec), 500)
    assert not intact(buf, 10, len(rec), 0)
    assert not intact(buf, 10, len(rec) - 1, 500)
    assert not intact(buf, 10, len(rec) + 1, 500)  # past the buffer
    assert not intact(buf, -10, len(rec), 500)
    skipped = bytearray(buf)
    skipped[10:18] = BLANK.pack(len(rec), SKIP_MAGIC)  # quarantined
    assert not intact(bytes(skipped), 10, len(rec), 500)


# -- resynchronising ----------------------------------------------------------------


def test_find_record_skips_false_magics_stale_and_broken_records() -> None:
    base = 1 << 20
    # A body that carries a record magic, as a record in the log would.
    decoy = struct.pack(">i", -626843481) * 4
    seg = bytearray(4096)
    seg[0:50] = b"\xab" * 50  # garbage
    a = record_at(base + 100, decoy)
    seg[100 : 100 + len(a)] = a
    stale = record_at(base + 999, BODY)  # names another offset
    at_stale = 400
    seg[at_stale : at_stale + len(stale)] = stale
    broken = bytearray(record_at(base + 700, BODY))
    broken[HEADER_SIZE + 2] ^= 0xFF  # its body
    seg[700 : 700 + len(broken)] = broken
    good = record_at(base + 1000, BODY)
    seg[1000 : 1000 + len(good)] = good
    buf = bytes(seg)
    assert find_record(buf, buf, 0, 4096, base) == 100
    assert find_record(buf, buf, 101, 4096, base) == 1000  # stale and broken skipped
    assert find_record(buf, buf, 101, 4096, base, verify_crc=False) == 700
    assert find_record(buf, buf, 101, 1000 + len(good) - 1, base) == -1  # cut
    assert find_record(buf, buf, 101, 4096, base, search_end=900) == -1
    assert find_record(buf, buf, 101, 4096, base, search_end=1000) == -1
    assert find_record(buf, buf, 101, 4096, base, search_end=1004) == 1000
    assert find_record(buf, buf, 1001, 4096, base) == -1
    assert find_record(buf, buf, 0, 4096, base + 1) == -1  # wrong segment base


# A record starting 1-3 bytes before search_end was never found: mm.find was
# bounded by search_end + 4, and the magic sits at a record's bytes 4..8.
@pytest.mark.parametrize("before", [1, 2, 3, 4, 5])
def test_find_record_finds_a_record_just_before_search_end(before: int) -> None:
    base = 1 << 20
    seg = bytearray(4096)
    rec = record_at(base + 1000, BODY)
    seg[1000 : 1000 + len(rec)] = rec
    buf = bytes(seg)
    assert find_record(buf, buf, 0, 4096, base, search_end=1000 + 4) == 1000
    assert find_record(buf, buf, 0, 4096, base, search_end=1000 + before) == 1000
    # Only records starting before search_end: one starting at it is not.
    assert find_record(buf, buf, 0, 4096, base, search_end=1000) == -1


# -- decode_buffer's stops -------------------------------------------------------------


def test_decode_buffer_stops_at_blank_stale_record_and_end() -> None:
    base = 8192
    a = record_at(base, b"a")
    b = record_at(base + len(a), b"b")
    blank = BLANK.pack(100, BLANK_MAGIC)
    buf = a + b + blank + bytes(92) + record_at(base + len(a) + len(b) + 100, b"c")
    assert [m.body for m in decode_buffer(buf, base)] == [b"a", b"b"]
    assert [m.body for m in decode_buffer(buf, base, start=len(a))] == [b"b"]
    assert [m.body for m in decode_buffer(buf, base, end=len(a) + len(b) - 1)] == [b"a"]
    assert list(decode_buffer(buf, base + 1)) == []  # records name other offsets
    bad = bytearray(buf)
    bad[len(a) + HEADER_SIZE] ^= 0x01  # b's body: "b" becomes "c"
    # Without verify_crc the damage goes unseen; with it the damage stops it.
    assert [m.body for m in decode_buffer(bytes(bad), base)] == [b"a", b"c"]
    assert [m.body for m in decode_buffer(bytes(bad), base, verify_crc=True)] == [b"a"]


# -- IPv6 hosts ----------------------------------------------------------------------


def v6_record(phys: int, body: bytes, born_v6: bool, store_v6: bool) -> bytes:
    """A record with IPv6 hosts (encode_record writes IPv4 only), sealed."""
    sysflag = (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (
        SYSFLAG_STOREHOST_V6 if store_v6 else 0
    )
    layout = header_layout(sysflag)
    born = socket.inet_pton(socket.AF_INET6, "::1") if born_v6 else b"\n\0\0\1"
    store = socket.inet_pton(socket.AF_INET6, "fe80::2") if store_v6 else b"\x7f\0\0\1"
    props = b"k\x01v\x02"
    suffix = b"\x01T" + struct.pack(">H", len(props) + PROP_CRC_SIZE) + props
    total = layout.size + len(body) + len(suffix) + PROP_CRC_SIZE
    head = layout.pack(
        total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 1, 0, 5, phys, sysflag,
        1, born, 6, 2, store, 7, 0, 0, len(body),
    )  # fmt: skip
    crc = zlib.crc32(head, zlib.crc32(suffix)) & 0x7FFFFFFF
    return head + body + suffix + prop_crc(crc)


@pytest.mark.parametrize(
    "born_v6, store_v6", [(True, False), (False, True), (True, True)]
)
def test_ipv6_hosts_widen_the_header(born_v6: bool, store_v6: bool) -> None:
    layout = header_layout(
        (SYSFLAG_BORNHOST_V6 if born_v6 else 0)
        | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    )
    assert layout.size == HEADER_SIZE + 12 * (born_v6 + store_v6)
    assert layout is HEADER_V6[(born_v6, store_v6)]
    rec = v6_record(64, BODY, born_v6, store_v6)
    assert status(rec, require_prop_crc=True) == "ok"
    assert intact(rec, 0, len(rec), 64)
    m = decode_record(rec, 0)
    assert (m.body, m.topic, m.queue_offset, m.commit_log_offset) == (BODY, "T", 5, 64)
    assert m.born_host == ("[::1]:6" if born_v6 else "10.0.0.1:6")
    assert m.store_host == ("[fe80::2]:7" if store_v6 else "127.0.0.1:7")
    bad = bytearray(rec)
    bad[layout.size + 1] ^= 0x01  # body
    assert not intact(bytes(bad), 0, len(rec), 64)
    bad = bytearray(rec)
    bad[50] ^= 0x01  # inside the born host
    assert not intact(bytes(bad), 0, len(rec), 64)


def test_header_layout_for_ipv4() -> None:
    assert header_layout(0).size == HEADER_SIZE == 88
    assert header_layout(0x4 | 0x8).size == 88  # other bits do not widen it


# -- hosts and ids ---------------------------------------------------------------------


def test_parse_and_format_hosts() -> None:
    assert parse_host("10.1.2.3:8080") == (b"\x0a\x01\x02\x03", 8080)
    assert parse_host(":9876") == (b"\x7f\x00\x00\x01", 9876)
    assert parse_host("not-an-ip:1") == (b"\x7f\x00\x00\x01", 1)
    assert parse_host("10.0.0.9:") == (b"\x0a\x00\x00\x09", 0)
    assert format_host(b"\x0a\x01\x02\x03", 8080) == "10.1.2.3:8080"
    v6 = socket.inet_pton(socket.AF_INET6, "2001:db8::1")
    assert format_host(v6, 443) == "[2001:db8::1]:443"


def test_offset_msg_id_round_trips() -> None:
    host = b"\xc0\xa8\x00\x01"
    for off in (0, 1, 2**40 + 5, 2**63 - 1, -5):
        mid = offset_msg_id(host, 10911, off)
        assert len(mid) == 32 and mid == mid.upper()
        assert decode_offset_msg_id(mid) == ("192.168.0.1:10911", off)
    v6 = socket.inet_pton(socket.AF_INET6, "::1")
    mid6 = (v6 + struct.pack(">iq", 7, 123)).hex().upper()
    assert len(mid6) == 56
    assert decode_offset_msg_id(mid6) == ("[::1]:7", 123)


@pytest.mark.parametrize("bad", ["", "ABC", "Z" * 32, "0" * 31, "0" * 33, "0" * 57])
def test_malformed_offset_msg_ids(bad: str) -> None:
    assert decode_offset_msg_id(bad) is None


def test_record_check_values_are_stable() -> None:
    """Damage reasons in ``commitlog.Damage`` are these values."""
    assert [s.value for s in RecordCheck] == ["ok", "blank", "end", "corrupt", "skip"]
