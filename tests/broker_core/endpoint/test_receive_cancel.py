"""A Receive cancelled while the endpoint pops (client gone, deadline passed)
must not hide what it popped for the whole invisible duration: the popped
messages become visible again at once, their attempt not counted.

The pop is slowed down (the one injected fault) so that the cancellation lands
while it runs on the consumer thread; everything else is the real endpoint over
a real store, driven through its RPC handler."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core import Broker, Message
from broker_core.endpoint.config import EndpointConfig
from broker_core.endpoint.server import Endpoint
from tests.broker_core.endpoint.test_nonblocking import receive_request


class Context:
    """What the handler asks of a grpc.aio ServicerContext."""

    def time_remaining(self):
        return None

    def invocation_metadata(self):
        return (("x-mq-client-id", "cancel-test"),)

    def peer(self):
        return "ipv4:127.0.0.1:1"


async def _answers(ep: Endpoint, req: Any, context: Any) -> Any:
    """``ReceiveMessage``'s answers, the messages it streams encoded
    (``Consuming._encode``) decoded."""
    async for r in ep.consuming.ReceiveMessage(req, context):
        yield spb.ReceiveMessageResponse.FromString(r) if isinstance(r, bytes) else r


async def _collect(ep: Endpoint, topic: str) -> list[pb.Message]:
    out = []
    req = receive_request(topic, "GID_cancel", batch=4, invisible_s=60, poll_s=5)
    async for r in _answers(ep, req, Context()):
        if r.HasField("message"):
            out.append(r.message)
    return out


def test_a_receive_cancelled_mid_pop_releases_what_it_popped(tmp_path) -> None:
    with Broker.open(tmp_path / "store") as broker:
        broker.create_topic("Cancelled", read_queue_nums=1)
        broker.send(Message("Cancelled", b"m1"))
        ep = Endpoint(broker, EndpointConfig(port=0))
        real_pop = ep.pop.pop
        popped = []

        def slow_pop(*args):
            got = real_pop(*args)
            popped.extend(got)
            time.sleep(0.5)  # the client goes away meanwhile
            return got

        async def scenario() -> list[pb.Message]:
            ep.pop.pop = slow_pop
            task = asyncio.create_task(_collect(ep, "Cancelled"))
            await asyncio.sleep(0.2)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            await asyncio.sleep(0.6)  # the pop finishes; the release follows
            ep.pop.pop = real_pop
            return await asyncio.wait_for(_collect(ep, "Cancelled"), 3)

        try:
            # A loop of its own in a thread of its own (a browser test may
            # have left one running in this thread).
            with ThreadPoolExecutor(1) as pool:
                again = pool.submit(lambda: asyncio.run(scenario())).result()
        finally:
            ep.close()
    assert len(popped) == 1, "the cancellation did not land during the pop"
    assert [m.body for m in again] == [b"m1"]
    # Delivered once for real: the cancelled pop's attempt is not counted.
    assert again[0].system_properties.delivery_attempt == 1


def test_a_call_ended_after_a_message_was_handed_over_keeps_it_invisible(
    tmp_path,
) -> None:
    """The Go client cancels its call as soon as it has read the messages:
    the handler is then closed at the yield that handed a message over. That
    message reached the client; it must stay invisible for its invisible
    duration (it was made visible at once, and a ChangeInvisibleDuration the
    client sent right after was overtaken: found by the conformance suite)."""
    with Broker.open(tmp_path / "store") as broker:
        broker.create_topic("Handed", read_queue_nums=1)
        broker.send(Message("Handed", b"m1"))
        ep = Endpoint(broker, EndpointConfig(port=0))

        async def scenario() -> tuple[list[bytes], list[pb.Message]]:
            req = receive_request("Handed", "GID_handed", batch=4, invisible_s=60,
                                  poll_s=5)  # fmt: skip
            gen = ep.consuming.ReceiveMessage(req, Context())
            got = []
            async for r in gen:
                if isinstance(r, bytes):  # a message, encoded by the handler
                    got.append(spb.ReceiveMessageResponse.FromString(r).message.body)
                    break  # the client has it and ends the call here
            await gen.aclose()
            await asyncio.sleep(0.5)  # a release would have run by now
            req2 = receive_request("Handed", "GID_handed", batch=4, invisible_s=60,
                                   poll_s=1)  # fmt: skip
            again = []
            async for r in _answers(ep, req2, Context()):
                if r.HasField("message"):
                    again.append(r.message)
            return got, again

        try:
            with ThreadPoolExecutor(1) as pool:
                got, again = pool.submit(lambda: asyncio.run(scenario())).result()
        finally:
            ep.close()
    assert got == [b"m1"]
    assert again == []  # still invisible: not handed out a second time


async def _receive(ep: Endpoint, topic: str, attempt: str, poll_s: int = 1) -> list:
    req = receive_request(topic, "GID_attempt", batch=4, invisible_s=60, poll_s=poll_s)
    req.attempt_id = attempt
    return [
        r.message async for r in _answers(ep, req, Context()) if r.HasField("message")
    ]


def test_a_retried_receive_attempt_gets_what_the_failed_call_popped(tmp_path) -> None:
    """The official clients send a receive's attempt id again only when that
    call failed on their side (deadline, broken stream): what it popped never
    reached them and is handed out again now, not after its invisibility (60
    s here; for a push consumer, auto-renewed for half an hour)."""
    with Broker.open(tmp_path / "store") as broker:
        broker.create_topic("Attempts", read_queue_nums=1)
        broker.send(Message("Attempts", b"m1"))
        ep = Endpoint(broker, EndpointConfig(port=0))

        async def scenario() -> tuple[list, ...]:
            first = await _receive(ep, "Attempts", "attempt-1")
            other = await _receive(ep, "Attempts", "attempt-2")  # still invisible
            retried = await _receive(ep, "Attempts", "attempt-1")
            ack = spb.AckMessageRequest(
                group=pb.Resource(name="GID_attempt"),
                topic=pb.Resource(name="Attempts"),
                entries=[
                    spb.AckMessageEntry(
                        message_id=retried[0].system_properties.message_id,
                        receipt_handle=retried[0].system_properties.receipt_handle,
                    )
                ],
            )
            acked = await ep.consuming.AckMessage(ack, Context())
            # acknowledged: the same attempt again finds nothing to give back
            after = await _receive(ep, "Attempts", "attempt-1")
            return first, other, retried, acked, after

        try:
            with ThreadPoolExecutor(1) as pool:
                first, other, retried, acked, after = pool.submit(
                    lambda: asyncio.run(scenario())
                ).result()
        finally:
            ep.close()
    assert [m.body for m in first] == [b"m1"]
    assert other == []
    assert [m.body for m in retried] == [b"m1"]
    # the attempt that never arrived is not counted
    assert retried[0].system_properties.delivery_attempt == 1
    assert (
        retried[0].system_properties.receipt_handle
        != first[0].system_properties.receipt_handle
    )
    assert acked.status.code == pb.OK
    assert after == []
