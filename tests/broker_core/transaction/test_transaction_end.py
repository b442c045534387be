"""Half messages and end_transaction: visibility, idempotency, conflicts, validation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _txhelpers import SMALL, order, real_messages

from broker_core import Broker, Message, ResolutionSource, TransactionResolution
from broker_core.errors import (
    IllegalTransactionOperationError,
    InvalidGroupError,
    InvalidMessageError,
    TopicNotAllowedError,
    TransactionConflictError,
    UnknownTransactionError,
    ValidationError,
    WrongProducerGroupError,
)
from broker_core.message import TRANSACTION_COMMIT_TYPE
from broker_core.record import offset_msg_id
from broker_core.transaction import (
    EndTransactionStatus,
    TransactionService,
    TransactionState,
)
from broker_core.transaction import records as R
from broker_core.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC


def test_half_is_stored_in_the_half_topic_and_invisible(svc, broker):
    r = svc.send_half("pg", order(1, properties={"color": "red"}))
    assert r.transaction_id == r.offset_msg_id
    assert r.topic == "Orders"
    assert real_messages(broker) == []
    half = broker.store.read_message(r.commit_log_offset)
    p = half.properties
    assert half.topic == TRANS_HALF_TOPIC and half.queue_id == 0
    assert p["REAL_TOPIC"] == "Orders" and p["REAL_QID"] == str(r.queue_id)
    assert p["PGROUP"] == "pg" and p["TRAN_MSG"] == "true"
    assert p["UNIQ_KEY"] == r.msg_id == p["__transactionId__"]
    assert p["color"] == "red" and p["KEYS"] == "o-1"
    assert svc.state(r.transaction_id) is TransactionState.PENDING


def test_commit_publishes_once_and_repeats_return_the_first_outcome(svc, broker):
    r = svc.send_half("pg", order(1))
    first = svc.end_transaction(r.transaction_id, "pg", TransactionResolution.COMMIT)
    assert first.status is EndTransactionStatus.RESOLVED
    assert first.state is TransactionState.COMMITTED
    assert first.source is ResolutionSource.CLIENT
    again = svc.end_transaction(r.transaction_id, "pg", "commit", "CLIENT")
    assert again.status is EndTransactionStatus.ALREADY_RESOLVED
    assert again.commit_offset_msg_id == first.commit_offset_msg_id
    # A check answer racing in later is the same request from another source.
    late = svc.end_transaction(r.msg_id, "pg", "COMMIT_MESSAGE", ResolutionSource.CHECK)
    assert late.status is EndTransactionStatus.ALREADY_RESOLVED
    assert late.source is ResolutionSource.CLIENT
    msgs = real_messages(broker)
    assert len(msgs) == 1
    m = msgs[0]
    assert m.body == b"order-1" and m.msg_id == r.msg_id and m.tags == "paid"
    assert m.queue_id == r.queue_id
    assert m.sysflag & 0xC == TRANSACTION_COMMIT_TYPE
    assert m.prepared_transaction_offset == r.commit_log_offset
    for gone in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG"):
        assert gone not in m.properties
    assert m.properties["PGROUP"] == "pg"
    assert broker.get_message(r.msg_id, topic="Orders").body == b"order-1"
    # By id alone: the delivered message, not the half that shares its id.
    assert broker.get_message(r.msg_id).topic == "Orders"


def test_rollback_publishes_nothing_and_refuses_a_later_commit(svc, broker):
    r = svc.send_half("pg", order(2))
    res = svc.end_transaction(r.transaction_id, "pg", "ROLLBACK")
    assert res.state is TransactionState.ROLLED_BACK
    with pytest.raises(TransactionConflictError, match="ROLLED_BACK"):
        svc.end_transaction(r.transaction_id, "pg", "COMMIT")
    assert svc.end_transaction(r.transaction_id, "pg", "ROLLBACK").status is (
        EndTransactionStatus.ALREADY_RESOLVED
    )
    assert real_messages(broker) == []
    ops = [m for m in broker.store.iter_messages() if m.topic == TRANS_OP_HALF_TOPIC]
    assert len(ops) == 1
    assert ops[0].tags == "d" and ops[0].body == f"{r.queue_offset},".encode()


def test_commit_after_commit_conflicts_with_rollback(svc):
    r = svc.send_half("pg", order(3))
    svc.end_transaction(r.transaction_id, "pg", "COMMIT")
    with pytest.raises(TransactionConflictError, match="already COMMITTED"):
        svc.end_transaction(
            r.transaction_id, "pg", "ROLLBACK", "OPERATOR", operator="ann"
        )


def test_unknown_leaves_the_half_pending(svc):
    r = svc.send_half("pg", order(4))
    res = svc.end_transaction(r.transaction_id, "pg", "UNKNOWN")
    assert res.status is EndTransactionStatus.UNCHANGED
    assert res.state is TransactionState.PENDING
    assert svc.state(r.transaction_id) is TransactionState.PENDING


@pytest.mark.parametrize(
    "tid", ["", "nope", "7F00000100002A9F00000000000FFFFF", "0" * 32]
)
def test_unknown_transaction_ids(svc, tid):
    svc.send_half("pg", order(5))
    with pytest.raises(UnknownTransactionError):
        svc.end_transaction(tid, "pg", "COMMIT")


def test_a_normal_message_is_not_a_transaction(svc, broker):
    sent = broker.send(Message("Orders", b"plain"))
    with pytest.raises(UnknownTransactionError):
        svc.end_transaction(sent.offset_msg_id, "pg", "COMMIT")
    with pytest.raises(UnknownTransactionError):
        svc.end_transaction(sent.msg_id, "pg", "COMMIT")


def test_wrong_producer_group_and_header_offsets(svc):
    r = svc.send_half("pg", order(6))
    with pytest.raises(WrongProducerGroupError, match="'other'"):
        svc.end_transaction(r.transaction_id, "other", "COMMIT")
    with pytest.raises(WrongProducerGroupError):
        svc.end_transaction(r.transaction_id, None, "COMMIT", "CLIENT")
    with pytest.raises(UnknownTransactionError, match="state table offset"):
        svc.end_transaction(
            r.transaction_id, "pg", "COMMIT", queue_offset=r.queue_offset + 7
        )
    with pytest.raises(UnknownTransactionError, match="message id"):
        svc.end_transaction(r.transaction_id, "pg", "COMMIT", msg_id="X" * 32)
    assert svc.state(r.transaction_id) is TransactionState.PENDING


def test_bad_resolution_source_and_operator(svc):
    r = svc.send_half("pg", order(7))
    with pytest.raises(ValueError, match="TransactionResolution"):
        svc.end_transaction(r.transaction_id, "pg", "MAYBE")
    with pytest.raises(ValueError, match="ResolutionSource"):
        svc.end_transaction(r.transaction_id, "pg", "COMMIT", "ROBOT")
    with pytest.raises(ValidationError, match="operator"):
        svc.end_transaction(r.transaction_id, None, "COMMIT", "OPERATOR")
    res = svc.commit(r.transaction_id, operator="ann")
    assert res.source is ResolutionSource.OPERATOR and res.operator == "ann"
    again = svc.rollback if False else svc.commit
    assert again(r.transaction_id, operator="bob").operator == "ann"


def test_send_half_validation(svc):
    with pytest.raises(InvalidGroupError):
        svc.send_half("", order())
    with pytest.raises(TopicNotAllowedError):
        svc.send_half("pg", Message(TRANS_HALF_TOPIC, b"x"))
    with pytest.raises(InvalidMessageError):
        svc.send_half("pg", Message("Orders", b""))
    with pytest.raises(ValidationError):
        svc.send_half("pg", Message("Orders", b"x", queue_id=99))


def test_immunity_rule_refuses_a_late_client_outcome(broker):
    with TransactionService(broker, transaction_timeout_ms=0) as svc:
        r = svc.send_half(
            "pg", order(8, properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "0"})
        )
        time.sleep(0.01)
        with pytest.raises(IllegalTransactionOperationError):
            svc.end_transaction(r.transaction_id, "pg", "COMMIT")
        # The check-back path is what the rule leaves the half to.
        res = svc.end_transaction(r.transaction_id, "pg", "COMMIT", "CHECK")
        assert res.state is TransactionState.COMMITTED
        fresh = svc.send_half(
            "pg", order(9, properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
        )
        assert svc.end_transaction(fresh.transaction_id, "pg", "ROLLBACK").state is (
            TransactionState.ROLLED_BACK
        )


def test_outcomes_survive_restart_and_derived_state_is_rebuilt(store_dir: Path):
    b = Broker.open(store_dir, **SMALL)
    svc = TransactionService(b)
    ids = [svc.send_half("pg", order(i)) for i in range(30)]
    for r in ids[:10]:
        svc.end_transaction(r.transaction_id, "pg", "COMMIT")
    for r in ids[10:20]:
        svc.end_transaction(r.transaction_id, "pg", "ROLLBACK")
    svc.close()
    b.close()
    # Drop both derived stores: they come back from the log.
    import shutil

    shutil.rmtree(store_dir / "transaction" / "state")
    (store_dir / "transaction" / "index.db").unlink()
    for suffix in ("-wal", "-shm"):
        p = store_dir / "transaction" / f"index.db{suffix}"
        if p.exists():
            p.unlink()
    b = Broker.open(store_dir, **SMALL)
    svc = TransactionService(b)
    try:
        for r in ids[:10]:
            assert svc.end_transaction(r.transaction_id, "pg", "COMMIT").status is (
                EndTransactionStatus.ALREADY_RESOLVED
            )
            with pytest.raises(TransactionConflictError):
                svc.end_transaction(r.transaction_id, "pg", "ROLLBACK")
        for r in ids[10:20]:
            assert svc.state(r.transaction_id) is TransactionState.ROLLED_BACK
        assert len(real_messages(b)) == 10
        page = svc.list_halves()
        assert page.total == 10
        assert {h.transaction_id for h in page.items} == {
            r.transaction_id for r in ids[20:]
        }
        m = svc.metrics()
        assert (m.commits, m.rollbacks, m.pending) == (10, 10, 10)
    finally:
        svc.close()
        b.close()


def test_a_commit_message_without_its_op_still_counts_as_the_outcome(svc, broker):
    """A torn append that kept the real message but lost the op must not allow a
    second commit or a rollback."""
    r = svc.send_half("pg", order(10))
    half = broker.store.read_message(r.commit_log_offset)
    broker.store.put_inner(R.commit_inner(half))  # as if the op were lost
    res = svc.end_transaction(r.transaction_id, "pg", "COMMIT")
    assert res.status is EndTransactionStatus.ALREADY_RESOLVED
    with pytest.raises(TransactionConflictError):
        svc.end_transaction(r.transaction_id, "pg", "ROLLBACK")
    assert len(real_messages(broker)) == 1


def test_threads_racing_commit_and_rollback_get_one_outcome(svc, broker):
    import threading

    halves = [svc.send_half("pg", order(i)) for i in range(200)]
    outcomes: list[tuple[str, str]] = []
    lock = threading.Lock()

    def worker(resolution: str) -> None:
        for r in halves:
            try:
                res = svc.end_transaction(r.transaction_id, "pg", resolution)
                if res.status is EndTransactionStatus.RESOLVED:
                    with lock:
                        outcomes.append((r.transaction_id, resolution))
            except TransactionConflictError:
                pass

    ts = [
        threading.Thread(target=worker, args=(x,)) for x in ("COMMIT", "ROLLBACK") * 2
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(t for t, _ in outcomes) == sorted(r.transaction_id for r in halves)
    committed = {t for t, res in outcomes if res == "COMMIT"}
    seen = [m.msg_id for m in real_messages(broker)]
    assert len(seen) == len(set(seen)) == len(committed)


def test_oversized_properties_and_odd_operator_names(svc):
    with pytest.raises(ValidationError):
        svc.send_half("pg", order(1, properties={"big": "x" * 40_000}))
    r = svc.send_half("pg", order(2))
    res = svc.rollback(r.transaction_id, operator="eve\x01\x02 ")
    assert res.operator == "eve"
    assert svc.get_half(r.transaction_id).history[-1].operator == "eve"


def test_batches_decide_each_request_as_one_call_would(svc, broker):
    from broker_core.transaction import EndTransactionRequest as Req

    sent = svc.send_halves("pg", [order(i) for i in range(6)])
    assert [s.topic for s in sent] == ["Orders"] * 6
    assert len({s.transaction_id for s in sent}) == 6
    assert real_messages(broker) == []
    t = [s.transaction_id for s in sent]
    out = svc.end_transactions(
        [
            Req(t[0], "pg", "COMMIT"),
            Req(t[1], "pg", "ROLLBACK"),
            Req(t[0], "pg", "COMMIT"),  # repeat inside the batch
            Req(t[1], "pg", "COMMIT"),  # conflicts with the rollback above
            Req(t[2], "other", "COMMIT"),  # not its group
            Req("C0A8000100002A9F0000000000FFFFFF", "pg", "COMMIT"),  # unknown
            Req(t[3], "pg", "UNKNOWN"),
            Req(t[4], None, "COMMIT", "OPERATOR", operator="ops"),
        ],
        return_exceptions=True,
    )
    assert out[0].status is EndTransactionStatus.RESOLVED
    assert out[1].state is TransactionState.ROLLED_BACK
    assert out[2].status is EndTransactionStatus.ALREADY_RESOLVED
    assert out[2].commit_offset_msg_id == out[0].commit_offset_msg_id
    assert isinstance(out[3], TransactionConflictError)
    assert "ROLLED_BACK" in str(out[3])
    assert isinstance(out[4], WrongProducerGroupError)
    assert isinstance(out[5], UnknownTransactionError)
    assert out[6].status is EndTransactionStatus.UNCHANGED
    assert out[7].source is ResolutionSource.OPERATOR and out[7].operator == "ops"
    assert sorted(m.body for m in real_messages(broker)) == [b"order-0", b"order-4"]
    states = [svc.state(x) for x in t]
    assert states == [
        TransactionState.COMMITTED,
        TransactionState.ROLLED_BACK,
        TransactionState.PENDING,
        TransactionState.PENDING,
        TransactionState.COMMITTED,
        TransactionState.PENDING,
    ]
    # Without return_exceptions the first refusal is raised, after the others
    # were written.
    with pytest.raises(WrongProducerGroupError):
        svc.end_transactions([Req(t[2], "nope", "COMMIT"), Req(t[5], "pg", "COMMIT")])
    assert svc.state(t[5]) is TransactionState.COMMITTED
    assert svc.state(t[2]) is TransactionState.PENDING


def test_a_batch_of_halves_with_one_bad_message_writes_nothing(svc, broker):
    end = broker.store.max_physical_offset()
    with pytest.raises(TopicNotAllowedError):
        svc.send_halves("pg", [order(1), Message(TRANS_HALF_TOPIC, b"x")])
    with pytest.raises(InvalidGroupError):
        svc.send_halves("bad group!", [order(2)])
    assert broker.store.max_physical_offset() == end
    assert svc.send_halves("pg", []) == []


def test_a_committed_message_is_found_by_id_not_its_half(svc, broker):
    """A topic named after the half topic in sort order ("TxOrders" >
    "RMQ_SYS_TRANS_HALF_TOPIC"): the id still opens the delivered message
    (the console's /messages/<id>/ opened the half record)."""
    r = svc.send_half("pg", Message("TxOrders", b"tx-1", keys="k-1"))
    svc.end_transaction(r.transaction_id, "pg", "COMMIT_MESSAGE")
    found = broker.get_message(r.msg_id)
    assert found.topic == "TxOrders" and found.body == b"tx-1"


def test_a_half_keeps_its_id_when_another_host_serves_its_store(store_dir):
    """After a failover the promoted slave serves the old master's records
    under its own store host: a half is listed under the id it had (the
    record's), and both that id and this host's id at its offset resolve it
    (the console's rollback answered 404 before)."""
    with Broker.open(store_dir, store_host="10.0.0.11:10911", **SMALL) as old:
        s = TransactionService(old, transaction_timeout_ms=0, check_interval_ms=0)
        first = s.send_half("pg", order(1)).transaction_id
        second = s.send_half("pg", order(2)).transaction_id
        s.close()
    with Broker.open(store_dir, store_host="10.0.0.13:10911", **SMALL) as new:
        s = TransactionService(new, transaction_timeout_ms=0, check_interval_ms=0)
        try:
            listed = {h.transaction_id for h in s.list_halves().items}
            assert listed == {first, second}
            assert s.rollback(first, "admin").state is TransactionState.ROLLED_BACK
            offset = s.locate(second).commit_log_offset
            own = offset_msg_id(bytes([10, 0, 0, 13]), 10911, offset)
            assert own != second
            assert s.commit(own, "admin").state is TransactionState.COMMITTED
            # Another host's id at a real offset names nothing.
            with pytest.raises(UnknownTransactionError):
                s.locate(offset_msg_id(bytes([10, 9, 9, 9]), 1, offset))
        finally:
            s.close()
