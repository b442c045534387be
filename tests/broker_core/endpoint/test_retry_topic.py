"""A message resent to a consumer group reaches that group's consumers.

The console's "resend to a consumer group" (``NodeOps.resend``) writes the
message into ``%RETRY%<group>`` with ``RETRY_TOPIC`` naming its topic. The
endpoint's consumers of the group read that retry topic beside their topic
(Apache RocketMQ 5 pop consumption): the message arrives once, with its
original topic, id and body, and is acknowledged, retried and dead-lettered
like any other message of the group; other groups never see it. The official
Python client consumes, ``python -m broker_core serve`` serves.
"""

from __future__ import annotations

import time

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

SUF = "r"
TOPIC, GROUP = f"TRT{SUF}", f"GRT{SUF}"
DLQ, RETRY = f"%DLQ%{GROUP}", f"%RETRY%{GROUP}"


def _dead_letters(broker, want: int, timeout: float = 15.0) -> list:
    """The messages of the group's DLQ, once there are ``want`` of them."""
    deadline = time.time() + timeout
    got: list = []
    while time.time() < deadline:
        broker.store.refresh_topics()
        if broker.store.topic_config(DLQ) is not None:
            got = broker.pull("probe", DLQ, 0, 0, max_messages=32).messages
            if len(got) >= want:
                return got
        time.sleep(0.2)
    return got


def test_a_message_resent_to_a_group_reaches_it_once(tmp_path):
    from broker_core import Broker
    from broker_core.cluster.node_ops import NodeOps

    store = tmp_path / "store"
    port = free_port()
    proc = start_server(
        store, port, tmp_path / "server.log", ("--max-delivery-attempts", "2")
    )
    ep = f"127.0.0.1:{port}"
    try:
        first = result(spawn("rt_first", ep, SUF, tmp_path))
        assert first["other"] == ["poison"] and first["attempts"] == [1, 2]
        with Broker.open(store) as b:
            ops = NodeOps(lambda: b, lambda: None, lambda: None, lambda g=None: [])
            (dead,) = _dead_letters(b, 1)
            assert dead.msg_id == first["id"]
            assert dead.properties["RETRY_TOPIC"] == TOPIC

            # Resent to the group: retried until dead-lettered again, like
            # any other message of the group.
            ops.resend(dead.offset_msg_id, GROUP)
            assert b.store.max_offset(RETRY, 0) == 1
            retry = result(spawn("rt_retry", ep, SUF, tmp_path))
            got = retry["got"]
            assert [(m["topic"], m["body"], m["attempt"]) for m in got] == [
                (TOPIC, "poison", 1),
                (TOPIC, "poison", 2),
            ]
            assert all(m["id"] == first["id"] and m["tag"] == "a" for m in got)
            assert got[0]["props"] == {"n": "1"}  # no retry bookkeeping shown
            again = _dead_letters(b, 2)
            assert len(again) == 2
            assert again[1].properties["RETRY_TOPIC"] == TOPIC  # not %RETRY%

            # Resent once more: received once, acknowledged; another group,
            # which consumed the original, gets nothing.
            ops.resend(again[1].offset_msg_id, GROUP)
            once = result(spawn("rt_once", ep, SUF, tmp_path))
            assert [(m["topic"], m["body"], m["id"]) for m in once["got"]] == [
                (TOPIC, "poison", first["id"])
            ]
            assert once["other"] == []
            assert len(_dead_letters(b, 2)) == 2
            # The group's offset on its retry topic follows: nothing behind.
            deadline = time.time() + 5
            while time.time() < deadline and b.store.committed_offset(
                GROUP, RETRY, 0
            ) != b.store.max_offset(RETRY, 0):
                time.sleep(0.2)
            assert b.store.committed_offset(GROUP, RETRY, 0) == 2
    finally:
        assert stop_server(proc) == 0
