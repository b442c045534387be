"""Hostile bodies and handles over the real endpoint (raw gRPC stubs): a gzip
bomb is refused with the size code after inflating at most the size limit,
while another client's calls stay fast and the endpoint's memory stays small;
bad gzip and impossible receipt handles get their own codes, never an
internal error."""

from __future__ import annotations

import gzip
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.broker_core.endpoint.test_protocol import (
    PY,
    ROOT,
    free_port,
    stop_server,
    wait_port,
)

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
    yield {"stub": sgrpc.MessagingServiceStub(ch), "pid": proc.pid, "port": port}
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


def test_gzip_bombs_are_refused_while_others_are_served(ep):
    stub = ep["stub"]
    # 1 MiB of gzip that inflates to 1 GiB; ~4 MiB that inflates to 4 GiB.
    one_gib = gzip.compress(b"\0" * (1 << 30), 9)
    four_gib = one_gib * 4  # concatenated members: the stream goes on
    assert len(one_gib) < 1.1 * (1 << 20)
    pings: list[float] = []
    stop = threading.Event()

    def pinger() -> None:
        other = sgrpc.MessagingServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{ep['port']}")
        )
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
        time.sleep(0.3)
        for bomb in (one_gib, four_gib, one_gib):
            assert send_gzip(stub, bomb) == C.MESSAGE_BODY_TOO_LARGE
    finally:
        stop.set()
        th.join()
    assert pings and max(pings) < 0.1, max(pings)
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


def send_plain(stub, topic: str, props: dict | None = None, tag: str = "") -> int:
    m = pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(tag=tag, body_encoding=pb.IDENTITY),
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


def test_a_huge_tag_or_key_is_a_size_refusal(ep):
    stub = ep["stub"]
    assert send_plain(stub, "Plain", tag="t" * (1 << 20)) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )
    assert send_plain(stub, "Plain", tag="t" * 40_000) == (
        C.MESSAGE_PROPERTIES_TOO_LARGE
    )


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
