"""The Broker facade: send, pull, filters, offsets, look-ups, admin and errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker_core import Broker, Message, MessageInner, PullStatus
from broker_core.errors import (
    IllegalKeyError,
    IllegalPropertyError,
    IllegalTagError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidOffsetError,
    InvalidQueueError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    ReservedPropertyError,
    StoreClosedError,
    TopicExistsError,
    TopicNotAllowedError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE


def test_send_then_pull_returns_messages_in_order(broker: Broker) -> None:
    sent = [
        broker.send(Message("Orders", f"m{i}".encode(), tags="a", queue_id=1))
        for i in range(50)
    ]
    assert [r.queue_offset for r in sent] == list(range(50))
    assert len({r.msg_id for r in sent}) == 50
    res = broker.pull("g", "Orders", 1, 0, max_messages=32)
    assert res.status is PullStatus.FOUND and res.next_offset == 32
    m = res.messages[0]
    assert (m.topic, m.body, m.tags, m.queue_id, m.queue_offset) == (
        "Orders",
        b"m0",
        "a",
        1,
        0,
    )
    assert m.msg_id == sent[0].msg_id and m.store_timestamp >= m.born_timestamp > 0
    rest = broker.pull("g", "Orders", 1, 32, max_messages=32)
    assert [x.body for x in rest.messages] == [f"m{i}".encode() for i in range(32, 50)]
    assert broker.pull("g", "Orders", 1, 50).status is PullStatus.NO_NEW_MSG
    ill = broker.pull("g", "Orders", 1, 51)
    assert ill.status is PullStatus.OFFSET_ILLEGAL and ill.next_offset == 50


def test_send_batch_spans_segments_and_round_robins_queues(broker: Broker) -> None:
    body = b"x" * 3000
    results = broker.send_batch(
        [Message("Big", body, keys=["k", f"n{i}"]) for i in range(100)]
    )
    assert sorted({r.queue_id for r in results}) == [0, 1, 2, 3]
    assert broker.stats()["segments"] > 3  # 300 KB in 64 KiB segments
    got = []
    for q in range(4):
        got += broker.pull("g", "Big", q, 0, 100).messages
    assert len(got) == 100 and all(m.body == body for m in got)


def test_tag_filter_pull_matches_hash_then_exact_tag(broker: Broker) -> None:
    tags = ["TagA", "TagB", None, "TagC", "TagA"]
    for i, t in enumerate(tags * 4):
        broker.send(Message("Tagged", str(i).encode(), tags=t, queue_id=0))
    a = broker.pull("g", "Tagged", 0, 0, 32, "TagA")
    assert [m.tags for m in a.messages] == ["TagA"] * 8
    ab = broker.pull("g", "Tagged", 0, 0, 32, "TagA || TagC")
    assert {m.tags for m in ab.messages} == {"TagA", "TagC"} and len(ab.messages) == 12
    none = broker.pull("g", "Tagged", 0, 0, 32, "Nope")
    assert none.status is PullStatus.NO_MATCHED_MSG and none.next_offset == 20
    assert len(broker.pull("g", "Tagged", 0, 0, 32, "*").messages) == 20


def test_offsets_persist_across_reopen(store_dir: Path, small: dict) -> None:
    with Broker.open(store_dir, **small) as b:
        for _ in range(5):
            b.send(Message("T", b"x", queue_id=2))
        assert b.committed_offset("g1", "T", 2) == -1
        b.commit_offset("g1", "T", 2, 3)
        b.commit_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0, 0)
        with pytest.raises(InvalidOffsetError):
            b.commit_offset("g1", "T", 2, 6)
        with pytest.raises(InvalidOffsetError):
            b.commit_offset("g1", "T", 2, -1)
    with Broker.open(store_dir, **small) as b:
        assert b.committed_offset("g1", "T", 2) == 3
        assert (
            b.committed_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0
        )
        assert b.pull("g1", "T", 2, 0, 32).messages[4].queue_offset == 4


def test_get_message_by_offset_id_and_uniq_key_and_query_by_key(broker: Broker) -> None:
    r = broker.send(Message("Keyed", b"payload", keys="order-1 user-9"))
    for i in range(20):
        broker.send(Message("Keyed", b"other", keys=f"order-{i + 2}"))
    assert broker.get_message(r.offset_msg_id).body == b"payload"
    assert broker.get_message(r.msg_id).body == b"payload"
    assert broker.get_message(r.msg_id, topic="Keyed").keys == "order-1 user-9"
    found = broker.query_by_key("Keyed", "user-9", 0, 2**62, 10)
    assert [m.body for m in found] == [b"payload"]
    assert broker.query_by_key("Keyed", "user-9", 0, 1000, 10) == []
    with pytest.raises(MessageNotFoundError):
        broker.get_message("00" * 16)


def test_topic_admin(broker: Broker) -> None:
    cfg = broker.create_topic("Admin", read_queue_nums=2, write_queue_nums=2)
    assert cfg.queue_nums == 2
    with pytest.raises(TopicExistsError):
        broker.create_topic("Admin")
    broker.update_topic("Admin", write_queue_nums=8, read_queue_nums=8)
    broker.send(Message("Admin", b"x", queue_id=7))
    assert "Admin" in [t.topic_name for t in broker.list_topics()]
    broker.delete_topic("Admin")
    assert "Admin" not in [t.topic_name for t in broker.list_topics()]
    with pytest.raises(TopicNotFoundError):
        broker.update_topic("Admin", perm=6)
    with pytest.raises(TopicNotFoundError):
        broker.delete_topic("Admin")
    with pytest.raises(ValidationError):
        broker.create_topic("Bad", read_queue_nums=0)


def test_auto_create_can_be_disabled(store_dir: Path, small: dict) -> None:
    with Broker.open(store_dir, auto_create_topic=False, **small) as b:
        with pytest.raises(TopicNotFoundError):
            b.send(Message("Nope", b"x"))
        b.create_topic("Yes", 1)
        assert b.send(Message("Yes", b"x")).queue_id == 0


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message("", b"x"), InvalidTopicError),
        (Message("../TopicTest", b"x"), InvalidTopicError),
        (Message("a" * 128, b"x"), InvalidTopicError),
        (Message("%RETRY%" + "a" * 249, b"x"), InvalidTopicError),
        (Message("SCHEDULE_TOPIC_XXXX", b"x"), TopicNotAllowedError),
        (Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"), TopicNotAllowedError),
        (Message("T", b""), InvalidMessageError),
        (Message("T", "text"), InvalidMessageError),  # type: ignore[arg-type]
        (Message("T", b"x" * (64 * 1024 + 1)), MessageTooLargeError),
        (Message("T", b"x", properties={"p": "v" * 40000}), MessageTooLargeError),
        (Message("T", b"x", queue_id=4), InvalidQueueError),
        (Message("T", b"x", queue_id=-1), InvalidQueueError),
    ],
)
def test_bad_sends_raise_typed_errors_and_write_nothing(
    store_dir: Path, small: dict, message: Message, error: type[Exception]
) -> None:
    with Broker.open(store_dir, max_message_size=64 * 1024, **small) as b:
        before = b.stats()["commit_offset"]
        with pytest.raises(error):
            b.send_batch([Message("T", b"ok"), message])
        assert b.stats()["commit_offset"] == before


def test_other_bad_inputs(broker: Broker) -> None:
    broker.send(Message("T", b"x"))
    with pytest.raises(InvalidGroupError):
        broker.pull("bad group!", "T", 0, 0)
    with pytest.raises(InvalidGroupError):
        broker.commit_offset("g" * 121, "T", 0, 0)
    with pytest.raises(TopicNotFoundError):
        broker.pull("g", "Missing", 0, 0)
    with pytest.raises(InvalidQueueError):
        broker.pull("g", "T", 9, 0)
    with pytest.raises(ValidationError):
        Broker.open(broker.store.root, flush="sometimes")
    with pytest.raises(ValidationError):
        Broker.open(broker.store.root, no_such_setting=1)
    with pytest.raises(ValidationError):
        Broker.open(broker.store.root, message_delay_level="1s 5x")


def test_closed_broker_refuses_calls(store_dir: Path, small: dict) -> None:
    b = Broker.open(store_dir, **small)
    b.close()
    b.close()
    with pytest.raises(StoreClosedError):
        b.send(Message("T", b"x"))


def test_put_inner_dispatch_rules(broker: Broker) -> None:
    store = broker.store
    half = store.put_inner(
        MessageInner(
            "RMQ_SYS_TRANS_HALF_TOPIC", 0, b"half", {"UNIQ_KEY": "U1", "KEYS": "k"}
        )
    )
    prepared = store.put_inner(
        MessageInner(
            "T", 0, b"p", {"UNIQ_KEY": "U2"}, sysflag=TRANSACTION_PREPARED_TYPE
        )
    )
    rollback = store.put_inner(
        MessageInner(
            "T",
            0,
            b"r",
            {"UNIQ_KEY": "U3"},
            sysflag=TRANSACTION_ROLLBACK_TYPE,
            prepared_transaction_offset=prepared.commit_log_offset,
        )
    )
    assert (
        half.queue_offset == 0
        and prepared.queue_offset == 0
        and rollback.queue_offset == 0
    )
    assert store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
    assert store.max_offset("T", 0) == 0  # no units for PREPARED / ROLLBACK
    seen = [
        (r.topic, r.sysflag, r.consume_queue_offset) for r in store.iter_dispatch(0)
    ]
    assert seen == [
        ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0),
        ("T", 4, 0),
        ("T", 12, 0),
    ]
    m = store.read_message(rollback.commit_log_offset)
    assert (
        m.prepared_transaction_offset == prepared.commit_log_offset and m.body == b"r"
    )
    assert broker.query_by_key("T", "U2") and not broker.query_by_key("T", "U3")
    # Read again from an offset, as a restarting service does.
    replay = [r.commit_log_offset for r in store.iter_dispatch(half.commit_log_offset)]
    assert replay == [
        half.commit_log_offset,
        prepared.commit_log_offset,
        rollback.commit_log_offset,
    ]
    assert [x.body for x in store.iter_messages(0)] == [b"half", b"p", b"r"]


def test_schedule_topic_tag_field_holds_delivery_time(
    store_dir: Path, small: dict
) -> None:
    with Broker.open(store_dir, message_delay_level="2s 1m", **small) as b:
        r = b.store.put_inner(
            MessageInner(
                "SCHEDULE_TOPIC_XXXX", 1, b"later", {"DELAY": "2", "TAGS": "t"}
            )
        )
        ((off, size, code),) = b.store.get_queue_units("SCHEDULE_TOPIC_XXXX", 1, 0, 10)
        assert (off, size) == (r.commit_log_offset, r.size)
        assert code == r.store_timestamp + 60_000
        assert b.store.get_topic("SCHEDULE_TOPIC_XXXX").queue_nums == 2


def test_import_without_django() -> None:
    code = (
        "import sys; sys.modules['django'] = None; sys.modules['celery'] = None; "
        "sys.modules['pyspark'] = None; import broker_core; "
        "from broker_core import Broker, Message; print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    assert out.stdout.strip() == "ok"


def test_index_reader_finds_the_same_keys_as_the_full_decoder(broker: Broker) -> None:
    from broker_core.dispatch import decode_dispatch, index_keys

    sent = [
        Message("Idx", b"a", keys="k1  k2 ключ"),
        Message("Idx", b"b", properties={"XKEYS": "decoy", "MYUNIQ_KEY": "decoy"}),
        Message("Idx", b"c", keys="only", tags="t"),
        Message("Idx2", b"d", keys="😀 ünï"),
    ]
    offsets = [broker.send(m).commit_log_offset for m in sent]
    store = broker.store
    for off in offsets:
        seg = store.commitlog.segment_at(off)
        full = decode_dispatch(seg.view, off - seg.base, store._delay_ms)
        phys, ts, sysflag, topic, keys = index_keys(seg.view, off - seg.base)
        expect = [full.uniq_key] + [k for k in (full.keys or "").split(" ") if k]
        assert (phys, ts, sysflag, topic, keys) == (
            full.commit_log_offset,
            full.store_timestamp,
            full.sysflag,
            full.topic,
            expect,
        )
    assert [m.body for m in broker.query_by_key("Idx", "ключ", 0, 2**62, 5)] == [b"a"]
    assert broker.query_by_key("Idx", "decoy", 0, 2**62, 5) == []
    assert [m.body for m in broker.query_by_key("Idx2", "😀", 0, 2**62, 5)] == [b"d"]


def test_index_rolls_to_new_files_and_finds_keys_in_each(
    store_dir: Path, small: dict
) -> None:
    cfg = dict(small, index_slots=64, index_entries=300)
    with Broker.open(store_dir, **cfg) as b:
        # Each message adds two keys (UNIQ_KEY and its key): several files.
        sent = b.send_batch(
            [Message("Roll", b"%d" % i, keys=f"o{i}") for i in range(500)]
        )
        b.store.build_index()
        files = b.store.index._names()
        assert len(files) >= 4
        for i in (0, 149, 150, 151, 299, 499):
            found = b.query_by_key("Roll", f"o{i}", 0, 2**62, 5)
            assert [m.body for m in found] == [b"%d" % i]
            assert b.get_message(sent[i].msg_id, topic="Roll").body == b"%d" % i


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"properties": {"k": "v\x02DELAY\x013"}}, IllegalPropertyError),
        ({"properties": {"k\x01x": "v"}}, IllegalPropertyError),
        ({"properties": {"k": "v\x00"}}, IllegalPropertyError),
        ({"properties": {"k": ""}}, IllegalPropertyError),
        ({"properties": {"UNIQ_KEY": "forged"}}, ReservedPropertyError),
        ({"properties": {"TRAN_MSG": "true"}}, ReservedPropertyError),
        ({"properties": {"PGROUP": "g"}}, ReservedPropertyError),
        ({"properties": {"REAL_TOPIC": "Other"}}, ReservedPropertyError),
        ({"properties": {"TAGS": "x"}}, ReservedPropertyError),
        ({"properties": {"__RMQ.TRANSIENT.X": "1"}}, ReservedPropertyError),
        ({"tags": "a\x02TRAN_MSG\x01true"}, IllegalTagError),
        ({"tags": "a||b"}, IllegalTagError),
        ({"tags": "a|b"}, IllegalTagError),  # Apache's proxy: no '|' at all
        ({"tags": "  "}, IllegalTagError),
        ({"keys": ["ok", "k\x02PGROUP\x01x"]}, IllegalKeyError),
    ],
)
def test_sends_that_would_forge_system_properties_are_refused(
    broker: Broker, kwargs: dict, error: type
) -> None:
    before = broker.store.max_physical_offset()
    with pytest.raises(error):
        broker.send(Message("Inject", b"body", queue_id=0, **kwargs))
    assert broker.store.max_physical_offset() == before  # nothing stored


def test_ordinary_properties_are_stored_literally(broker: Broker) -> None:
    props = {"region": "eu", "note": "a=b; c\td", "x": "DELAY"}
    r = broker.send(
        Message(
            "Inject", b"body", queue_id=0, tags="t1", keys=["k 1"], properties=props
        )
    )
    m = broker.get_message(r.msg_id)
    assert {k: m.properties[k] for k in props} == props
    assert m.tags == "t1" and m.properties["UNIQ_KEY"] == r.msg_id
    assert "DELAY" not in m.properties and "TRAN_MSG" not in m.properties


@pytest.mark.parametrize(
    "props",
    [{"k": "v\x02DELAY\x013"}, {"k\x01x": "v"}, {"": "v"}, {"k": "v\x01"}],
)
def test_the_codec_refuses_what_would_decode_differently(
    broker: Broker, props: dict
) -> None:
    """Behind the entry checks: the inner append path (transactions, delay
    delivery, resends) cannot write a record whose properties decode to
    something else either."""
    from broker_core.message import MessageInner, decode_properties, encode_properties

    with pytest.raises(IllegalPropertyError):
        encode_properties(props)
    before = broker.store.max_physical_offset()
    with pytest.raises(IllegalPropertyError):
        broker.store.put_inner(MessageInner("Inject", 0, b"body", properties=props))
    assert broker.store.max_physical_offset() == before
    fine = {"a": "1", "b": "x=y;z", "empty": ""}
    assert decode_properties(encode_properties(fine)) == {"a": "1", "b": "x=y;z"}
