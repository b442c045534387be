"""The official RocketMQ Python client against a cluster, run as a subprocess
(its stubs never share an interpreter with the tests). Usage:

    python cluster_client.py send ACCESS TOPIC COUNT PREFIX [DELAY_MS]
    python cluster_client.py consume ACCESS GROUP TOPIC COUNT TIMEOUT_S [PREFIXES]
    python cluster_client.py half ACCESS TOPIC BODY           (left pending)
    python cluster_client.py checker ACCESS TOPIC SECONDS     (commits checks)
    python cluster_client.py steady ACCESS TOPIC SECONDS PREFIX (one at a time,
        20/s, until SECONDS pass or the file PREFIX.stop appears)

The last line printed is ``RESULT <json>``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


def _cfg(access: str) -> ClientConfiguration:
    return ClientConfiguration(access, Credentials("", ""), request_timeout=3)


def _broker(receipt) -> str:
    """The broker name of the queue a message went to (``broker.topic.qid``)."""
    return str(receipt.message_queue).split(".", 1)[0]


def _msg(topic: str, body: str, delay_ms: int = 0) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.keys = body
    if delay_ms:
        m.delivery_timestamp = int(time.time() * 1000) + delay_ms
    return m


def send(access: str, topic: str, count: str, prefix: str, delay_ms: str = "0"):
    p = Producer(_cfg(access), (topic,))
    p.startup()
    brokers: Counter = Counter()
    sent, failed = [], []
    where: dict[str, str] = {}
    try:
        for i in range(int(count)):
            body = f"{prefix}-{i}"
            try:
                receipt = p.send(_msg(topic, body, int(delay_ms)))
            except Exception as exc:  # noqa: BLE001 - reported
                failed.append(f"{body}: {exc}")
                continue
            sent.append(body)
            brokers[_broker(receipt)] += 1
            where[body] = _broker(receipt)
    finally:
        p.shutdown()
    return {"sent": sent, "failed": failed, "brokers": dict(brokers), "where": where}


def steady(access: str, topic: str, seconds: str, prefix: str):
    """Send one message at a time, 20 a second: each send's body, time and
    outcome (the acknowledged ones are what must never be lost)."""
    import os

    p = Producer(_cfg(access), (topic,))
    p.startup()
    sent, failed = [], []
    end = time.time() + float(seconds)
    i = 0
    try:
        while time.time() < end and not os.path.exists(prefix + ".stop"):
            body = f"{os.path.basename(prefix)}-{i}"
            i += 1
            at = time.time()
            try:
                receipt = p.send(_msg(topic, body))
                sent.append([body, at, _broker(receipt)])
            except Exception as exc:  # noqa: BLE001 - reported
                failed.append([body, at, f"{type(exc).__name__}: {str(exc)[:160]}"])
            time.sleep(max(0.0, 0.05 - (time.time() - at)))
    finally:
        p.shutdown()
    return {"sent": sent, "failed": failed}


def consume(
    access: str, group: str, topic: str, count: str, timeout: str, prefixes: str = ""
):
    """Receive and ack until ``count`` bodies starting with one of the
    comma-separated ``prefixes`` (any body without) arrived, or ``timeout``."""
    wanted = tuple(p for p in prefixes.split(",") if p) or ("",)
    c = SimpleConsumer(_cfg(access), group, {topic: FilterExpression("*")},
                       await_duration=2)  # fmt: skip
    c.startup()
    got: list[str] = []
    received: list[int] = []
    try:
        end = time.time() + float(timeout)
        while sum(b.startswith(wanted) for b in got) < int(count) and time.time() < end:
            try:
                batch = c.receive(32, 20)
            except Exception:  # noqa: BLE001 - a node away: try the next queue
                time.sleep(0.2)
                continue
            for m in batch:
                got.append(m.body.decode())
                received.append(int(time.time() * 1000))
                c.ack(m)
    finally:
        c.shutdown()
    return {"bodies": got, "received_ms": received}


class _Commit(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[str] = []

    def check(self, message):
        self.checked.append(message.body.decode())
        return TransactionResolution.COMMIT


def half(access: str, topic: str, body: str):
    checker = _Commit()
    p = Producer(_cfg(access), (topic,), checker=checker)
    p.startup()
    tx = p.begin_transaction()
    receipt = p.send(_msg(topic, body), tx)
    p.shutdown()  # gone before deciding: the half stays pending
    return {"broker": _broker(receipt), "id": receipt.message_id}


def checker(access: str, topic: str, seconds: str, want: str = ""):
    """Answer check-backs (commit) until ``want`` is checked (or any, without
    it): a check for another node's half may come first."""
    c = _Commit()
    p = Producer(_cfg(access), (topic,), checker=c)
    p.startup()
    end = time.time() + float(seconds)
    try:
        while time.time() < end and not (want in c.checked if want else c.checked):
            time.sleep(0.2)
        time.sleep(1.0)  # let the EndTransaction go out
    finally:
        p.shutdown()
    return {"checked": c.checked}


def route(node: str, topic: str, asked: str):
    """QueryRoute at ``node`` as a client whose access point is ``asked``
    (``host:port;host:port``): each queue's broker and addresses."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

    endpoints = pb.Endpoints(scheme=pb.IPv4)
    for a in asked.split(";"):
        host, _, port = a.rpartition(":")
        endpoints.addresses.append(pb.Address(host=host, port=int(port)))
    with grpc.insecure_channel(node) as ch:
        r = sgrpc.MessagingServiceStub(ch).QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints),
            metadata=(("x-mq-client-id", "route-probe"),), timeout=10,
        )  # fmt: skip
    return [
        {"broker": q.broker.name,
         "addresses": [f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses]}
        for q in r.message_queues
    ]  # fmt: skip


if __name__ == "__main__":
    result = globals()[sys.argv[1]](*sys.argv[2:])
    print("RESULT " + json.dumps(result), flush=True)
