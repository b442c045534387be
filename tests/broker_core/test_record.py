"""Record encoding round trips, property encoding and message ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.message import decode_properties, encode_properties
from broker_core.record import (
    MAGIC_V2,
    RecordCheck,
    check_record,
    decode_buffer,
    decode_offset_msg_id,
    decode_record,
    encode_record,
    offset_msg_id,
)

topics = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=200)
names = st.text(
    alphabet=st.characters(
        blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)
    ),
    min_size=1,
    max_size=20,
)
props = st.dictionaries(names, names, max_size=5)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(0, 2**62)


def _encode(
    topic: str, body: bytes, properties: dict[str, str], phys: int, **kw: int
) -> bytes:
    return encode_record(
        topic=topic.encode(),
        queue_id=kw.get("queue_id", 3),
        flag=kw.get("flag", 0),
        queue_offset=kw.get("queue_offset", 7),
        physical_offset=phys,
        sysflag=kw.get("sysflag", 0),
        born_timestamp=kw.get("born", 1_700_000_000_000),
        born_host=b"\x0a\x00\x00\x01",
        born_port=5555,
        store_timestamp=kw.get("store", 1_700_000_000_123),
        store_host=b"\x7f\x00\x00\x01",
        store_port=10911,
        reconsume_times=kw.get("reconsume", 0),
        prepared_transaction_offset=kw.get("prepared", 0),
        body=body,
        properties=encode_properties(properties).encode(),
    )


@settings(max_examples=150, deadline=None)
@given(
    topic=topics,
    body=st.binary(min_size=1, max_size=2000),
    properties=props,
    phys=i64,
    queue_id=st.integers(0, 1000),
    flag=i32,
    queue_offset=i64,
    sysflag=st.sampled_from([0, 0x4, 0x8, 0xC, 0x2]),
    reconsume=st.integers(0, 100),
    prepared=i64,
)
def test_record_round_trip(
    topic: str,
    body: bytes,
    properties: dict[str, str],
    phys: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    sysflag: int,
    reconsume: int,
    prepared: int,
) -> None:
    raw = _encode(
        topic,
        body,
        properties,
        phys,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        sysflag=sysflag,
        reconsume=reconsume,
        prepared=prepared,
    )
    assert len(raw) == 91 + len(body) + len(topic.encode()) + len(
        encode_properties(properties).encode()
    ) + (1 if len(topic) > 127 else 0)
    chk = check_record(raw, 0, len(raw))
    assert chk.status is RecordCheck.OK and chk.size == len(raw)
    m = decode_record(raw, 0)
    assert (m.topic, m.body, m.properties) == (topic, body, properties)
    assert (m.queue_id, m.flag, m.queue_offset, m.commit_log_offset) == (
        queue_id,
        flag,
        queue_offset,
        phys,
    )
    assert (m.sysflag, m.reconsume_times, m.prepared_transaction_offset) == (
        sysflag,
        reconsume,
        prepared,
    )
    assert m.born_host == "10.0.0.1:5555" and m.store_host == "127.0.0.1:10911"
    assert decode_offset_msg_id(m.offset_msg_id) == ("127.0.0.1:10911", phys)


@settings(max_examples=50, deadline=None)
@given(bodies=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20))
def test_decode_buffer_reads_every_record_of_a_segment(bodies: list[bytes]) -> None:
    base = 1 << 20
    buf = bytearray()
    for b in bodies:
        buf += _encode("T", b, {"k": "v"}, base + len(buf))
    buf += bytes(64)
    out = list(decode_buffer(memoryview(bytes(buf)), base))
    assert [m.body for m in out] == bodies


def test_long_topic_uses_v2_magic() -> None:
    raw = _encode("%RETRY%" + "a" * 200, b"x", {}, 0)
    assert int.from_bytes(raw[4:8], "big", signed=True) == MAGIC_V2
    assert decode_record(raw, 0).topic == "%RETRY%" + "a" * 200


def test_crc_mismatch_and_torn_records_are_rejected() -> None:
    raw = bytearray(_encode("T", b"hello world", {"a": "b"}, 0))
    assert check_record(raw[:-1], 0, len(raw) - 1).status is RecordCheck.CORRUPT
    raw[90] ^= 0xFF  # inside the body
    assert check_record(raw, 0, len(raw)).status is RecordCheck.CORRUPT
    assert check_record(raw, 0, len(raw), verify_crc=False).status is RecordCheck.OK
    assert check_record(bytes(100), 0, 100).status is RecordCheck.END


def test_offset_msg_id_matches_rocketmq_example() -> None:
    assert (
        offset_msg_id(b"\x7f\x00\x00\x01", 9103, 123456)
        == "7F0000010000238F000000000001E240"
    )


def test_properties_decoding_follows_rocketmq_rows() -> None:
    rows = {
        "k1\x01v1": {"k1": "v1"},
        "": {},
        " ": {},
        "aaa": {},
        "k1\x01": {},
        "\x01v1": {},
        "k1\x01v1\x02": {"k1": "v1"},
        "k1\x01v1\x02k2\x01v2": {"k1": "v1", "k2": "v2"},
        "k1\x01v1\x02\x01v2": {"k1": "v1"},
        "k1\x01v1\x02k2\x01": {"k1": "v1"},
        "\x01v1\x02k2\x01v2": {"k2": "v2"},
        "k1\x01\x02k2\x01v2": {"k2": "v2"},
        "1\x011\x022\x012": {"1": "1", "2": "2"},
        "1\x01\x022\x012": {"2": "2"},
        "\x011\x022\x012": {"2": "2"},
        "1\x011\x022\x01": {"1": "1"},
        "1\x011\x02\x012": {"1": "1"},
    }
    for text, expected in rows.items():
        assert decode_properties(text) == expected, repr(text)
