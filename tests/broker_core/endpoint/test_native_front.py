"""``serve --front native``: the endpoint behind the native gRPC front
(``native/front.cc``, ``broker_core/endpoint/native_front.py``), driven by the
unmodified official Python client (scenario subprocesses) and by raw stubs.

The whole protocol suite runs against the native front too with
``ENDPOINT_FRONT=native`` (``tests/endpoint_server.start_server``); these are
the native front's own checks: sends, a long-polled receive and its ack, a
transaction checked back over Telemetry, a request that does not decode, an
unknown method, Telemetry's half-close, and a client's cancel reaching the
handler; each against both ways the front serves gRPC (on the event loop's
thread, the default, and on a thread of its own)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.broker_core.endpoint.test_nonblocking import receive_request
from tests.endpoint_server import PY, result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

C = pb.Code
MD = (("x-mq-client-id", "native-test"),)
SERVICE = "/apache.rocketmq.v2.MessagingService/"


#: ``BROKER_NATIVE_THREADS``: 0, gRPC served on the event loop's thread (the
#: default); 1, on a completion-queue thread of the front's own
MODES = {"0": "served on the event loop's thread", "1": "its own completion-queue"}


@pytest.fixture(scope="module", params=sorted(MODES))
def native(request, tmp_path_factory):
    try:
        import broker_core._native  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pytest.fail("the native front is not built: make native")
    base = tmp_path_factory.mktemp("native")
    port = free_port()
    with pytest.MonkeyPatch.context() as mp:  # the server's environment only
        mp.setenv("BROKER_NATIVE_THREADS", request.param)
        proc = start_server(
            base / "store", port, base / "server.log", ("--front", "native"), workers=1
        )
    ep = f"127.0.0.1:{port}"
    runs = {n: spawn(n, ep, f"n{port}", base) for n in ("normal", "transaction")}
    ch = grpc.insecure_channel(ep)
    yield {
        "endpoint": ep,
        "port": port,
        "runs": runs,
        "channel": ch,
        "stub": sgrpc.MessagingServiceStub(ch),
        "log": base / "server.log",
        "store": base / "store",
    }
    ch.close()
    for p in runs.values():
        if p.poll() is None:
            p.kill()
    assert stop_server(proc) == 0
    log = (base / "server.log").read_text()
    assert "native front" in log  # this really was the native front
    assert MODES[request.param] in log
    assert "Traceback" not in log, log[-4000:]


def _send(stub, topic: str, body: bytes) -> spb.SendMessageResponse:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_type = pb.NORMAL
    return stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=MD)


def _receive(stub, topic: str, group: str, poll_s: int, invisible_s: int = 30):
    req = receive_request(topic, group, invisible_s=invisible_s, poll_s=poll_s)
    return [
        r.message
        for r in stub.ReceiveMessage(req, metadata=MD, timeout=poll_s + 5)
        if r.HasField("message")
    ]


def test_official_client_sends_receives_and_acks(native) -> None:
    r = result(native["runs"]["normal"])
    assert sorted(r["got_ids"]) == sorted(r["sent_ids"])
    assert r["bodies"] == sorted(
        [f"m{i}" for i in range(5)] + [f"async{i}" for i in range(5)]
    )
    assert r["props"]["m3"] == {"n": "3"}
    assert r["empty_after"] == 0


def test_official_client_transaction_checked_back_over_telemetry(native) -> None:
    r = result(native["runs"]["transaction"])
    assert r["tx_id"]
    # "checked" was left open by its producer: committed by the check-back
    # pushed on its Telemetry stream; the rolled-back one never delivered.
    assert r["got"] == ["checked", "committed"]
    assert "checked" in r["checked"]


def test_long_poll_is_answered_when_a_message_arrives_then_acked(native) -> None:
    stub = native["stub"]
    topic, group = "NatPoll", "GID_natpoll"
    assert _send(stub, topic, b"warm-up").status.code == C.OK
    assert [m.body for m in _receive(stub, topic, group, 2)] == [b"warm-up"]
    got: list = []
    t0 = time.monotonic()
    waiter = threading.Thread(
        target=lambda: got.extend(_receive(stub, topic, group, 10))
    )
    waiter.start()
    time.sleep(0.7)  # the poll waits
    assert waiter.is_alive()
    assert _send(stub, topic, b"late").status.code == C.OK
    waiter.join(12)
    took = time.monotonic() - t0
    assert [m.body for m in got] == [b"late"]
    assert took < 3, took  # answered on arrival, not at the poll's end
    ack = spb.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[
            spb.AckMessageEntry(
                message_id=got[0].system_properties.message_id,
                receipt_handle=got[0].system_properties.receipt_handle,
            )
        ],
    )
    r = stub.AckMessage(ack, metadata=MD)
    assert r.status.code == C.OK, r
    assert r.entries[0].status.code == C.OK
    assert _receive(stub, topic, group, 1) == []  # acknowledged: gone


def test_a_request_that_does_not_decode_is_bad_request(native) -> None:
    raw = native["channel"].unary_unary(
        SERVICE + "SendMessage",
        request_serializer=lambda b: b,
        response_deserializer=spb.SendMessageResponse.FromString,
    )
    r = raw(b"\xff\xff\xff\xff not protobuf", metadata=MD, timeout=5)
    assert r.status.code == C.BAD_REQUEST
    # ... and one the endpoint does not implement: RocketMQ's own code
    r2 = native["stub"].GetOffset(spb.GetOffsetRequest(), metadata=MD, timeout=5)
    assert r2.status.code == C.NOT_IMPLEMENTED


def test_an_unknown_method_is_unimplemented(native) -> None:
    raw = native["channel"].unary_unary(
        "/no.Such/Method", request_serializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as err:
        raw(b"", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_telemetry_settings_answered_and_half_close_ends_the_stream(native) -> None:
    cmd = spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name="NatTele")]),
        )
    )
    t0 = time.monotonic()
    replies = list(
        native["stub"].Telemetry(
            iter([cmd]), metadata=(("x-mq-client-id", "native-tele"),), timeout=10
        )
    )
    # The reply to the settings, then the end (status OK) once the client
    # closed its side: not the call's deadline.
    assert len(replies) == 1 and replies[0].status.code == C.OK
    assert replies[0].settings.publishing.max_body_size > 0
    assert time.monotonic() - t0 < 5


def test_a_cancelled_receive_reaches_the_handler(native) -> None:
    """A long poll the client cancels must end in the endpoint: if it kept
    waiting, the send below would wake it, it would pop the message for its
    60 s invisible time and write it to a stream nobody reads, and the next
    receive would find nothing."""
    stub = native["stub"]
    topic, group = "NatCancel", "GID_natcancel"
    assert _send(stub, topic, b"warm-up").status.code == C.OK
    assert [m.body for m in _receive(stub, topic, group, 2)] == [b"warm-up"]
    call = stub.ReceiveMessage(
        receive_request(topic, group, invisible_s=60, poll_s=15),
        metadata=MD,
        timeout=20,
    )
    time.sleep(0.7)
    call.cancel()
    with pytest.raises(grpc.RpcError) as err:
        list(call)
    assert err.value.code() == grpc.StatusCode.CANCELLED
    time.sleep(0.5)
    assert _send(stub, topic, b"after-cancel").status.code == C.OK
    time.sleep(1.0)
    assert [m.body for m in _receive(stub, topic, group, 3)] == [b"after-cancel"]


#: a process holding a Telemetry stream open (settings sent) until killed
TELEMETRY_HOLDER = """
import sys, time, grpc
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc
stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(sys.argv[1]))
cmd = spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
def commands():
    yield cmd
    time.sleep(3600)
for reply in stub.Telemetry(commands(), metadata=(("x-mq-client-id", sys.argv[2]),)):
    print("settled", flush=True)
"""


def _telemetry_of(store, client_id: str) -> bool | None:
    """Whether clients.json has ``client_id``'s Telemetry stream open (None:
    not listed)."""
    try:
        data = json.loads((store / "clients.json").read_text())
    except (OSError, ValueError):
        return None
    for c in data["clients"]:
        if c["client_id"] == client_id:
            return bool(c["telemetry"])
    return None


def _until(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_a_client_that_dies_ends_its_telemetry_stream(native) -> None:
    """The client process is killed (no cancel, no half-close: its
    connection just goes): the Telemetry handler must end, so that the client
    is not taken for a live producer that check-backs could reach. (The front
    tells Python as the stream's end or its cancellation, whichever gRPC
    sees first: with neither reaching Python this fails.)"""
    who = f"native-dies-{native['port']}"
    holder = subprocess.Popen(
        [PY, "-c", TELEMETRY_HOLDER, native["endpoint"], who],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "settled"
        assert _until(lambda: _telemetry_of(native["store"], who) is True, 10)
    finally:
        holder.kill()
        holder.wait()
    assert _until(lambda: _telemetry_of(native["store"], who) is False, 10)
