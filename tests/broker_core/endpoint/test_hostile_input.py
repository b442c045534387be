"""Hostile bodies and handles over the real endpoint (raw gRPC stubs): a gzip
bomb is refused with the size code after inflating at most the size limit,
while another client's calls stay fast and the endpoint's memory stays small;
bad gzip and impossible receipt handles get their own codes, never an
internal error."""

from __future__ import annotations

import contextlib
import gzip
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.endpoint_server import PY, ROOT, stop_server, wait_port
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

C = pb.Code
MD = (("x-mq-client-id", "hostile-test"),)


@pytest.fixture(scope="module")
def ep(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", str(base / "store"),
         "--listen", f"127.0.0.1:{port}", "--no-redis-relay"],
        cwd=ROOT, stdout=open(base / "log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_port(proc, port)
    ch = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
    )
    yield {
        "stub": sgrpc.MessagingServiceStub(ch),
        "pid": proc.pid,
        "port": port,
        "store": base / "store",
    }
    ch.close()
    assert stop_server(proc) == 0
    assert "Traceback" not in (base / "log").read_text()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def send_gzip(stub, body: bytes, topic: str = "Bombs") -> int:
    m = pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(body_encoding=pb.GZIP),
        body=body,
    )
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=60)
    return r.entries[0].status.code if r.entries else r.status.code


@contextlib.contextmanager
def pinging(port: int) -> Iterator[list[float]]:
    """Another client's QueryRoute round trips (seconds) while the block
    runs, every 20 ms on a channel of its own."""
    pings: list[float] = []
    stop = threading.Event()

    def pinger() -> None:
        other = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        while not stop.is_set():
            t = time.monotonic()
            other.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="Pings")),
                metadata=MD, timeout=10,
            )  # fmt: skip
            pings.append(time.monotonic() - t)
            time.sleep(0.02)

    th = threading.Thread(target=pinger)
    th.start()
    try:
        yield pings
    finally:
        stop.set()
        th.join()


def test_gzip_bombs_are_refused_while_others_are_served(ep):
    stub = ep["stub"]
    # 1 MiB of gzip that inflates to 1 GiB; ~4 MiB that inflates to 4 GiB.
    one_gib = gzip.compress(b"\0" * (1 << 30), 9)
    four_gib = one_gib * 4  # concatenated members: the stream goes on
    assert len(one_gib) < 1.1 * (1 << 20)
    with pinging(ep["port"]) as pings:
        time.sleep(0.3)
        for bomb in (one_gib, four_gib, one_gib):
            assert send_gzip(stub, bomb) == C.MESSAGE_BODY_TOO_LARGE
    # (a bound for a loaded machine: a server blocked inflating a bomb would
    # hold the pings for the seconds 1-4 GiB take)
    assert pings and max(pings) < 0.5, max(pings)
    assert rss_mb(ep["pid"]) < 200
    # A body inflating to just the limit is taken.
    ok = gzip.compress(b"a" * (4 << 20))
    assert send_gzip(stub, ok) == C.OK


def test_bad_gzip_is_corrupted_not_internal(ep):
    stub = ep["stub"]
    assert send_gzip(stub, b"this is not gzip") == C.MESSAGE_CORRUPTED
    whole = gzip.compress(b"some body")
    assert send_gzip(stub, whole[: len(whole) // 2]) == C.MESSAGE_CORRUPTED


@pytest.mark.parametrize(
    "handle",
    ["P1:0:99999999999999999999999999:ab:1", "P1:0:1:" + "f" * 40 + ":1",
     "P1:-1:1:ab:1", "garbage"],
)  # fmt: skip
def test_impossible_receipt_handles_are_invalid_handles(ep, handle):
    r = ep["stub"].AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name="Bombs"),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle=handle)],
        ),
        metadata=MD,
        timeout=10,
    )
    codes = {e.status.code for e in r.entries} | {r.status.code}
    assert C.INVALID_RECEIPT_HANDLE in codes
    assert not codes & {C.INTERNAL_ERROR, C.INTERNAL_SERVER_ERROR}


def send_plain(
    stub, topic: str, props: dict | None = None, tag: str = "", keys: list | None = None
) -> int:
    m = pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(
            tag=tag, keys=keys or [], body_encoding=pb.IDENTITY
        ),
        body=b"x",
        user_properties=props or {},
    )
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
    return r.entries[0].status.code if r.entries else r.status.code


@pytest.mark.parametrize(
    "topic", ["%DLQ%someone", "%RETRY%someone", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_x"]
)
def test_system_topics_are_refused_to_clients(ep, topic):
    assert send_plain(ep["stub"], topic) == C.ILLEGAL_TOPIC


@pytest.mark.parametrize(
    "name",
    ["__STARTDELIVERTIME", "DLQ_ORIGIN_QUEUE", "CHECK_IMMUNITY_TIME_IN_SECONDS",
     "UNIQ_KEY", "TIMER_DELIVER_MS"],
)  # fmt: skip
def test_reserved_property_names_are_refused(ep, name):
    assert send_plain(ep["stub"], "Plain", {name: "1"}) == (
        C.ILLEGAL_MESSAGE_PROPERTY_KEY
    )


def test_every_reserved_property_name_is_refused_one_by_one(ep):
    """Each name of the reserved set (RocketMQ's ``MessageConst`` names, the
    ones it sets outside that set, this broker's own) and the client-only
    prefix, sent alone as a user property: every one is refused with
    RocketMQ's code, and a name that only resembles one goes through."""
    from broker_core.validation import RESERVED_PREFIX, RESERVED_PROPERTIES

    names = sorted(RESERVED_PROPERTIES) + [RESERVED_PREFIX + "x"]
    got = {n: send_plain(ep["stub"], "Plain", {n: "1"}) for n in names}
    accepted = sorted(
        n for n, code in got.items() if code != C.ILLEGAL_MESSAGE_PROPERTY_KEY
    )
    assert not accepted, accepted
    assert len(got) > 80
    assert send_plain(ep["stub"], "Plain", {"tags": "1", "KEYS_": "1"}) == C.OK


def test_a_huge_tag_or_key_is_a_size_refusal(ep):
    stub = ep["stub"]
    assert send_plain(stub, "Plain", tag="t" * (1 << 20)) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )
    assert send_plain(stub, "Plain", tag="t" * 40_000) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )
    # Keys too: one huge key, and many keys that are only together too large.
    assert send_plain(stub, "Plain", keys=["k" * 40_000]) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )
    assert send_plain(stub, "Plain", keys=[f"k{i:05d}" * 100 for i in range(100)]) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )
    # ... and a message within the limit still goes through.
    assert send_plain(stub, "Plain", tag="t" * 100, keys=["k" * 100]) == C.OK


def test_a_huge_sql92_filter_is_refused_at_once(ep):
    """100,000 terms: refused by length before it is parsed, in well under a
    second (parsing it took seconds on the event loop)."""
    assert send_plain(ep["stub"], "Filtered") == C.OK  # the topic exists
    expr = " OR ".join(f"a = {i}" for i in range(100_000))
    t = time.monotonic()
    r = ep["stub"].ReceiveMessage(
        spb.ReceiveMessageRequest(
            group=pb.Resource(name="GF"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Filtered")),
            filter_expression=pb.FilterExpression(type=pb.SQL, expression=expr),
            batch_size=1,
        ),
        metadata=MD,
        timeout=30,
    )
    codes = [x.status.code for x in r if x.HasField("status")]
    assert codes == [C.ILLEGAL_FILTER_EXPRESSION]
    assert time.monotonic() - t < 1.0


def receive(
    stub,
    group: str,
    topic: str,
    expr: str = "*",
    sql: bool = False,
    poll_s: float = 1.0,
    timeout: float = 60,
) -> list:
    """One ReceiveMessage; the statuses and messages it streamed."""
    from google.protobuf import duration_pb2

    r = stub.ReceiveMessage(
        spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression=pb.FilterExpression(
                type=pb.SQL if sql else pb.TAG, expression=expr
            ),
            batch_size=16,
            invisible_duration=duration_pb2.Duration(seconds=30),
            long_polling_timeout=duration_pb2.Duration(
                seconds=int(poll_s), nanos=int(poll_s % 1 * 1e9)
            ),
        ),
        metadata=MD,
        timeout=timeout,
    )  # fmt: skip
    return list(r)


def test_a_costly_accepted_filter_holds_no_other_consumer(ep):
    """An accepted SQL92 filter whose every evaluation is costly (650 CONTAINS
    over a 32 KB value: ~100 ms a message) over a topic of such messages: its
    receive comes back within its long poll, and another consumer's receive on
    another topic is served meanwhile (one heavy pop took 80 s and made other
    consumers time out at 30 s: the scan stopped only after batches of 256)."""
    stub = ep["stub"]
    big = {"a": "a" * 32_000}
    for _ in range(300):
        assert send_plain(stub, "HeavySql", big) == C.OK
    assert send_plain(stub, "LightT") == C.OK
    expr = " OR ".join(["a CONTAINS 'aaaaaaab'"] * 650)
    heavy: dict = {}

    def heavy_receive() -> None:
        t = time.monotonic()
        heavy["out"] = receive(stub, "HeavyG", "HeavySql", expr, sql=True, poll_s=3)
        heavy["took"] = time.monotonic() - t

    th = threading.Thread(target=heavy_receive)
    th.start()
    time.sleep(0.5)  # the heavy receive is scanning
    t = time.monotonic()
    light = receive(stub, "LightG", "LightT", poll_s=1, timeout=20)
    light_took = time.monotonic() - t
    th.join(60)
    assert any(x.HasField("message") for x in light), light
    assert light_took < 5, light_took
    assert heavy["took"] < 10, heavy["took"]
    codes = [x.status.code for x in heavy["out"] if x.HasField("status")]
    assert codes == [C.MESSAGE_NOT_FOUND], codes


def test_many_gzip_members_or_many_bombs_in_one_call_are_bounded(ep):
    """200,000 one-byte gzip members in one 4 MB body (12 s of decompression
    on the event loop, other calls timed out) are refused at once; one call of
    50 bodies each inflating to 4 MiB (200 MB from 200 KB; the endpoint grew
    to 848 MB) stores at most the call's budget and refuses the rest with the
    size code, while another client's calls stay fast."""
    stub = ep["stub"]
    t = time.monotonic()
    assert send_gzip(stub, gzip.compress(b"a") * 199_000) == C.MESSAGE_CORRUPTED
    assert time.monotonic() - t < 2
    assert send_gzip(stub, gzip.compress(b"a") * 1000) == C.OK  # a few are one body
    bomb = gzip.compress(b"\0" * ((4 << 20) - 1024))
    msgs = [
        pb.Message(
            topic=pb.Resource(name="Bombs"),
            system_properties=pb.SystemProperties(body_encoding=pb.GZIP),
            body=bomb,
        )
        for _ in range(50)
    ]
    with pinging(ep["port"]) as pings:
        r = stub.SendMessage(
            spb.SendMessageRequest(messages=msgs), metadata=MD, timeout=120
        )
    codes = [e.status.code for e in r.entries]
    assert codes.count(C.OK) == 4, codes  # 16 MiB in all: four of them
    assert set(codes[4:]) == {C.MESSAGE_BODY_TOO_LARGE}, codes
    assert max(pings) < 0.5, max(pings)
    assert rss_mb(ep["pid"]) < 250


@contextlib.contextmanager
def peak_rss(pid: int) -> Iterator[list[float]]:
    """The process's RSS (MB), sampled every 10 ms while the block runs."""
    seen: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.append(rss_mb(pid))
            time.sleep(0.01)

    th = threading.Thread(target=sample)
    th.start()
    try:
        yield seen
    finally:
        stop.set()
        th.join()


def _bombs(topic: str, n: int, mtype: int = pb.NORMAL) -> list[pb.Message]:
    bomb = gzip.compress(b"\0" * ((4 << 20) - 1024))
    return [
        pb.Message(
            topic=pb.Resource(name=topic),
            system_properties=pb.SystemProperties(
                body_encoding=pb.GZIP, message_type=mtype, message_id=f"B{i:04d}"
            ),
            body=bomb,
        )
        for i in range(n)
    ]


def test_halves_count_toward_the_call_s_budget(ep):
    """A call of transactional messages each inflating to ~4 MiB stores four
    and refuses the rest with the size code (all 40 were stored: 160 MiB from
    160 KB)."""
    made = subprocess.run(
        [PY, "-m", "broker_core", "topic", "create", str(ep["store"]),
         "TxBombs", "--type", "TRANSACTION"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    time.sleep(1.5)  # the endpoint re-reads its topics
    r = ep["stub"].SendMessage(
        spb.SendMessageRequest(messages=_bombs("TxBombs", 10, pb.TRANSACTION)),
        metadata=MD,
        timeout=120,
    )
    codes = [e.status.code for e in r.entries]
    assert codes[:4] == [C.OK] * 4, codes
    assert set(codes[4:]) == {C.MESSAGE_BODY_TOO_LARGE}, codes


def test_many_calls_of_bombs_at_once_hold_little_memory(ep):
    """24 clients at once, each a call of five bodies inflating to ~4 MiB:
    the writer's job stores what it holds before decompressing more (it held
    every call's 16 MiB at once: 817 MB)."""
    port = ep["port"]
    answers: list[list[int]] = []

    def one(i: int) -> None:
        stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        r = stub.SendMessage(
            spb.SendMessageRequest(messages=_bombs(f"Many{i % 3}", 5)),
            metadata=MD,
            timeout=180,
        )
        answers.append([e.status.code for e in r.entries])

    with peak_rss(ep["pid"]) as seen:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(240)
    assert max(seen) < 300, max(seen)
    assert len(answers) == 24
    for codes in answers:
        assert codes[:4] == [C.OK] * 4 and codes[4] == C.MESSAGE_BODY_TOO_LARGE


@pytest.mark.parametrize(
    "topic",
    ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer",
     "SCHEDULE_TOPIC_XXXX", "%RETRY%someone"],
)  # fmt: skip
def test_clients_cannot_read_the_brokers_own_topics(ep, topic):
    """An uncommitted half's body, a delayed message before its time and the
    transaction op records were readable by any client (helper-13); a
    dead-letter topic stays readable, as in Apache RocketMQ."""
    stub = ep["stub"]
    got = receive(stub, "Spy", topic, poll_s=0.2, timeout=10)
    codes = [x.status.code for x in got if x.HasField("status")]
    assert codes == [C.ILLEGAL_TOPIC] and not any(x.HasField("message") for x in got)
    r = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD, timeout=10
    )
    assert r.status.code == C.ILLEGAL_TOPIC and not r.message_queues
    a = stub.QueryAssignment(
        spb.QueryAssignmentRequest(
            topic=pb.Resource(name=topic), group=pb.Resource(name="Spy")
        ),
        metadata=MD,
        timeout=10,
    )
    assert a.status.code == C.ILLEGAL_TOPIC and not a.assignments


def test_a_dead_letter_topic_stays_readable_and_no_route_makes_one(ep):
    """A route to a dead-letter topic that does not exist is 40402, as Apache
    answers, and makes nothing (it made the topic, four queues, for any name
    a client asked); one the broker made is routed."""

    def route(name: str) -> spb.QueryRouteResponse:
        return ep["stub"].QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=name)),
            metadata=MD,
            timeout=10,
        )

    for _ in range(2):
        r = route("%DLQ%nobody")
        assert r.status.code == C.TOPIC_NOT_FOUND and not r.message_queues
    made = subprocess.run(
        [PY, "-m", "broker_core", "topic", "create", str(ep["store"]),
         "%DLQ%someone", "--queues", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    deadline = time.monotonic() + 10
    while (r := route("%DLQ%someone")).status.code != C.OK:
        assert time.monotonic() < deadline, r.status
        time.sleep(0.2)
    assert len(r.message_queues) == 1


@pytest.mark.parametrize("client_type", [99, -1])
def test_a_heartbeat_of_an_unknown_client_type_is_refused_by_code(ep, client_type):
    """It was gRPC UNKNOWN with a ValueError's text and a traceback."""
    r = ep["stub"].Heartbeat(
        spb.HeartbeatRequest(group=pb.Resource(name="G"), client_type=client_type),
        metadata=MD,
        timeout=10,
    )
    assert r.status.code == C.UNRECOGNIZED_CLIENT_TYPE


def test_an_unknown_transaction_resolution_is_a_bad_request(ep):
    r = ep["stub"].EndTransaction(
        spb.EndTransactionRequest(
            topic=pb.Resource(name="TxT"),
            message_id="0000",
            transaction_id="7F00000100002A9F0000000000000000",
            resolution=99,
        ),
        metadata=MD,
        timeout=10,
    )
    assert r.status.code == C.BAD_REQUEST


@pytest.mark.parametrize("field", ["message_type", "body_encoding"])
def test_an_unknown_message_type_or_encoding_is_a_bad_request(ep, field):
    """They were taken as NORMAL and IDENTITY (helper-13)."""
    sp = pb.SystemProperties(body_encoding=pb.IDENTITY)
    setattr(sp, field, 99)
    m = pb.Message(topic=pb.Resource(name="Plain"), system_properties=sp, body=b"x")
    r = ep["stub"].SendMessage(
        spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10
    )
    assert r.entries[0].status.code == C.BAD_REQUEST


def test_huge_calls_are_refused_before_they_are_read(ep):
    """Calls whose size alone says no: more than 1,024 messages in a send or
    entries in an ack (150,000 held every client for 3-7 s), and more user
    properties than the property limit can hold (900,000 took 10 s to
    refuse), each answered at once with its code."""
    stub = ep["stub"]
    many = [
        pb.Message(
            topic=pb.Resource(name="Huge"),
            system_properties=pb.SystemProperties(message_id=f"H{i}"),
            body=b"x",
        )
        for i in range(1025)
    ]
    t = time.monotonic()
    r = stub.SendMessage(spb.SendMessageRequest(messages=many), metadata=MD, timeout=30)
    assert r.status.code == C.BAD_REQUEST and "at most 1024" in r.status.message
    assert not r.entries
    a = stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="G"),
            topic=pb.Resource(name="Huge"),
            entries=[spb.AckMessageEntry(receipt_handle=f"x{i}") for i in range(1025)],
        ),
        metadata=MD,
        timeout=30,
    )
    assert a.status.code == C.BAD_REQUEST and "at most 1024" in a.status.message
    props = pb.Message(
        topic=pb.Resource(name="Huge"),
        system_properties=pb.SystemProperties(message_id="P1"),
        user_properties={f"p{i}": "" for i in range(20_000)},
        body=b"x",
    )
    r = stub.SendMessage(
        spb.SendMessageRequest(messages=[props]), metadata=MD, timeout=30
    )
    assert r.entries[0].status.code == C.MESSAGE_PROPERTIES_TOO_LARGE, r
    assert time.monotonic() - t < 5
    # Within the limits: stored.
    r = stub.SendMessage(
        spb.SendMessageRequest(messages=many[:1024]), metadata=MD, timeout=60
    )
    assert {e.status.code for e in r.entries} == {C.OK}


def test_an_assignment_needs_a_group_and_a_filter_a_known_type(ep):
    """An empty or illegal consumer group asking for an assignment, and a
    receive with an unknown filter type, are refused (both were answered OK;
    the filter was read as a tag)."""
    stub = ep["stub"]
    made = stub.QueryRoute(  # makes the topic
        spb.QueryRouteRequest(topic=pb.Resource(name="Assign")), metadata=MD, timeout=10
    )
    assert made.status.code == C.OK
    for group in ("", "bad group!"):
        a = stub.QueryAssignment(
            spb.QueryAssignmentRequest(
                topic=pb.Resource(name="Assign"), group=pb.Resource(name=group)
            ),
            metadata=MD,
            timeout=10,
        )
        assert a.status.code == C.ILLEGAL_CONSUMER_GROUP and not a.assignments
    got = list(
        stub.ReceiveMessage(
            spb.ReceiveMessageRequest(
                group=pb.Resource(name="G"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="Assign")),
                filter_expression=pb.FilterExpression(type=99, expression="*"),
                batch_size=1,
            ),
            metadata=MD,
            timeout=10,
        )
    )
    assert [x.status.code for x in got if x.HasField("status")] == [C.BAD_REQUEST]
