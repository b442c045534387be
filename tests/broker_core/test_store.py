"""MessageStore extension points: dispatchers across processes, replay, flushing."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core import Broker, DispatchRequest, Message, MessageInner, SendStatus

WORKER = str(Path(__file__).with_name("_workers.py"))


def test_iter_dispatch_reads_other_processes_appends_in_log_order(
    store_dir: Path, small: dict
) -> None:
    with Broker.open(store_dir, **small) as b:
        b.create_topic("MP", 4)
        mine = b.send(Message("MP", b"mine", keys="mine"))
        subprocess.run(
            [sys.executable, WORKER, "produce", str(store_dir), "other", "30", "async"],
            check=True,
            timeout=60,
        )
        got: list[DispatchRequest] = list(b.store.iter_dispatch(0))
        assert [r.keys for r in got][0] == "mine"
        assert sorted(r.keys or "" for r in got[1:]) == sorted(
            f"other-{i}" for i in range(30)
        )
        offsets = [r.commit_log_offset for r in got]
        assert offsets == sorted(offsets) and offsets[0] == mine.commit_log_offset
        assert all(r.topic == "MP" and r.uniq_key for r in got)
        # A reader resuming from a persisted position sees only what follows.
        resumed = list(b.store.iter_dispatch(got[10].next_offset))
        assert [r.commit_log_offset for r in resumed] == offsets[11:]


def test_sync_flush_shares_fsyncs_between_concurrent_senders(
    store_dir: Path, small: dict
) -> None:
    with Broker.open(
        store_dir, flush="sync", group_commit_wait_us=2_000_000, **small
    ) as b:
        b.send(Message("Sync", b"warm-up"))
        before = b.store.flusher.fsync_count
        results: list = []
        lock = threading.Lock()

        def producer(n: int) -> None:
            r = b.send(Message("Sync", f"{n}".encode()))
            with lock:
                results.append(r)

        # Hold the append lock so that all eight sends are under way at once.
        with b.store.state.append_lock:
            threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while b.store.flusher._appending < 8 and time.monotonic() < deadline:
                time.sleep(0.005)
        for t in threads:
            t.join()
        assert len(results) == 8
        assert all(r.status is SendStatus.SEND_OK for r in results)
        flushed = b.store.state.flushed_pos
        assert all(r.commit_log_offset < flushed for r in results)
        assert b.store.flusher.fsync_count - before == 1  # eight sends, one fsync


_names = st.text(
    alphabet=st.characters(
        blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.lists(
        st.tuples(
            st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=150),
            st.binary(min_size=1, max_size=3000),
            st.dictionaries(_names, _names, max_size=4),
            st.sampled_from([0, 0x4, 0x8, 0xC]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_put_inner_round_trips_through_the_append_path(
    batch: list[tuple[str, bytes, dict[str, str], int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as d:
        with Broker.open(d, segment_size=16 * 1024) as b:
            inners = [
                MessageInner(t, q, body, props, sysflag=sf, reconsume_times=q)
                for t, body, props, sf, q in batch
            ]
            results = b.store.put_inner_batch(inners)
            for inner, r in zip(inners, results, strict=True):
                m = b.store.read_message(r.commit_log_offset)
                assert (m.topic, m.queue_id, m.body, m.properties) == (
                    inner.topic,
                    inner.queue_id,
                    inner.body,
                    inner.properties,
                )
                assert (m.sysflag, m.reconsume_times, m.store_size) == (
                    inner.sysflag,
                    inner.reconsume_times,
                    r.size,
                )
            # Every record passes recovery's full check (sizes, CRCs, offsets).
            assert len(list(b.store.iter_messages(0, verify_crc=True))) == len(batch)
