"""The check: due halves, immunity, answers, 15 checks then discard, resume,
retention, budgets and resume points, errors that must not stall a run."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest
from _txhelpers import order, real_messages

from broker_core import Message
from broker_core.transaction import (
    CallableTransport,
    CheckRunStatus,
    ResolutionSource,
    TransactionService,
    TransactionState,
)
from broker_core.validation import TRANS_CHECK_MAX_TIME_TOPIC


class Recorder:
    """An in-process checker that answers from a table and records the calls."""

    def __init__(self, answer="UNKNOWN"):
        self.answer = answer
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, req):
        with self.lock:
            self.calls.append(req)
        a = self.answer
        return a(req) if callable(a) else a


def test_young_halves_are_not_checked_and_old_ones_are(broker):
    rec = Recorder("COMMIT")
    with TransactionService(broker, transaction_timeout_ms=60_000) as svc:
        svc.checkers.set_default(CallableTransport(rec))
        r = svc.send_half("pg", order(1))
        res = svc.run_check()
        assert res.scanned == 0 and rec.calls == []
        # Seventy seconds later it is due.
        res = svc.run_check(now_ms=int(time.time() * 1000) + 70_000)
        assert res.checks_sent == 1 and res.answers == {"COMMIT": 1}
        assert svc.state(r.transaction_id) is TransactionState.COMMITTED
        req = rec.calls[0]
        assert req.transaction_id == r.transaction_id and req.msg_id == r.msg_id
        assert (req.topic, req.keys, req.tags, req.body) == (
            "Orders",
            "o-1",
            "paid",
            b"order-1",
        )
        assert req.check_no == 1 and req.producer_group == "pg"


def test_check_immunity_delays_the_first_check_without_burning_the_counter(broker):
    rec = Recorder()
    with TransactionService(
        broker, transaction_timeout_ms=0, check_interval_ms=0
    ) as svc:
        svc.checkers.set_default(CallableTransport(rec))
        r = svc.send_half(
            "pg", order(1, properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "3600"})
        )
        for _ in range(20):
            svc.run_check()
        assert rec.calls == []
        info = svc.get_half(r.transaction_id).info
        assert info.check_count == 0 and info.state is TransactionState.PENDING
        later = int(time.time() * 1000) + 3601_000
        svc.run_check(now_ms=later)
        assert len(rec.calls) == 1


def test_check_answers_resolve_with_source_check_and_history(svc, broker):
    answers = {}
    rec = Recorder(lambda req: answers[req.transaction_id])
    svc.checkers.set_default(CallableTransport(rec))
    c = svc.send_half("pg", order(1))
    rb = svc.send_half("pg", order(2))
    u = svc.send_half("pg", order(3))
    answers.update(
        {
            c.transaction_id: "COMMIT",
            rb.transaction_id: "ROLLBACK",
            u.transaction_id: "UNKNOWN",
        }
    )
    res = svc.run_check()
    assert res.status is CheckRunStatus.COMPLETED
    assert res.answers == {"COMMIT": 1, "ROLLBACK": 1, "UNKNOWN": 1}
    d = svc.get_half(c.transaction_id)
    assert d.info.state is TransactionState.COMMITTED
    assert d.info.outcome_source is ResolutionSource.CHECK
    kinds = [(e.kind, e.answer) for e in d.history]
    assert kinds == [("CHECK", "COMMIT"), ("COMMIT", None)]
    chk = d.history[0]
    assert chk.transport == "callable" and chk.check_no == 1 and chk.latency_ms >= 0
    assert svc.state(rb.transaction_id) is TransactionState.ROLLED_BACK
    assert svc.get_half(u.transaction_id).info.check_count == 1
    assert [m.msg_id for m in real_messages(broker)] == [c.msg_id]


def test_unanswered_half_is_checked_15_times_then_discarded_and_can_be_resumed(
    svc, broker
):
    rec = Recorder("UNKNOWN")
    svc.checkers.set_default(CallableTransport(rec))
    r = svc.send_half("pg", order(1))
    for _ in range(15):
        assert svc.run_check().checks_sent == 1
    assert svc.get_half(r.transaction_id).info.check_count == 15
    res = svc.run_check()
    assert res.discarded == 1 and res.checks_sent == 0
    assert len(rec.calls) == 15
    assert [c.check_no for c in rec.calls] == list(range(1, 16))
    d = svc.get_half(r.transaction_id)
    assert d.info.state is TransactionState.DISCARDED
    assert "15" in d.info.discard_reason
    assert [e.kind for e in d.history] == ["CHECK"] * 15 + ["DISCARD"]
    # Shown as such in the index and the metrics, and copied to the discard topic.
    page = svc.list_halves(state="DISCARDED")
    assert [h.transaction_id for h in page.items] == [r.transaction_id]
    assert svc.list_halves().total == 0
    assert svc.metrics().discarded == 1 and svc.metrics().discards == 1
    assert broker.store.topic_config(TRANS_CHECK_MAX_TIME_TOPIC).queue_nums == 1
    copy = broker.pull("probe", TRANS_CHECK_MAX_TIME_TOPIC, 0, 0).messages
    assert len(copy) == 1 and copy[0].msg_id == r.msg_id
    assert copy[0].properties["TRANSACTION_CHECK_TIMES"] == "15"
    # Nothing more happens to it, and a late client answer is refused.
    assert svc.run_check().scanned == 0
    from broker_core.errors import TransactionConflictError

    with pytest.raises(TransactionConflictError, match="DISCARDED"):
        svc.end_transaction(r.transaction_id, "pg", "COMMIT")
    # Resume: the count restarts and it is checked again.
    assert svc.resume(r.transaction_id, operator="ann") is TransactionState.PENDING
    info = svc.get_half(r.transaction_id).info
    assert info.state is TransactionState.PENDING and info.check_count == 0
    rec.answer = "COMMIT"
    assert svc.run_check().answers == {"COMMIT": 1}
    assert rec.calls[-1].check_no == 1
    assert svc.state(r.transaction_id) is TransactionState.COMMITTED
    assert [e.kind for e in svc.get_half(r.transaction_id).history][-3:] == [
        "RESUME",
        "CHECK",
        "COMMIT",
    ]


def test_a_discarded_half_committed_later_is_found_by_id(svc, broker):
    """An operator commits a discarded half: the result names the operator,
    also when the commit is repeated; its id opens the delivered message, not
    the discard's copy in ``TRANS_CHECK_MAX_TIME_TOPIC`` (it did for a topic
    sorting after it)."""
    svc.checkers.set_default(CallableTransport(Recorder("UNKNOWN")))
    r = svc.send_half("pg", Message("payments", b"pay-1", keys="p-1"))
    for _ in range(16):
        svc.run_check()
    assert svc.state(r.transaction_id) is TransactionState.DISCARDED
    # Who committed it is kept (the fold of the commit's message left the
    # discard's record as the outcome: "already committed (by ?)").
    for status in ("RESOLVED", "ALREADY_RESOLVED"):
        res = svc.commit(r.transaction_id, "ann")
        assert (res.status.value, res.state) == (status, TransactionState.COMMITTED)
        assert res.source is ResolutionSource.OPERATOR and res.operator == "ann"
    found = broker.get_message(r.msg_id)
    assert (found.topic, found.body) == ("payments", b"pay-1"), found.topic


def test_operator_may_resolve_a_discarded_half(broker):
    with TransactionService(
        broker, transaction_timeout_ms=0, check_interval_ms=0, check_max=1
    ) as svc:
        r = svc.send_half("pg", order(1))

        def explode(req):
            raise ValueError("exploded")

        svc.checkers.set_default(CallableTransport(explode))
        svc.run_check()  # the checker was reached and failed: that counts
        svc.run_check()
        assert svc.state(r.transaction_id) is TransactionState.DISCARDED
        res = svc.rollback(r.transaction_id, operator="ann")
        assert res.state is TransactionState.ROLLED_BACK
        assert res.source is ResolutionSource.OPERATOR and res.operator == "ann"
        d = svc.get_half(r.transaction_id)
        assert d.history[0].answer == "FAILED" and "exploded" in d.history[0].detail
        assert d.info.operator == "ann"


def test_rollback_on_max_checks(broker):
    with TransactionService(
        broker,
        transaction_timeout_ms=0,
        check_interval_ms=0,
        check_max=2,
        rollback_on_max_checks=True,
    ) as svc:
        svc.checkers.set_default(CallableTransport(lambda req: None))
        r = svc.send_half("pg", order(1))
        for _ in range(2):
            svc.run_check()
        assert svc.run_check().rolled_back == 1
        info = svc.get_half(r.transaction_id).info
        assert info.state is TransactionState.ROLLED_BACK
        assert info.outcome_source is ResolutionSource.CHECK


def test_halves_older_than_the_file_retention_are_skipped(broker):
    rec = Recorder("COMMIT")
    with TransactionService(
        broker, transaction_timeout_ms=0, file_reserved_hours=1.0
    ) as svc:
        svc.checkers.set_default(CallableTransport(rec))
        r = svc.send_half("pg", order(1))
        res = svc.run_check(now_ms=int(time.time() * 1000) + 2 * 3600_000)
        assert res.skipped_expired == 1 and rec.calls == []
        info = svc.get_half(r.transaction_id).info
        assert info.state is TransactionState.DISCARDED
        assert "retention" in info.discard_reason


def test_a_failing_checker_never_stalls_the_others(svc):
    def answer(req):
        if req.producer_group == "bad":
            raise RuntimeError("checker exploded")
        return "COMMIT"

    svc.checkers.set_default(CallableTransport(answer))
    bad = [svc.send_half("bad", order(i)) for i in range(5)]
    good = [svc.send_half("good", order(i)) for i in range(5)]
    res = svc.run_check()
    assert res.answers == {"FAILED": 5, "COMMIT": 5}
    assert all(svc.state(r.transaction_id) is TransactionState.COMMITTED for r in good)
    info = svc.get_half(bad[0].transaction_id)
    assert info.info.check_count == 1
    assert info.history[0].answer == "FAILED" and "exploded" in info.history[0].detail


def test_a_slow_checker_does_not_block_the_scan(svc):
    gate = threading.Event()

    def answer(req):
        if req.producer_group == "slow":
            gate.wait(10)
        return "COMMIT"

    svc.checkers.set_default(CallableTransport(answer))
    slow = [svc.send_half("slow", order(i)) for i in range(20)]
    fast = [svc.send_half("fast", order(i)) for i in range(5)]
    t = time.monotonic()
    res = svc.run_check(wait=False)
    assert time.monotonic() - t < 5
    assert res.checks_sent == 25
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(svc.state(r.transaction_id) is TransactionState.COMMITTED for r in fast):
            break
        time.sleep(0.05)
    assert all(svc.state(r.transaction_id) is TransactionState.COMMITTED for r in fast)
    # A second run does not send a second check for halves still in flight.
    assert svc.run_check(wait=False).checks_sent == 0
    gate.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(svc.state(r.transaction_id) is TransactionState.COMMITTED for r in slow):
            break
        time.sleep(0.05)
    assert all(svc.state(r.transaction_id) is TransactionState.COMMITTED for r in slow)


def test_a_run_stops_at_its_budget_and_the_next_resumes(broker):
    rec = Recorder("UNKNOWN")
    with TransactionService(broker, transaction_timeout_ms=0) as svc:
        svc.checkers.set_default(CallableTransport(rec))
        halves = [svc.send_half("pg", order(i)) for i in range(10)]
        first = svc.run_check(max_checks=4)
        assert first.status is CheckRunStatus.BUDGET_EXHAUSTED
        assert first.checks_sent == 4
        second = svc.run_check(max_checks=4)
        third = svc.run_check(max_checks=4)
        assert third.status is CheckRunStatus.COMPLETED and third.checks_sent == 2
        assert second.checks_sent == 4
        # Oldest first, each exactly once: the runs resumed where the last stopped.
        checked = [c.transaction_id for c in rec.calls]
        ids = [h.transaction_id for h in halves]
        for lo, hi in ((0, 4), (4, 8), (8, 10)):
            assert set(checked[lo:hi]) == set(ids[lo:hi])
        assert svc.run_check(time_budget_s=0.0).checks_sent == 0


def test_one_run_at_a_time(svc, store_dir):
    fd = os.open(store_dir / "transaction" / "check.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert svc.run_check().status is CheckRunStatus.BUSY
    finally:
        os.close(fd)
    assert svc.run_check().status is CheckRunStatus.COMPLETED


def test_list_filters_sorting_paging_and_metrics(svc):
    svc.send_half("g1", order(1))
    for i in range(6):
        svc.send_half("g2", order(10 + i, properties={}))
    svc.send_half("g1", order(2).__class__("Payments", b"p", keys="pay-1 shared"))
    r = svc.send_half("g2", order(3).__class__("Payments", b"q", keys="shared"))
    svc.end_transaction(r.transaction_id, "g2", "COMMIT")
    assert svc.list_halves(producer_group="g2").total == 6
    assert svc.list_halves(topic="Payments").total == 1
    assert svc.list_halves(topic="Payments", state=None).total == 2
    assert svc.list_halves(key="shared", state=None).total == 2
    assert svc.list_halves(key="o-12").items[0].keys == "o-12"
    assert svc.list_halves(min_age_s=3600).total == 0
    assert (
        svc.list_halves(state=["COMMITTED"]).items[0].transaction_id == r.transaction_id
    )
    p1 = svc.list_halves(page=1, page_size=3, sort="-born")
    p3 = svc.list_halves(page=3, page_size=3, sort="-born")
    assert len(p1.items) == 3 and len(p3.items) == 2 and p1.total == 8
    borns = [h.born_timestamp for h in p1.items]
    assert borns == sorted(borns, reverse=True)
    with pytest.raises(ValueError):
        svc.list_halves(sort="colour")
    svc.checkers.set_default(CallableTransport(lambda req: "UNKNOWN"))
    svc.run_check(max_checks=2)
    assert svc.list_halves(min_checks=1).total == 2
    m = svc.metrics()
    assert m.pending_by_topic == {"Orders": 7, "Payments": 1}
    assert (m.commits, m.checks_sent, m.checks_answered) == (1, 2, 2)
    assert m.half_to_outcome_count == 1


def test_totals_are_exact_for_states_and_capped_for_other_filters(svc):
    for i in range(12):
        svc.send_half("g1", order(i))
    r = svc.send_half("g1", order(99))
    svc.end_transaction(r.transaction_id, "g1", "ROLLBACK")
    assert svc.list_halves().total == 12
    assert svc.list_halves(state=None).total == 13
    assert svc.list_halves(state="ROLLED_BACK").total == 1
    page = svc.list_halves(producer_group="g1", total_limit=5)
    assert (page.total, page.total_capped) == (5, True)
    page = svc.list_halves(producer_group="g1", total_limit=50)
    assert (page.total, page.total_capped) == (12, False)


def test_counts_by_group_and_an_index_of_another_version_is_rebuilt(svc, broker):
    for i in range(3):
        svc.send_half("g1", order(i))
    r = svc.send_half("g2", order(9))
    svc.end_transaction(r.transaction_id, "g2", "COMMIT")
    want = {
        "g1": {TransactionState.PENDING: 3},
        "g2": {TransactionState.COMMITTED: 1},
    }
    assert svc.counts_by_group() == want
    svc.index.conn().execute("UPDATE meta SET value = 0 WHERE key = 'schema'")
    other = TransactionService(broker)
    try:
        assert other.index.applied_pos == 0  # dropped, to be folded again
        assert other.counts_by_group() == want
        assert other.list_halves().total == 3
    finally:
        other.close()


def test_asynchronous_answers_are_recorded_and_counted(svc):
    """A checker that answers later (gRPC producers, with EndTransaction):
    each answer is in the half's history with its latency and counted by kind;
    UNKNOWN leaves the half pending."""
    h = svc.send_half("pg", order(7))
    svc.record_check_answer(h.transaction_id, "UNKNOWN", "client-1", 12.5)
    assert svc.state(h.transaction_id) is TransactionState.PENDING
    svc.record_check_answer(h.transaction_id, "commit", "client-1", 30.0)
    svc.end_transaction(h.transaction_id, "pg", "COMMIT", "CHECK")
    hist = [
        (e.kind, e.answer, e.latency_ms) for e in svc.get_half(h.transaction_id).history
    ]
    assert hist == [
        ("ANSWER", "UNKNOWN", 12.5),
        ("ANSWER", "COMMIT", 30.0),
        ("COMMIT", None, None),
    ]
    m = svc.metrics()
    assert (m.checks_unknown, m.checks_commit, m.checks_rollback) == (1, 1, 0)
    assert m.checks_answered == 2
    with pytest.raises(ValueError):
        svc.record_check_answer(h.transaction_id, "MAYBE")


def test_failed_checks_say_why(svc):
    """No producer online, a timeout and any other error are counted apart."""
    from broker_core.transaction import NoProducerOnlineError

    errors = {}

    def fail(req):
        raise errors[req.transaction_id]

    svc.checkers.set_default(CallableTransport(fail))
    a = svc.send_half("pg", order(21))
    b = svc.send_half("pg", order(22))
    c = svc.send_half("pg", order(23))
    errors.update(
        {
            a.transaction_id: NoProducerOnlineError("no live producer of 'Orders'"),
            b.transaction_id: TimeoutError("read timed out"),
            c.transaction_id: ValueError("bad reply"),
        }
    )
    svc.run_check()
    m = svc.metrics()
    assert (m.checks_no_producer, m.checks_timeout, m.checks_error) == (1, 1, 1)
    assert m.checks_failed == 3


def test_a_check_that_reaches_nobody_does_not_count(broker):
    """A producer offline for many check rounds keeps all its checks; only the
    checks that reach it count. One that never comes back is discarded by
    the file retention, so nothing pends forever."""
    from broker_core.transaction import NoProducerOnlineError

    online = {"pg": False}

    def producer(req):
        if not online[req.producer_group]:
            raise NoProducerOnlineError(f"no live producer of {req.topic!r}")
        return "UNKNOWN"

    with TransactionService(
        broker,
        transaction_timeout_ms=0,
        check_interval_ms=0,
        check_max=3,
        file_reserved_hours=1.0,
    ) as svc:
        svc.checkers.set_default(CallableTransport(producer))
        r = svc.send_half("pg", order(1))
        for _ in range(20):
            res = svc.run_check()
            assert res.answers == {"FAILED": 1} and res.not_delivered == 1
        d = svc.get_half(r.transaction_id)
        assert d.info.state is TransactionState.PENDING and d.info.check_count == 0
        checks = [e for e in d.history if e.kind == "CHECK"]
        assert len(checks) == 20
        assert all(e.check_no is None for e in checks)
        assert "no producer online, not counted" in checks[0].detail
        m = svc.metrics()
        assert (m.checks_no_producer, m.checks_failed) == (20, 20)
        # The producer is back: its checks count, and after check_max of them
        # unanswered the half is discarded as usual.
        online["pg"] = True
        for n in (1, 2, 3):
            res = svc.run_check()
            assert res.answers == {"UNKNOWN": 1} and res.not_delivered == 0
            assert svc.get_half(r.transaction_id).info.check_count == n
        assert [e.check_no for e in svc.get_half(r.transaction_id).history][-3:] == [
            1,
            2,
            3,
        ]
        assert svc.run_check().discarded == 1
        # A producer that never comes back: checked without counting until
        # the half is older than the file retention, then discarded.
        online["pg"] = False
        gone = svc.send_half("pg", order(2))
        for _ in range(5):
            svc.run_check()
        assert svc.get_half(gone.transaction_id).info.check_count == 0
        later = int(time.time() * 1000) + 3_601_000
        assert svc.run_check(now_ms=later).skipped_expired == 1
        info = svc.get_half(gone.transaction_id).info
        assert info.state is TransactionState.DISCARDED
        assert "retention" in info.discard_reason


def test_a_check_that_reached_the_fallback_counts(svc):
    """Live producers offline, the group's own checker reached but failing:
    the check was delivered somewhere, so it counts."""
    from broker_core.transaction import NoProducerOnlineError

    class Live(CallableTransport):
        name = "grpc"

    def nobody(req):
        raise NoProducerOnlineError("no live producer")

    def slow(req):
        raise TimeoutError("read timed out")

    svc.checkers.set_live(Live(nobody))
    svc.checkers.set_transport("pg", CallableTransport(slow))
    r = svc.send_half("pg", order(1))
    res = svc.run_check()
    assert res.answers == {"FAILED": 1} and res.not_delivered == 0
    d = svc.get_half(r.transaction_id)
    assert d.info.check_count == 1 and d.history[0].check_no == 1
    assert svc.metrics().checks_timeout == 1


def test_a_check_is_listed_before_the_outcome_its_answer_led_to(svc, broker):
    """The producer commits while the check-back is still in flight (as a
    gRPC producer does: EndTransaction, then the check's answer): the commit's
    record is written before the check's, but the history lists the check
    first, as it happened (it showed the answer above its check)."""
    c = svc.send_half("pg", order(1))

    def producer(req):
        time.sleep(0.01)
        svc.end_transaction(req.transaction_id, "pg", "COMMIT")
        return "COMMIT"

    svc.checkers.set_default(CallableTransport(Recorder(producer)))
    svc.run_check()
    d = svc.get_half(c.transaction_id)
    assert d.info.state is TransactionState.COMMITTED
    assert [e.kind for e in d.history] == ["CHECK", "COMMIT"]
    check, commit = d.history
    assert check.log_offset > commit.log_offset  # written after, listed before
