"""The batch path of the hot unary RPCs (``Method.batch``): the calls of one
drain of the native front to SendMessage or AckMessage are checked call by
call as the per-call wrapping does (authentication, BAD_REQUEST, namespaces,
forwarding) and stored in one append (acknowledged in one transaction),
without a task per call; what the batch cannot answer without waiting goes
the per-call way. Driven in-process: the real endpoint over a real store, and
``NativeServer``'s dispatch with a stand-in for the C++ front."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import hashlib
import hmac
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core import Broker
from broker_core.endpoint.coalesce import PER_CALL
from broker_core.endpoint.config import EndpointConfig
from broker_core.endpoint.native_front import NativeContext
from broker_core.endpoint.server import Endpoint, Method, endpoint_methods
from tests.broker_core.endpoint.test_nonblocking import receive_request

C = pb.Code
AK, SK = "batch-ak", "batch-sk"


def signed(client: str = "batch-client", ns: str = "") -> tuple[tuple[str, str], ...]:
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    sig = hmac.new(SK.encode(), date.encode(), hashlib.sha1).hexdigest()
    md = [
        ("x-mq-client-id", client),
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-date-time, "
            f"Signature={sig}",
        ),
    ]
    if ns:
        md.append(("x-mq-namespace", ns))
    return tuple(md)


def ctx(md: tuple[tuple[str, str], ...]) -> NativeContext:
    return NativeContext(md, "ipv4:127.0.0.1:1", 10.0)


def send_req(
    topic: str, body: bytes = b"b", msg_id: str = "", ns: str = "", gz: bool = False
) -> spb.SendMessageRequest:
    m = pb.Message(topic=pb.Resource(name=topic, resource_namespace=ns), body=body)
    m.system_properties.message_type = pb.NORMAL
    if msg_id:
        m.system_properties.message_id = msg_id
    if gz:
        m.body = gzip.compress(body)
        m.system_properties.body_encoding = pb.GZIP
    return spb.SendMessageRequest(messages=[m])


def _in_own_loop(coro_fn: Any) -> Any:
    # A loop of its own in a thread of its own (a browser test may have left
    # one running in this thread).
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


@pytest.fixture
def endpoint(tmp_path):
    with Broker.open(tmp_path / "store") as broker:
        for t in ("Batch", "Other", "ns1%Batch"):
            broker.create_topic(t, read_queue_nums=1)
        ep = Endpoint(broker, EndpointConfig(port=0, credentials={AK: SK}))
        try:
            yield ep
        finally:
            ep.close()


def bodies(ep: Endpoint, topic: str) -> list[bytes]:
    r = ep.broker.pull("GID_reader", topic, 0, 0, 10)
    return [m.body for m in r.messages]


def _method(ep: Endpoint, name: str) -> Method:
    """The method, its batch answers decoded (OK answers come encoded by
    hand: ``wire.ok_send_response``, ``ok_ack_response``)."""
    m = next(m for m in endpoint_methods(ep) if m.name == name)
    if m.batch is None:
        return m
    resp = getattr(spb, f"{name}Response")
    many = m.batch

    def batch(calls: list[tuple[Any, Any]]) -> list[Any]:
        return [resp.FromString(r) if isinstance(r, bytes) else r for r in many(calls)]

    return dataclasses.replace(m, batch=batch)


def test_only_the_hot_unary_rpcs_have_a_batch(endpoint) -> None:
    have = {m.name for m in endpoint_methods(endpoint) if m.batch is not None}
    assert have == {"SendMessage", "AckMessage"}


def test_a_mixed_batch_gets_each_call_its_own_answer(endpoint) -> None:
    send = _method(endpoint, "SendMessage")
    big = b"x" * (endpoint.max_body + 1)
    calls = [
        (send_req("Batch", b"one", msg_id="01" + "A" * 32), ctx(signed())),
        (send_req("Batch", b"unsigned"), ctx((("x-mq-client-id", "c"),))),
        (None, ctx(signed())),  # did not decode
        (spb.SendMessageRequest(), ctx(signed())),  # no message
        (send_req("Batch", b"in ns1", ns="ns1"), ctx(signed())),
        (send_req("Batch", b"header ns1"), ctx(signed(ns="ns1"))),
        (send_req("Batch", b"bad ns", ns="bad ns!"), ctx(signed())),
        (send_req("Batch", big), ctx(signed())),
        (send_req("%DLQ%G", b"forbidden"), ctx(signed())),  # no such topic: writer
        (send_req("Batch", b"zipped", gz=True), ctx(signed())),  # the writer's
        (send_req("Other", b"two"), ctx(signed())),
    ]
    out = send.batch(calls)
    codes = [r if r is PER_CALL else r.status.code for r in out]
    assert codes == [
        C.OK,
        C.UNAUTHORIZED,
        C.BAD_REQUEST,
        C.BAD_REQUEST,
        C.OK,
        C.OK,
        C.BAD_REQUEST,
        C.MESSAGE_BODY_TOO_LARGE,
        PER_CALL,
        PER_CALL,
        C.OK,
    ]
    # one append for the four stored (and the one too large)
    assert endpoint.sending.tick.batches == 1
    assert endpoint.sending.tick.items == 5
    assert endpoint.counters["sent"] == 4
    store = endpoint.store
    assert bodies(endpoint, "ns1%Batch") == [b"in ns1", b"header ns1"]
    assert bodies(endpoint, "Batch") == [b"one"]
    assert store.has_topic("Other")
    # A retry of the first message in a later batch: its first result.
    retry = send_req("Batch", b"one", msg_id="01" + "A" * 32)
    again = send.batch([(retry, ctx(signed()))])
    assert again[0].entries[0].offset == out[0].entries[0].offset
    assert endpoint.counters["retries_deduplicated"] == 1
    # The zipped one, served per call (its request decoded again), is stored.
    r = _in_own_loop(
        lambda: send.handler(send_req("Batch", b"zipped", gz=True), ctx(signed()))
    )
    assert r.status.code == C.OK


def test_the_batch_answers_as_the_per_call_handler(endpoint) -> None:
    """The same requests, one batch (what it leaves served per call, as the
    front does) against one handler call each: the same codes."""
    send = _method(endpoint, "SendMessage")

    def requests() -> list[tuple[Any, NativeContext]]:
        return [
            (send_req("Batch", b"a"), ctx(signed())),
            (send_req("Batch", b"b"), ctx((("x-mq-client-id", "c"),))),
            (None, ctx(signed())),
            (send_req("Batch", b"c", ns="ns1"), ctx(signed(ns="ns2"))),
            (send_req("Batch", b"d", ns="a%b"), ctx(signed())),
            (send_req("", b"e"), ctx(signed())),
            (send_req("%RETRY%G", b"f"), ctx(signed())),
            (spb.SendMessageRequest(), ctx(signed())),
        ]

    async def batched() -> list[int]:
        out = send.batch(requests())
        for i, (q, c) in enumerate(requests()):
            if out[i] is PER_CALL:
                out[i] = await send.handler(q, c)
        return [r.status.code for r in out]

    async def one_by_one() -> list[int]:
        return [(await send.handler(q, c)).status.code for q, c in requests()]

    batch = _in_own_loop(batched)
    assert batch == _in_own_loop(one_by_one)
    assert batch[:3] == [C.OK, C.UNAUTHORIZED, C.BAD_REQUEST]


class _Slave:
    """A cluster node that takes no writes (its master elsewhere)."""

    may_act = False
    sync = False

    def replicas_short(self) -> None:
        return None

    def close(self) -> None:
        pass


def test_calls_a_slave_would_forward_go_per_call(endpoint) -> None:
    endpoint.node = _Slave()
    send = _method(endpoint, "SendMessage")
    ack = _method(endpoint, "AckMessage")
    out = send.batch(
        [
            (send_req("Batch", b"a"), ctx(signed())),
            (send_req("Batch", b"b"), ctx(())),
            (None, ctx(signed())),
        ]
    )
    assert out[0] is PER_CALL
    assert [r.status.code for r in out[1:]] == [C.UNAUTHORIZED, C.BAD_REQUEST]
    ack_req = spb.AckMessageRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="Batch"),
        entries=[spb.AckMessageEntry(receipt_handle="x")],
    )
    assert ack.batch([(ack_req, ctx(signed()))]) == [PER_CALL]
    assert endpoint.sending.tick.batches == 0


def test_a_sync_master_and_a_busy_writer_go_per_call(endpoint) -> None:
    send = _method(endpoint, "SendMessage")
    endpoint.sending.group.busy = True
    assert send.batch([(send_req("Batch"), ctx(signed()))]) == [PER_CALL]
    endpoint.sending.group.busy = False

    class SyncMaster(_Slave):
        may_act = True
        sync = True

    endpoint.node = SyncMaster()
    assert send.batch([(send_req("Batch"), ctx(signed()))]) == [PER_CALL]
    assert endpoint.counters["sent"] == 0


async def _decoded(stream: Any) -> Any:
    """A ReceiveMessage handler's answers, those it encoded itself decoded."""
    async for r in stream:
        yield spb.ReceiveMessageResponse.FromString(r) if isinstance(r, bytes) else r


def _receive(ep: Endpoint, topic: str, group: str, n: int) -> list[pb.Message]:
    async def go() -> list[pb.Message]:
        recv = _method(ep, "ReceiveMessage")
        req = receive_request(topic, group, batch=n, invisible_s=60, poll_s=1)
        return [
            r.message
            async for r in _decoded(recv.handler(req, ctx(signed())))
            if r.HasField("message")
        ]

    return _in_own_loop(go)


def test_acks_of_a_batch_in_one_transaction_each_its_answer(endpoint) -> None:
    send = _method(endpoint, "SendMessage")
    send.batch([(send_req("Batch", b"m%d" % i), ctx(signed())) for i in range(3)])
    got = _receive(endpoint, "Batch", "GID_batch", 3)
    assert len(got) == 3
    ack = _method(endpoint, "AckMessage")

    def ack_req(*msgs: Any, handle: str = "") -> spb.AckMessageRequest:
        return spb.AckMessageRequest(
            group=pb.Resource(name="GID_batch"),
            topic=pb.Resource(name="Batch"),
            entries=[
                spb.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=handle or m.system_properties.receipt_handle,
                )
                for m in msgs
            ],
        )

    out = ack.batch(
        [
            (ack_req(got[0]), ctx(signed())),
            (ack_req(got[1]), ctx(())),  # unsigned: not acknowledged
            (ack_req(got[2], got[2]), ctx(signed())),  # twice in one call
            (ack_req(got[0], handle="garbage"), ctx(signed())),
            (spb.AckMessageRequest(group=pb.Resource(name="GID_batch")), ctx(signed())),
            (None, ctx(signed())),
        ]
    )
    assert [r.status.code for r in out] == [
        C.OK,
        C.UNAUTHORIZED,
        C.MULTIPLE_RESULTS,
        C.INVALID_RECEIPT_HANDLE,
        C.BAD_REQUEST,
        C.BAD_REQUEST,
    ]
    assert [e.status.code for e in out[2].entries] == [
        C.OK,
        C.INVALID_RECEIPT_HANDLE,
    ]
    assert endpoint.counters["acked"] == 2
    assert endpoint.consuming.ack_tick.batches == 1
    # the pop state held elsewhere: per call
    with endpoint.threads.pop_lock:
        assert ack.batch([(ack_req(got[1]), ctx(signed()))]) == [PER_CALL]


class FakeFront:
    """Stands in for ``broker_core._native.Front``: hands over the events it
    is given, keeps what is submitted."""

    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        self.events = events
        self.submits: list[list[tuple[Any, ...]]] = []

    def drain(self) -> list[tuple[Any, ...]]:
        out, self.events = self.events, []
        return out

    def submit(self, ops: list[tuple[Any, ...]]) -> None:
        self.submits.append(list(ops))


def test_native_dispatch_answers_a_drain_in_one_submit(endpoint) -> None:
    pytest.importorskip("broker_core._native")
    from broker_core.endpoint.native_front import NativeServer

    methods = endpoint_methods(endpoint)
    server = NativeServer(methods, 16 << 20)
    nat = server._native
    idx = {m.name: i for i, m in enumerate(methods)}
    md = signed()

    def new(cid: int, name: str, data: bytes, meta: Any = md) -> tuple[Any, ...]:
        return (nat.NEW_CALL, cid, idx[name], meta, "ipv4:127.0.0.1:1", 10.0, data)

    def data(req: Any) -> bytes:
        return req.SerializeToString()

    events = [
        new(1, "SendMessage", data(send_req("Batch", b"one"))),
        new(2, "SendMessage", b"\xff\xff not protobuf"),
        new(3, "SendMessage", data(send_req("Batch", b"unsigned")), ()),
        new(4, "SendMessage", data(send_req("Batch", b"zipped", gz=True))),
        new(5, "SendMessage", data(send_req("Batch", b"gone"))),
        (nat.CANCELLED, 5, 0, None, None, None, None),
        new(6, "SendMessage", data(send_req("Batch", b"two"))),
    ]
    fake = server.front = FakeFront(events)

    async def go() -> None:
        server._loop = asyncio.get_running_loop()
        server._drain()
        # The batch's answers went out in one submit, before any task ran;
        # the zipped one (the writer's) is a task of its own.
        assert len(fake.submits) == 1
        assert list(server.calls) == [4]
        task = server.calls[4].task
        assert task is not None
        await task
        await asyncio.sleep(0)

    _in_own_loop(go)
    first = {op[0]: op for op in fake.submits[0]}
    assert sorted(first) == [1, 2, 3, 6]

    def code(op: tuple[Any, ...]) -> int:
        assert op[1] == nat.FINISH and op[3] == 0
        return spb.SendMessageResponse.FromString(op[2]).status.code

    assert [code(first[c]) for c in (1, 2, 3, 6)] == [
        C.OK,
        C.BAD_REQUEST,
        C.UNAUTHORIZED,
        C.OK,
    ]
    assert [code(op) for s in fake.submits[1:] for op in s] == [C.OK]
    # the cancelled one: not stored
    assert bodies(endpoint, "Batch") == [b"one", b"two", b"zipped"]
    assert not server.calls


def test_a_namespaced_receive_gets_bare_names_from_the_encoded_stream(endpoint) -> None:
    """Stream answers are encoded on the consumer thread (full names inside);
    a client in a namespace still gets the bare topic and its namespace, and
    one without a namespace the name as stored."""
    send = _method(endpoint, "SendMessage")
    out = send.batch([(send_req("Batch", b"in ns1", ns="ns1"), ctx(signed()))])
    assert out[0].status.code == C.OK

    async def go(ns: str, topic: str) -> list[pb.Message]:
        recv = _method(endpoint, "ReceiveMessage")
        req = receive_request(topic, "GID_ns", batch=4, invisible_s=60, poll_s=1)
        return [
            r.message
            async for r in _decoded(recv.handler(req, ctx(signed(ns=ns))))
            if r.HasField("message")
        ]

    got = _in_own_loop(lambda: go("ns1", "Batch"))
    assert [(m.topic.resource_namespace, m.topic.name, m.body) for m in got] == [
        ("ns1", "Batch", b"in ns1")
    ]
    assert _in_own_loop(lambda: go("", "Batch")) == []  # another topic
