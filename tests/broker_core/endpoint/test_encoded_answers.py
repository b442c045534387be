"""Answers written as protobuf bytes by hand (``wire.ok_send_response``,
``ok_ack_response``, ``Consuming._encode``'s framing) decode to exactly the
messages the protobuf library builds, byte for byte where field order is
canonical."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.endpoint.wire import (
    C,
    ok_ack_response,
    ok_send_response,
    status,
    varint,
)

SEND_CASES = [
    [("01AABBCCDDEEFF00000000000000001A", "", 12345, "")],
    [("01A", "tx-1", 0, "recall"), ("é漢", "", -1, "")],
    [("x" * 200, "", 2**40, "h" * 300), ("y", "", 1, "")],
]


@pytest.mark.parametrize("entries", SEND_CASES)
def test_ok_send_response_is_what_protobuf_builds(entries) -> None:
    want = spb.SendMessageResponse(
        status=status(C.OK),
        entries=[
            spb.SendResultEntry(
                status=status(C.OK), message_id=m, transaction_id=t, offset=o,
                recall_handle=r,
            )
            for m, t, o, r in entries
        ],
    )  # fmt: skip
    got = ok_send_response(entries)
    assert spb.SendMessageResponse.FromString(got) == want
    assert got == want.SerializeToString()


@pytest.mark.parametrize(
    "entries", [[("01A", "h" * 120)], [("a", "b"), ("é", "d" * 300)], []]
)
def test_ok_ack_response_is_what_protobuf_builds(entries) -> None:
    want = spb.AckMessageResponse(
        status=status(C.OK),
        entries=[
            spb.AckMessageResultEntry(
                message_id=m, receipt_handle=h, status=status(C.OK)
            )
            for m, h in entries
        ],
    )
    got = ok_ack_response(entries)
    assert spb.AckMessageResponse.FromString(got) == want
    assert got == want.SerializeToString()


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1])
def test_varint_and_the_message_framing(n) -> None:
    assert varint(n) == _reference(n)
    msg = pb.Message(body=b"x" * (n % 5000), topic=pb.Resource(name="T"))
    raw = msg.SerializeToString()
    framed = bytes([2 << 3 | 2]) + varint(len(raw)) + raw
    assert framed == spb.ReceiveMessageResponse(message=msg).SerializeToString()


def _reference(n: int) -> bytes:
    """The varint protobuf writes for ``n``, read off an encoded int64 field
    (``SystemProperties.queue_offset``, field 14: key 14 << 3)."""
    if n == 0:
        return b"\x00"  # a zero field is not written at all
    raw = pb.SystemProperties(queue_offset=n).SerializeToString()
    assert raw[0] == 14 << 3
    return raw[1:]
