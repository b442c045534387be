"""What our gRPC endpoint and Apache RocketMQ's proxy answer to bad client input.

    .venv/bin/python bench/bad_input_codes.py [--apache-version 5.3.3]
        [--our-port P] [--grpc-port P] [--namesrv-port P] [--broker-port P]
        [--remoting-port P] [--heap 512m] [--json OUT] [--only SUBSTRING ...]

Starts our endpoint (``python -m broker_core serve`` on a temporary store) and
Apache RocketMQ (NameServer + proxy in local mode, ``bench/peers/rocketmq.py``)
on free ports above 18000 (or the ones given), sends every input below to both
through the raw gRPC stubs of the protocol (``apache.rocketmq.v2`` as shipped
by ``rocketmq-python-client``: the official clients refuse many of these
inputs before sending them), and prints a markdown table: input | our answer |
Apache's answer, each as the numeric ``apache.rocketmq.v2.Code``, its name and
the status message shortened. An answer that is a gRPC status rather than a
Code (the call failed, the stream was closed) is printed as ``gRPC <STATUS>``.
Both servers are stopped at the end, also on failure or Ctrl-C.

Both sides get the same requests: each message has a message id (Apache's
proxy refuses a message without one, ILLEGAL_MESSAGE_ID) and a born
timestamp; each ReceiveMessage comes from a client id whose Telemetry stream
has announced a SIMPLE_CONSUMER's settings first (Apache's proxy needs them);
the topics and groups are made on both (Apache through the peer's admin
helper, ours with ``python -m broker_core topic create`` before it serves);
on Apache also ``%RETRY%GBadInput`` and ``%DLQ%GBadInput``, as a group that
has consumed and dead-lettered has them (``...%GNeverRan`` is a group that
never did). Apache runs with its defaults plus ``enablePropertyFilter=true``
(SQL92 filters) and ``minInvisibleTimeMillsForRecv=1000`` (the redelivery row
uses an invisible duration of 2 s); ours with ``serve``'s defaults. About two
minutes, most of it Apache's start. docs/grpc.md's "Bad input and the answer"
table quotes the result.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, this file's directory comes first on sys.path, and
# bench/grpc.py would shadow grpcio: keep it off, put the repository root on.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
ROOT = Path(_HERE).parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc  # noqa: E402

from bench.peers.rocketmq import DEFAULT_VERSION, ApacheRocketMQ  # noqa: E402

MiB = 1 << 20
DAY_MS = 86_400_000

# Names made on both sides before the inputs are sent.
T_NORMAL = "BadInput"
T_DELAY = "BadInputDelay"
T_TX = "BadInputTx"
T_FILTER = "BadInputSql"
G = "GBadInput"
G_SQL = "GBadInputSql"
G_STALE = "GBadInputStale"
RETRY = f"%RETRY%{G}"
DLQ = f"%DLQ%{G}"
_whole_gzip = gzip.compress(bytes(range(256)) * 64)
_half_gzip = _whole_gzip[: len(_whole_gzip) // 2]
TOPICS = {T_NORMAL: "NORMAL", T_DELAY: "DELAY", T_TX: "TRANSACTION", T_FILTER: "NORMAL"}
GROUPS = (G, G_SQL, G_STALE)


# ------------------------------------------------------------------ ports


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    # Something listening on another address of the port counts as taken.
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) != 0


_taken: set[int] = set()


def free_port(lo: int = 18000, hi: int = 32000, around: tuple[int, ...] = (0,)) -> int:
    """A port in [lo, hi) that (with port + each of ``around``) is free now
    and not handed out before by this process (the range stays below the
    kernel's ephemeral ports, where other tests' random ports land)."""
    for _ in range(500):
        p = random.randrange(lo + 2, hi - 2)
        ports = {p + d for d in around}
        if ports & _taken:
            continue
        if all(_bindable(q) for q in ports):
            _taken.update(ports)
            return p
    raise RuntimeError(f"no free port in {lo}-{hi}")


# ------------------------------------------------------------------ answers


@dataclass
class Answer:
    code: int | None = None  # apache.rocketmq.v2.Code, None: a gRPC failure
    message: str = ""
    grpc_status: str = ""  # the gRPC status when the call itself failed
    note: str = ""  # e.g. "message delivered", the per-entry codes

    def text(self, width: int = 60) -> str:
        if self.code is None:
            out = f"gRPC {self.grpc_status}"
        else:
            out = f"{self.code} {code_name(self.code)}"
        msg = " ".join(self.message.split())
        if msg and msg != code_name(self.code or 0):
            if len(msg) > width:
                msg = msg[: width - 1] + "…"
            out += f": {msg}"
        if self.note:
            out += f" ({self.note})"
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": code_name(self.code) if self.code is not None else None,
            "message": self.message,
            "grpc_status": self.grpc_status or None,
            "note": self.note or None,
        }


def code_name(code: int) -> str:
    try:
        return pb.Code.Name(code)
    except ValueError:
        return "?"


def of_status(st: Any, note: str = "") -> Answer:
    return Answer(code=st.code, message=st.message, note=note)


def of_rpc_error(e: grpc.RpcError) -> Answer:
    code = e.code() if callable(getattr(e, "code", None)) else None
    details = e.details() if callable(getattr(e, "details", None)) else str(e)
    return Answer(grpc_status=code.name if code else "?", message=details or "")


# ------------------------------------------------------------------ targets


class Target:
    """One server's gRPC endpoint and the means to make its topics."""

    def __init__(self, name: str, host: str, port: int):
        self.name = name
        self.host = host
        self.port = port
        opts = [
            ("grpc.max_send_message_length", 64 * MiB),
            ("grpc.max_receive_message_length", 64 * MiB),
        ]
        self.channel = grpc.insecure_channel(f"{host}:{port}", options=opts)
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self.client_id = self.new_client_id()

    @staticmethod
    def new_client_id() -> str:
        return f"bad-input@{os.getpid()}@{uuid.uuid4().hex[:12]}"

    def md(self, client_id: str | None = None) -> tuple[tuple[str, str], ...]:
        return (
            ("x-mq-client-id", client_id or self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", "5.0.2"),
            ("x-mq-request-id", uuid.uuid4().hex),
        )

    @property
    def endpoints(self) -> pb.Endpoints:
        return pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host=self.host, port=self.port)]
        )

    def close(self) -> None:
        self.channel.close()


def message_id() -> str:
    return "01" + uuid.uuid4().hex.upper()


def msg(
    topic: str,
    body: bytes = b"x",
    *,
    tag: str = "",
    keys: list[str] | None = None,
    props: dict[str, str] | None = None,
    encoding: int = pb.IDENTITY,
    message_type: int = pb.NORMAL,
    deliver_at_ms: int | None = None,
) -> pb.Message:
    sp = pb.SystemProperties(
        tag=tag,
        keys=keys or [],
        message_id=message_id(),
        body_encoding=encoding,  # type: ignore[arg-type]
        message_type=message_type,  # type: ignore[arg-type]
        born_host="127.0.0.1",
    )
    sp.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    if deliver_at_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(deliver_at_ms)
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=sp,
        body=body,
        user_properties=props or {},
    )


def send(t: Target, *messages: pb.Message) -> Answer:
    try:
        r = t.stub.SendMessage(
            spb.SendMessageRequest(messages=list(messages)), metadata=t.md(), timeout=60
        )
    except grpc.RpcError as e:
        return of_rpc_error(e)
    if len(r.entries) > 1:
        # Several messages: the call's status, and how many of each code.
        counts: dict[int, int] = {}
        for e in r.entries:
            counts[e.status.code] = counts.get(e.status.code, 0) + 1
        first_bad = next((e.status for e in r.entries if e.status.code != pb.OK), None)
        note = ", ".join(f"{n} x {c}" for c, n in sorted(counts.items()))
        if first_bad is not None:
            return of_status(first_bad, note=f"entries: {note}")
        return of_status(r.status, note=f"entries: {note}")
    if r.entries and r.status.code == pb.OK:
        return of_status(r.entries[0].status)
    if r.entries and r.entries[0].status.code != pb.OK:
        return of_status(r.entries[0].status)
    return of_status(r.status)


def route(t: Target, topic: str) -> Answer:
    try:
        r = t.stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=t.endpoints),
            metadata=t.md(),
            timeout=15,
        )
    except grpc.RpcError as e:
        return of_rpc_error(e)
    note = f"{len(r.message_queues)} queues" if r.message_queues else ""
    return of_status(r.status, note=note)


def assignment(t: Target, topic: str, group: str) -> Answer:
    try:
        r = t.stub.QueryAssignment(
            spb.QueryAssignmentRequest(
                topic=pb.Resource(name=topic),
                group=pb.Resource(name=group),
                endpoints=t.endpoints,
            ),
            metadata=t.md(),
            timeout=15,
        )
    except grpc.RpcError as e:
        return of_rpc_error(e)
    note = f"{len(r.assignments)} assignments" if r.assignments else ""
    return of_status(r.status, note=note)


@contextlib.contextmanager
def telemetry(
    t: Target, settings: pb.Settings, client_id: str
) -> Iterator[Answer | None]:
    """A Telemetry stream of ``client_id`` that has sent ``settings``; yields
    the server's first answer (None when it sent none within 10 s)."""
    q: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
    q.put(spb.TelemetryCommand(settings=settings))

    def commands() -> Iterator[spb.TelemetryCommand]:
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    call = t.stub.Telemetry(commands(), metadata=t.md(client_id), timeout=300)
    box: list[Any] = []

    def first() -> None:
        try:
            box.append(next(call))
        except StopIteration:
            box.append(Answer(grpc_status="OK", message="stream closed"))
        except grpc.RpcError as e:
            box.append(of_rpc_error(e))

    th = threading.Thread(target=first, daemon=True)
    th.start()
    th.join(10)
    ans: Answer | None = None
    if box:
        got = box[0]
        if isinstance(got, Answer):
            ans = got
        elif got.HasField("status"):
            ans = of_status(got.status)
        else:
            ans = Answer(code=pb.OK, message=got.WhichOneof("command") or "")
    try:
        yield ans
    finally:
        q.put(None)
        call.cancel()


def consumer_settings(
    t: Target, group: str, topic: str, sql: str | None = None
) -> pb.Settings:
    expr = (
        pb.FilterExpression(type=pb.SQL, expression=sql)
        if sql is not None
        else pb.FilterExpression(type=pb.TAG, expression="*")
    )
    s = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        access_point=t.endpoints,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=topic), expression=expr)
            ],
        ),
        user_agent=pb.UA(
            language=pb.PYTHON, version="5.0.2", platform="linux", hostname="bench"
        ),
    )
    s.request_timeout.FromSeconds(3)
    return s


def receive(
    t: Target,
    topic: str,
    group: str,
    *,
    sql: str | None = None,
    poll_s: int = 5,
    invisible_s: int = 30,
    client_id: str | None = None,
) -> tuple[Answer, list[pb.Message]]:
    """One ReceiveMessage from a fresh simple consumer (Telemetry settings
    first), or from ``client_id``, whose Telemetry stream the caller holds
    open; the first status it streamed and the messages."""
    cid = client_id or t.new_client_id()
    settings = consumer_settings(t, group, topic, sql)
    with contextlib.ExitStack() as stack:
        if client_id is None:
            stack.enter_context(telemetry(t, settings, cid))
        expr = (
            pb.FilterExpression(type=pb.SQL, expression=sql)
            if sql is not None
            else pb.FilterExpression(type=pb.TAG, expression="*")
        )
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression=expr,
            batch_size=1,
            invisible_duration=duration_pb2.Duration(seconds=invisible_s),
            long_polling_timeout=duration_pb2.Duration(seconds=poll_s),
        )
        status = None
        got: list[pb.Message] = []
        try:
            for item in t.stub.ReceiveMessage(req, metadata=t.md(cid), timeout=40):
                if item.HasField("status") and status is None:
                    status = item.status
                elif item.HasField("message"):
                    got.append(item.message)
        except grpc.RpcError as e:
            return of_rpc_error(e), got
    note = f"{len(got)} message(s) delivered" if got else ""
    if status is None:
        return Answer(grpc_status="OK", message="no status", note=note), got
    return of_status(status, note=note), got


def heartbeat(t: Target, client_type: int, client_id: str | None = None) -> Answer:
    try:
        r = t.stub.Heartbeat(
            spb.HeartbeatRequest(
                group=pb.Resource(name=G),
                client_type=client_type,  # type: ignore[arg-type]
            ),
            metadata=t.md(client_id),
            timeout=15,
        )
    except grpc.RpcError as e:
        return of_rpc_error(e)
    return of_status(r.status)


def ack(
    t: Target,
    topic: str,
    group: str,
    m: pb.Message,
    handle: str,
    client_id: str | None = None,
) -> Answer:
    try:
        r = t.stub.AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                entries=[
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id, receipt_handle=handle
                    )
                ],
            ),
            metadata=t.md(client_id),
            timeout=15,
        )
    except grpc.RpcError as e:
        return of_rpc_error(e)
    if r.entries and r.entries[0].status.code != pb.OK:
        return of_status(r.entries[0].status)
    return of_status(r.status)


def change_invisible(
    t: Target,
    topic: str,
    group: str,
    m: pb.Message,
    handle: str,
    client_id: str | None = None,
) -> tuple[Answer, str]:
    req = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        receipt_handle=handle,
        message_id=m.system_properties.message_id,
    )
    req.invisible_duration.FromSeconds(30)
    try:
        r = t.stub.ChangeInvisibleDuration(req, metadata=t.md(client_id), timeout=15)
    except grpc.RpcError as e:
        return of_rpc_error(e), ""
    return of_status(r.status), r.receipt_handle


# ------------------------------------------------------------------ inputs


def gzip_members(n: int) -> bytes:
    return gzip.compress(b"a") * n


def _stale_handles(t: Target) -> dict[str, Answer]:
    """Send, receive, then: ack with a handle that ChangeInvisibleDuration
    replaced; ack the message twice; change the invisibility of an acked
    message. All from one consumer whose Telemetry stream stays open (Apache's
    proxy answers ChangeInvisibleDuration of a client without one with an
    internal error)."""
    out: dict[str, Answer] = {}
    cid = t.new_client_id()
    with telemetry(t, consumer_settings(t, G_STALE, T_NORMAL), cid):
        sent = send(t, msg(T_NORMAL, b"stale", tag="stale"))
        m = None
        for _ in range(4):
            _, got = receive(t, T_NORMAL, G_STALE, poll_s=5, client_id=cid)
            if got:
                m = got[0]
                break
        if m is None:
            none = Answer(
                grpc_status="-", message=f"no message received (send: {sent.text()})"
            )
            return {k: none for k in ("replaced", "twice", "change_acked")}
        old = m.system_properties.receipt_handle
        # Apache's receipt handles carry the time they were made in: a
        # ChangeInvisibleDuration in the same millisecond may give the same one.
        time.sleep(0.05)
        changed, new = change_invisible(t, T_NORMAL, G_STALE, m, old, cid)
        out["replaced"] = ack(t, T_NORMAL, G_STALE, m, old, cid)
        if not new:
            out["replaced"].note = f"ChangeInvisibleDuration: {changed.text(30)}"
            new = old
        first = ack(t, T_NORMAL, G_STALE, m, new, cid)
        out["twice"] = ack(t, T_NORMAL, G_STALE, m, new, cid)
        out["twice"].note = f"first ack: {first.text(30)}"
        out["change_acked"] = change_invisible(t, T_NORMAL, G_STALE, m, new, cid)[0]
        # The handle of the first delivery, once the message was delivered
        # again after its invisibility (2 s) ran out (the conformance suite's
        # ack_stale_handle).
        send(t, msg(T_NORMAL, b"redelivered", tag="again"))
        first_delivery = None
        for _ in range(4):
            _, got = receive(
                t, T_NORMAL, G_STALE, poll_s=5, invisible_s=2, client_id=cid
            )
            if got:
                first_delivery = got[0]
                break
        again = None
        end = time.monotonic() + 60
        while first_delivery is not None and time.monotonic() < end:
            _, got = receive(
                t, T_NORMAL, G_STALE, poll_s=5, invisible_s=30, client_id=cid
            )
            mid = first_delivery.system_properties.message_id
            again = next(
                (x for x in got if x.system_properties.message_id == mid), None
            )
            if again is not None:
                break
        if first_delivery is None or again is None:
            out["redelivered"] = Answer(
                grpc_status="-", message="the message was not delivered twice"
            )
        else:
            out["redelivered"] = ack(
                t,
                T_NORMAL,
                G_STALE,
                first_delivery,
                first_delivery.system_properties.receipt_handle,
                cid,
            )
            out[
                "redelivered"
            ].note = f"delivery attempt {again.system_properties.delivery_attempt}"
            ack(
                t, T_NORMAL, G_STALE, again, again.system_properties.receipt_handle, cid
            )
    return out


@dataclass
class Case:
    key: str
    label: str
    run: Callable[[Target], Answer]


def _stale(part: str) -> Callable[[Target], Answer]:
    def run(t: Target) -> Answer:
        cache = t.__dict__.setdefault("_stale", {})
        if not cache:
            cache.update(_stale_handles(t))
        return cache[part]

    return run


def _end_tx_unknown_resolution(t: Target) -> Answer:
    """A real half message, then EndTransaction with resolution 99."""
    m = msg(T_TX, b"half", message_type=pb.TRANSACTION)
    try:
        r = t.stub.SendMessage(
            spb.SendMessageRequest(messages=[m]), metadata=t.md(), timeout=30
        )
    except grpc.RpcError as e:
        return Answer(
            grpc_status="-", message=f"half not sent: {of_rpc_error(e).text()}"
        )
    if not r.entries or r.entries[0].status.code != pb.OK:
        st = r.entries[0].status if r.entries else r.status
        return Answer(grpc_status="-", message=f"half not sent: {of_status(st).text()}")
    e = r.entries[0]
    try:
        er = t.stub.EndTransaction(
            spb.EndTransactionRequest(
                topic=pb.Resource(name=T_TX),
                message_id=e.message_id,
                transaction_id=e.transaction_id,
                resolution=99,  # type: ignore[arg-type]
                source=pb.SOURCE_CLIENT,
            ),
            metadata=t.md(),
            timeout=15,
        )
    except grpc.RpcError as err:
        return of_rpc_error(err)
    return of_status(er.status)


def _heartbeat_after_settings(t: Target) -> Answer:
    """Telemetry settings with client_type 99, then a Heartbeat of type 99."""
    cid = t.new_client_id()
    s = consumer_settings(t, G, T_NORMAL)
    s.client_type = 99  # type: ignore[assignment]
    with telemetry(t, s, cid) as tel:
        hb = heartbeat(t, 99, cid)
    hb.note = f"Telemetry: {tel.text(30) if tel else 'no answer'}"
    return hb


def cases() -> list[Case]:
    now = lambda: int(time.time() * 1000)  # noqa: E731
    big_unique = "".join(random.choice("abcdefghij") for _ in range(8))
    bomb_4m = gzip.compress(b"\0" * (4 * MiB - 1024))
    c: list[Case] = []

    def add(key: str, label: str, run: Callable[[Target], Answer]) -> None:
        c.append(Case(key, label, run))

    for name in ("UNIQ_KEY", "__STARTDELIVERTIME", "DLQ_ORIGIN_QUEUE", "DELAY"):
        add(
            f"reserved_{name}",
            f"user property named `{name}`",
            lambda t, n=name: send(t, msg(T_NORMAL, props={n: "1"})),
        )
    add(
        "body_over_4mib",
        "body of 4 MiB + 1 byte",
        lambda t: send(t, msg(T_NORMAL, b"x" * (4 * MiB + 1))),
    )
    add(
        "gzip_over_4mib",
        "GZIP body (5 KiB) inflating to 5 MiB",
        lambda t: send(
            t, msg(T_NORMAL, gzip.compress(b"\0" * (5 * MiB)), encoding=pb.GZIP)
        ),
    )
    add(
        "gzip_not_gzip",
        "GZIP body that is not gzip (`this is not gzip`)",
        lambda t: send(t, msg(T_NORMAL, b"this is not gzip", encoding=pb.GZIP)),
    )
    add(
        "gzip_truncated",
        "GZIP body cut in half",
        lambda t: send(
            t,
            msg(T_NORMAL, _half_gzip, encoding=pb.GZIP),
        ),
    )
    add("tag_pipe", "tag `a|b`", lambda t: send(t, msg(T_NORMAL, tag="a|b")))
    add(
        "tag_control",
        "tag with `\\x01`",
        lambda t: send(t, msg(T_NORMAL, tag="a\x01b")),
    )
    add("tag_blank", "tag of only spaces", lambda t: send(t, msg(T_NORMAL, tag="   ")))
    add(
        "props_20k",
        "tag 5 KiB + keys 5 KiB + properties 10 KiB (20 KiB together)",
        lambda t: send(
            t,
            msg(
                T_NORMAL,
                tag="t" * 5120,
                keys=["k" * 5120],
                props={"p": "v" * (10 * 1024 - 1)},
            ),
        ),
    )
    add(
        "props_33k",
        "tag 10 KiB + keys 10 KiB + properties 13 KiB (33 KiB together)",
        lambda t: send(
            t,
            msg(
                T_NORMAL,
                tag="t" * 10240,
                keys=["k" * 10240],
                props={"p": "v" * (13 * 1024 - 1)},
            ),
        ),
    )
    add("topic_bad", "topic `bad topic!`", lambda t: send(t, msg("bad topic!")))
    add("topic_newline", "topic `BadInput\\n`", lambda t: send(t, msg(T_NORMAL + "\n")))
    for topic in (RETRY, DLQ, "%RETRY%GNeverRan", "%DLQ%GNeverRan",
                  "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX",
                  "rmq_sys_wheel_timer"):  # fmt: skip
        add(f"send_{topic}", f"send to `{topic}`", lambda t, tp=topic: send(t, msg(tp)))
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                  "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", RETRY, DLQ,
                  "%RETRY%GNeverRan"):  # fmt: skip
        add(f"route_{topic}", f"QueryRoute `{topic}`", lambda t, tp=topic: route(t, tp))
        add(
            f"assign_{topic}",
            f"QueryAssignment `{topic}`",
            lambda t, tp=topic: assignment(t, tp, G),
        )
        add(
            f"receive_{topic}",
            f"ReceiveMessage `{topic}`",
            lambda t, tp=topic: receive(t, tp, G, poll_s=5)[0],
        )
    add(
        "heartbeat_99",
        "Heartbeat with client_type 99 (no Telemetry settings before)",
        lambda t: heartbeat(t, 99, t.new_client_id()),
    )
    add(
        "heartbeat_99_settings",
        "Heartbeat with client_type 99 after Telemetry settings of client_type 99",
        _heartbeat_after_settings,
    )
    add(
        "message_type_99",
        "message_type 99",
        lambda t: send(t, msg(T_NORMAL, message_type=99)),
    )
    add(
        "body_encoding_99",
        "body_encoding 99",
        lambda t: send(t, msg(T_NORMAL, encoding=99)),
    )
    add(
        "resolution_99",
        "EndTransaction of a real half with resolution 99",
        _end_tx_unknown_resolution,
    )
    add(
        "gzip_1025_members",
        "GZIP body of 1,025 one-byte gzip members",
        lambda t: send(t, msg(T_NORMAL, gzip_members(1025), encoding=pb.GZIP)),
    )
    add(
        "gzip_16mib_call",
        "one SendMessage of 5 GZIP bodies inflating to ~4 MiB each (20 MiB)",
        lambda t: send(
            t, *[msg(T_NORMAL, bomb_4m, encoding=pb.GZIP) for _ in range(5)]
        ),
    )
    add(
        "unknown_topic_send",
        "send to a topic that does not exist",
        lambda t: send(t, msg(f"NoSuchTopic{big_unique}")),
    )
    add(
        "unknown_topic_route",
        "QueryRoute of a topic that does not exist",
        lambda t: route(t, f"NoSuchTopicR{big_unique}"),
    )
    add(
        "delay_2d",
        "delivery time 2 days ahead (DELAY topic)",
        lambda t: send(
            t, msg(T_DELAY, message_type=pb.DELAY, deliver_at_ms=now() + 2 * DAY_MS)
        ),
    )
    add(
        "delay_3d1h",
        "delivery time 3 days + 1 hour ahead (DELAY topic)",
        lambda t: send(
            t,
            msg(
                T_DELAY,
                message_type=pb.DELAY,
                deliver_at_ms=now() + 3 * DAY_MS + 3_600_000,
            ),
        ),
    )
    add(
        "sql_malformed",
        "ReceiveMessage with SQL92 filter `a = = 1`",
        lambda t: receive(t, T_FILTER, G_SQL, sql="a = = 1")[0],
    )
    add(
        "sql_unclosed",
        "ReceiveMessage with SQL92 filter `(a > 1`",
        lambda t: receive(t, T_FILTER, G_SQL, sql="(a > 1")[0],
    )
    add(
        "sql_over_16k",
        "ReceiveMessage with a valid SQL92 filter of 20 KiB",
        lambda t: receive(
            t,
            T_FILTER,
            G_SQL,
            sql=" OR ".join(f"a = {i}" for i in range(2000)),
        )[0],
    )
    add(
        "stale_redelivered",
        "ack with the first delivery's handle after a redelivery",
        _stale("redelivered"),
    )
    add(
        "stale_replaced",
        "ack with a handle that ChangeInvisibleDuration replaced",
        _stale("replaced"),
    )
    add("stale_twice", "ack of an already acked message", _stale("twice"))
    add(
        "stale_change_acked",
        "ChangeInvisibleDuration of an acked message",
        _stale("change_acked"),
    )
    add(
        "handle_garbage",
        "ack with receipt handle `garbage`",
        lambda t: ack(t, T_NORMAL, G, msg(T_NORMAL), "garbage"),
    )
    return c


# ------------------------------------------------------------------ servers


class Ours:
    """``python -m broker_core serve`` on a temporary store."""

    def __init__(self, port: int):
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="bad-input-ours-"))
        self.store = self.dir / "store"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Ours:
        py = sys.executable
        for name, kind in TOPICS.items():
            subprocess.run(
                [py, "-m", "broker_core", "topic", "create", str(self.store), name,
                 "--type", kind, "--queues", "8"],
                cwd=ROOT, check=True, capture_output=True,
            )  # fmt: skip
        with open(self.dir / "server.log", "wb") as log:
            self.proc = subprocess.Popen(
                [py, "-m", "broker_core", "serve", "--store", str(self.store),
                 "--listen", f"127.0.0.1:{self.port}", "--no-redis-relay"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("our endpoint exited:\n" + self.log_tail())
            with socket.socket() as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.1)
        raise RuntimeError("our endpoint did not listen within 60 s")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apache-version", default=DEFAULT_VERSION)
    ap.add_argument("--our-port", type=int, default=0)
    ap.add_argument("--grpc-port", type=int, default=0, help="Apache's proxy gRPC")
    ap.add_argument("--namesrv-port", type=int, default=0)
    ap.add_argument("--broker-port", type=int, default=0, help="also uses -2, +1")
    ap.add_argument("--remoting-port", type=int, default=0)
    ap.add_argument("--heap", default="512m", help="Apache proxy+broker -Xmx")
    ap.add_argument("--json", default=None, help="write the answers here too")
    ap.add_argument(
        "--only", action="append", default=[], help="only the inputs whose key has this"
    )
    a = ap.parse_args(argv)

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    todo = [c for c in cases() if not a.only or any(o in c.key for o in a.only)]
    ours = Ours(a.our_port or free_port())
    rmq = ApacheRocketMQ(
        a.apache_version,
        grpc_port=a.grpc_port or free_port(),
        namesrv_port=a.namesrv_port or free_port(),
        broker_port=a.broker_port or free_port(around=(-2, 0, 1)),
        remoting_port=a.remoting_port or free_port(),
        broker_conf={"enablePropertyFilter": "true"},
        # Its proxy refuses invisible durations under 10 s by default; the
        # redelivery row uses 2 s (the conformance suite does the same).
        proxy_conf={"minInvisibleTimeMillsForRecv": 1000},
        heap=a.heap,
    )
    targets: list[Target] = []
    results: dict[str, dict[str, Answer]] = {}
    t0 = time.monotonic()
    try:
        print(f"starting our endpoint on 127.0.0.1:{ours.port}", file=sys.stderr)
        ours.start()
        print(
            f"starting Apache RocketMQ {a.apache_version} (gRPC {rmq.grpc_endpoint}, "
            f"namesrv {rmq.namesrv_addr}, broker {rmq.broker_addr})",
            file=sys.stderr,
        )
        rmq.start()
        for name, kind in TOPICS.items():
            rmq.create_topic(name, kind, 8)
        for g in GROUPS:
            rmq.create_group(g)
        # The retry and dead-letter topics of a group that has consumed and
        # dead-lettered (Apache makes them then, 1 queue each); %...%GNeverRan
        # stays a group that never did.
        rmq.create_topic(RETRY, None, 1)
        rmq.create_topic(DLQ, None, 1)
        print(f"both up after {time.monotonic() - t0:.1f}s", file=sys.stderr)
        us = Target("ours", "127.0.0.1", ours.port)
        them = Target("apache", "127.0.0.1", rmq.grpc_port)
        targets += [us, them]
        for case in todo:
            row: dict[str, Answer] = {}
            for t in targets:
                try:
                    row[t.name] = case.run(t)
                except Exception as e:  # noqa: BLE001 - a row, not the run
                    row[t.name] = Answer(grpc_status="-", message=f"bench error: {e!r}")
            results[case.key] = row
            print(
                f"{case.key}: ours {row['ours'].text(40)} | apache "
                f"{row['apache'].text(40)}",
                file=sys.stderr,
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for t in targets:
            t.close()
        if "Traceback" in ours.log_tail(1 << 20):
            print(
                "our endpoint logged a traceback:\n" + ours.log_tail(), file=sys.stderr
            )
        ours.stop()
        rmq.stop()
        print(f"both stopped after {time.monotonic() - t0:.1f}s", file=sys.stderr)

    print(f"| input | ours | Apache RocketMQ {a.apache_version} |")
    print("| --- | --- | --- |")
    for case in todo:
        row = results.get(case.key, {})
        cells = [row[n].text() if n in row else "not run" for n in ("ours", "apache")]
        print(f"| {md_cell(case.label)} | {md_cell(cells[0])} | {md_cell(cells[1])} |")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "apache_version": a.apache_version,
                    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "inputs": [
                        {
                            "key": c.key,
                            "input": c.label,
                            **{
                                n: v.as_dict()
                                for n, v in results.get(c.key, {}).items()
                            },
                        }
                        for c in todo
                    ],
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
