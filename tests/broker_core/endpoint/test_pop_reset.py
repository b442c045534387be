"""An offset reset reaches the endpoint's pop cursor, live or at the next start."""

from __future__ import annotations

from broker_core import Broker, Message
from broker_core.endpoint.pop import PopManager, request_reset


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
        assert pm.apply_resets() == 1
        assert not list((b.store.root / "grpc" / "resets").iterdir())
        # In-flight messages of the queue are forgotten; reading resumes at 4.
        assert _pop_all(pm, 10) == [b"m4", b"m5"]
        pm.mirror_offsets()
        assert b.store.committed_offset("G", "T", 0) == 4
        # With no endpoint running, the request waits for the next start.
        request_reset(b.store.root, "G", "T", {0: 1})
        restarted = PopManager(b)
        assert _pop_all(restarted, 10) == [b"m1", b"m2", b"m3", b"m4", b"m5"]
