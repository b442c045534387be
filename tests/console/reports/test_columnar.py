"""The export's column-wise decoder gives the row decoder's rows (no Spark)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from broker_core import Broker, Message, MessageInner
from console.reports.jobs import columnar, scan


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with every kind of record the reports read, over many segments."""
    from broker_core.schedule import DelayService
    from broker_core.transaction import TransactionService

    path = tmp_path_factory.mktemp("columnarstore")
    with Broker.open(str(path), segment_size=64 * 1024) as broker:
        for i in range(400):
            if i % 7 == 0:
                # A value holding \x01, which the decoders keep whole (RocketMQ
                # splits at the first \x01): no entry and not even the codec
                # write one now, but stores from before may hold such records,
                # so the raw property bytes are appended by hand.
                item = list(
                    broker.store.prepare_inner(
                        [
                            MessageInner(
                                f"T{i % 3}",
                                0,
                                b"b" * (1 + i % 300),
                                {"P": str(i), "UNIQ_KEY": f"U{i}"},
                            )
                        ]
                    )[0]
                )
                item[3] = bytes(item[3]) + b"Q\x01x\x01y\x02"
                broker.store.put_items([tuple(item)], auto_create=True, inner=True)
                continue
            broker.send(
                Message(
                    # Retry topics may run past 127 bytes: a two-byte length (V2 magic).
                    "%RETRY%" + "L" * 130 if i % 97 == 5 else f"T{i % 3}",
                    b"b" * (1 + i % 300),
                    tags=f"t{i % 4}" if i % 5 else None,
                    keys=f"k{i} x{i % 2}" if i % 3 else None,
                )
            )
        with TransactionService(broker) as tx:
            for i in range(30):
                half = tx.send_half("PID_t", Message("T0", b"h", tags="tx"))
                if i % 3 == 0:
                    tx.end_transaction(half.transaction_id, "PID_t", "COMMIT")
                elif i % 3 == 1:
                    tx.end_transaction(half.transaction_id, "PID_t", "ROLLBACK")
        delays = DelayService(broker)
        for i in range(20):
            props = {"DELAY": "1"} if i % 2 else {"TIMER_DELAY_MS": "20"}
            broker.send(Message("T1", b"d", properties=props))
        # A clock past every due time (the decoders compare the same records,
        # whenever they were delivered): all twenty at once, no waiting.
        now_ms = int(time.time() * 1000) + 1_500
        assert delays.deliver_due(now_ms=now_ms).delivered == 20
        delays.close()
    return path


def _rows(batches) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=scan.ARROW_SCHEMA)


@pytest.mark.parametrize(("range_bytes", "batch_rows"), [(5000, 7), (1 << 20, 64)])
def test_columnar_rows_equal_row_decoder_rows(store, range_bytes, batch_rows):
    ranges = scan.split_ranges(store, range_bytes)
    assert len(scan.segment_files(store)) > 1
    by_rows = _rows(b for r in ranges for b in scan.decode_range(r, batch_rows))
    by_columns = _rows(b for r in ranges for b in columnar.decode_range(r, batch_rows))
    assert by_columns.num_rows == by_rows.num_rows > 400
    for name in scan.COLUMNS:
        assert by_columns[name].to_pylist() == by_rows[name].to_pylist(), name
    topics = set(by_columns["topic"].to_pylist())
    assert "%RETRY%" + "L" * 130 in topics and "RMQ_SYS_TRANS_HALF_TOPIC" in topics
    props = [dict(p) for p in by_columns["properties"].to_pylist()]
    assert {"P": "0", "Q": "x\x01y"} in props
    assert any("DELAY_SRC" in p for p in props)


def test_decoders_step_over_damage_and_quarantined_ranges(store, tmp_path):
    """A damaged record and a quarantined range (recovery's filler) are stepped
    over by both decoders, at the same rows: nothing after them goes missing."""
    from broker_core import record

    seg = scan.segment_files(store)[0]
    data = bytearray(seg.read_bytes())
    whole = scan.decode_ranges([scan.LogRange(str(seg), 0, 0, len(data))])
    offsets = whole["physical_offset"].to_pylist()
    bad, quarantined = offsets[40], offsets[60]
    data[bad + 4 : bad + 8] = b"\0\0\0\0"  # the 41st record's magic
    size = offsets[61] - quarantined  # the 61st record, laid over as recovery does
    data[quarantined : quarantined + 8] = record.BLANK.pack(size, record.SKIP_MAGIC)
    damaged = tmp_path / seg.name
    damaged.write_bytes(bytes(data))
    rng = scan.LogRange(str(damaged), 0, 0, len(data))
    got = _rows(columnar.decode_range(rng, 16))
    assert got["physical_offset"].to_pylist() == [
        o for o in offsets if o not in (bad, quarantined)
    ]
    assert got.equals(_rows(scan.decode_range(rng, 16)))


def test_write_range_parquet_counts_rows(store, tmp_path):
    import pyarrow.parquet as pq

    ranges = scan.split_ranges(store)
    rows = sum(
        columnar.write_range_parquet((i, *r), str(tmp_path)).rows
        for i, r in enumerate(ranges)
    )
    table = pq.read_table(tmp_path)
    assert rows == table.num_rows == scan.decode_ranges(ranges).num_rows
