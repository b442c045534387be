"""An offset reset reaches the endpoint's pop cursor, live or at the next start."""

from __future__ import annotations

import time

from broker_core import Broker, Message
from broker_core.endpoint.pop import PopManager
from broker_core.endpoint.popoffsets import request_reset


def _pop_all(pm: PopManager, n: int) -> list[bytes]:
    got = pm.pop("G", "T", n, 60_000, "*", "TAG")
    return [e.msg.body for _qid, e in got if e.msg is not None]


def test_reset_applies_live_and_at_start(tmp_path) -> None:
    with Broker.open(tmp_path / "store") as b:
        b.create_topic("T", read_queue_nums=1)
        for i in range(6):
            b.send(Message("T", b"m%d" % i, queue_id=0))
        pm = PopManager(b)
        assert _pop_all(pm, 10) == [b"m%d" % i for i in range(6)]  # in flight
        request_reset(b.store.root, "G", "T", {0: 4})
        assert pm.offsets.apply_resets() == 1
        assert not list((b.store.root / "grpc" / "resets").iterdir())
        # In-flight messages of the queue are forgotten; reading resumes at 4.
        assert _pop_all(pm, 10) == [b"m4", b"m5"]
        pm.offsets.mirror_offsets()
        assert b.store.committed_offset("G", "T", 0) == 4
        # With no endpoint running, the request waits for the next start.
        request_reset(b.store.root, "G", "T", {0: 1})
        restarted = PopManager(b)
        assert _pop_all(restarted, 10) == [b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_a_dead_letter_says_why_it_is_there(tmp_path) -> None:
    """Its copy in ``%DLQ%<group>`` carries ``DLQ_REASON``: forwarded by its
    consumer (ForwardMessageToDeadLetterQueue), or its attempts ran out (the
    console's dead-letter page showed no reason at all)."""
    from broker_core.endpoint.pop import DLQ_FORWARDED, DLQ_MAX_ATTEMPTS, encode_handle

    with Broker.open(tmp_path / "store") as b:
        b.create_topic("T", read_queue_nums=1)
        b.send(Message("T", b"poison", queue_id=0))
        b.send(Message("T", b"tired", queue_id=0))
        pm = PopManager(b, max_attempts=1)
        got = pm.pop("G", "T", 1, 60_000, "*", "TAG")
        qid, e = got[0]
        assert e.msg is not None and e.msg.body == b"poison"
        pm.forward_dlq("G", "T", encode_handle(qid, e.offset, e.nonce, 0))
        # The second is delivered once and never acknowledged: once its
        # invisibility ends its one attempt is spent.
        assert [x.msg.body for _q, x in pm.pop("G", "T", 1, 1, "*", "TAG")] == [
            b"tired"
        ]
        assert pm.sweep_dead(now=int(time.time() * 1000) + 60_000) == 1
        reasons = {
            m.body: m.properties.get("DLQ_REASON")
            for m in b.pull("probe", "%DLQ%G", 0, 0, 10).messages
        }
        assert reasons == {b"poison": DLQ_FORWARDED, b"tired": DLQ_MAX_ATTEMPTS}
