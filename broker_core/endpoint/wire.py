"""What the wire needs: RocketMQ status codes and the one map from broker
errors to them, protobuf time and digest conversions, the system properties
that are not shown as user properties."""

from __future__ import annotations

import functools
import hashlib
import time
from types import SimpleNamespace
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.endpoint.config import MAX_CALL_ENTRIES
from broker_core.endpoint.pop import (
    SHARDING_KEY,
)
from broker_core.errors import BrokerError

#: The RocketMQ codes by name (``C.OK``): ``pb.Code``'s values as plain
#: attributes, since ``EnumTypeWrapper.__getattr__`` is Python code run at
#: every use (a few per call on the hot paths).
C: Any = SimpleNamespace(**dict(pb.Code.items()))

#: Properties the broker keeps for itself: not shown as user properties.
SYSTEM_PROPS = frozenset(
    {
        "TAGS",
        "KEYS",
        "UNIQ_KEY",
        SHARDING_KEY,
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_OUT_MS",
        "TIMER_DEQUEUE_MS",
        "DELAY_SRC",
        "TRAN_MSG",
        "PGROUP",
        "__transactionId__",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "MSG_REGION",
        "TRACE_ON",
        "WAIT",
    }
)

ALL_TYPES = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION, pb.PRIORITY]


def status(code: int, message: str = "") -> pb.Status:
    """A status to put in a response (the field copies it: never mutate it)."""
    if not message:
        return _plain_status(code)
    return pb.Status(code=code, message=message)


def too_many(count: int, what: str) -> pb.Status | None:
    """``BAD_REQUEST`` for a call of more than ``MAX_CALL_ENTRIES`` ``what``
    (answered before any is read: 150,000 held every client for seconds);
    None within it."""
    if count <= MAX_CALL_ENTRIES:
        return None
    return pb.Status(
        code=C.BAD_REQUEST,
        message=f"{count} {what} in one call: at most {MAX_CALL_ENTRIES}",
    )


def overall_status(statuses: list[pb.Status]) -> pb.Status:
    """A batch response's own status from its entries': OK when all are, the
    error itself for a single entry, else MULTIPLE_RESULTS (as RocketMQ)."""
    first_err = next((st for st in statuses if st.code != C.OK), None)
    if first_err is None:
        return status(C.OK)
    return first_err if len(statuses) == 1 else status(C.MULTIPLE_RESULTS)


@functools.cache
def _plain_status(code: int) -> pb.Status:
    return pb.Status(code=code, message=pb.Code.Name(code))


def local_utc_offset_min() -> int:
    """This host's offset from UTC now, in minutes (``time.localtime``)."""
    return int(time.localtime().tm_gmtoff // 60)


def body_digest(body: bytes) -> pb.Digest:
    """MD5 as upper-case hex: what the Apache proxy sends and every official
    client (Java, Python, Node.js, Go) verifies the same way. (A CRC32 in hex
    made the Node.js client, which compares a decimal string, reject every
    message as corrupted.)"""
    return pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())


def ts_ms(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def dur_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def error_code(exc: Exception) -> int:
    """Return the RocketMQ status code for a broker error: its class's
    ``grpc_code`` (``broker_core.errors``); anything else is internal."""
    if isinstance(exc, BrokerError):
        return int(exc.grpc_code)
    return C.INTERNAL_ERROR


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return str(v)
    return ""
