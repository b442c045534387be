"""Acks of many AckMessage calls in one pop-state transaction (what one
hand-over of the native front brings): each handle answered as if alone."""

from __future__ import annotations

from broker_core import Broker, Message
from broker_core.endpoint import pop as pop_module
from broker_core.endpoint.pop import STALE, PopManager, decode_handle, encode_handle


def _handles(pm: PopManager, topic: str, n: int) -> list[str]:
    got = pm.pop("G", topic, n, 60_000, "*", "TAG")
    assert len(got) == n
    return [encode_handle(q, e.offset, e.nonce, e.visible_at) for q, e in got]


def test_a_batch_of_calls_acks_each_handle_once(tmp_path, monkeypatch) -> None:
    # several statements per batch, however short the chunks
    monkeypatch.setattr(pop_module, "ACK_CHUNK", 3)
    with Broker.open(tmp_path / "store") as b:
        for t in ("A", "B"):
            b.create_topic(t, read_queue_nums=2)
            b.send_batch([Message(t, b"m%d" % i) for i in range(8)])
        pm = PopManager(b)
        a, bb = _handles(pm, "A", 8), _handles(pm, "B", 8)
        qid, off, nonce, deadline = decode_handle(a[6])
        forged = encode_handle(qid, off, nonce ^ 1, deadline)
        calls = [
            ("G", "A", a[:5]),
            ("G", "B", bb),
            ("G", "A", [a[5], a[5], forged, "garbage"]),  # a twice, a forged nonce
            ("G", "B", [bb[0]]),  # already acknowledged by the second call
        ]
        out = pm.ack_all(calls)
        assert out[0] == [None] * 5
        assert out[1] == [None] * 8
        assert out[2][0] is None and out[2][1] == STALE and out[2][2] == STALE
        assert out[2][3] is not None and out[2][3] != STALE  # malformed
        assert out[3] == [STALE]
        # left pending for A: a[6] (the forged handle's entry, untouched) and
        # a[7]; a[0] and a[5] were acknowledged
        rest = pm.ack_all([("G", "A", [a[0], a[6], a[7], a[5]])])[0]
        assert rest == [STALE, None, None, STALE]
