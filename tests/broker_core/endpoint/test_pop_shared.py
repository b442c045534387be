"""Pop state shared by processes: two processes popping and acknowledging one
group over one store hand out every message exactly once, and a handle
popped in one is acknowledged in the other (``pop.db``, no endpoint)."""

from __future__ import annotations

import multiprocessing as mp

from broker_core import Broker, Message
from broker_core.endpoint.pop import PopManager, encode_handle

N = 2400


def _consume(store: str, start: mp.Barrier, popped: mp.Barrier, out: mp.Queue) -> None:
    """Pop batches of 16 and acknowledge them until three pops found nothing;
    report the (queue, offset) of every message this process got. Both
    processes pop once before either goes on, so that both take part however
    the machine schedules them (one could otherwise take all before the other
    starts)."""
    with Broker.open(store) as b:
        pm = PopManager(b)
        start.wait(timeout=60)  # both pop at once
        got: list[tuple[int, int]] = []
        empty = 0
        first = True
        while empty < 3:
            batch = pm.pop("G", "T", 16, 60_000, "*", "TAG")
            if batch:
                empty = 0
                handles = [encode_handle(q, e.offset, e.nonce, 0) for q, e in batch]
                errors = pm.ack_all([("G", "T", handles)])[0]
                assert errors == [None] * len(batch), errors
                got += [(q, e.offset) for q, e in batch]
            else:
                empty += 1
            if first:
                popped.wait(timeout=60)
                first = False
        pm.close()
    out.put(got)


def test_two_processes_share_one_group(tmp_path) -> None:
    store = str(tmp_path / "store")
    with Broker.open(store) as b:
        b.create_topic("T", read_queue_nums=4)
        for start in range(0, N, 200):
            b.send_batch([Message("T", b"m%d" % i) for i in range(start, start + 200)])
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start, popped = ctx.Barrier(2), ctx.Barrier(2)
    procs = [
        ctx.Process(target=_consume, args=(store, start, popped, out)) for _ in range(2)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    everything = results[0] + results[1]
    assert len(everything) == N  # none twice
    assert len(set(everything)) == N  # and none missing
    assert results[0] and results[1]  # both processes took part


def test_a_handle_from_one_manager_is_acknowledged_by_another(tmp_path) -> None:
    with Broker.open(tmp_path / "store") as b:
        b.create_topic("T", read_queue_nums=1)
        b.send(Message("T", b"x", queue_id=0))
        a, other = PopManager(b), PopManager(b)
        ((qid, e),) = a.pop("G", "T", 1, 60_000, "*", "TAG")
        handle = encode_handle(qid, e.offset, e.nonce, e.visible_at)
        assert other.pop("G", "T", 1, 60_000, "*", "TAG") == []  # in flight
        new = other.change_invisible("G", "T", handle, 60_000)
        assert a.ack_all([("G", "T", [handle, new])]) == [
            ["the receipt handle is stale or unknown", None]
        ]
        assert other.stats() == {"G@T": {"pending": 0, "inflight": 0}}
        a.close()
        other.close()
