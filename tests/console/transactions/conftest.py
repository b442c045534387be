from __future__ import annotations

import time

import pytest

from broker_core import Message
from broker_core.transaction import CheckAnswer
from console.brokerlink import get_transaction_service


@pytest.fixture
def halves(broker):
    """Five pending halves (two stuck: 6 failed checks), one committed, one rolled
    back."""
    svc = get_transaction_service()
    ids = {}
    for name, group, topic in [
        ("stuck1", "PID_orders", "orders"),
        ("stuck2", "PID_orders", "orders"),
        ("fresh", "PID_pay", "payments"),
        ("fresh2", "PID_pay", "payments"),
        ("html", "PID_pay", "payments"),
        ("done", "PID_orders", "orders"),
        ("gone", "PID_orders", "orders"),
    ]:
        body = (
            b"<script>window.pwned=1</script>"
            if name == "html"
            else b'{"order": "%s"}' % name.encode()
        )
        r = svc.send_half(group, Message(topic, body, tags="tx", keys=f"key-{name}"))
        ids[name] = r.transaction_id
    now = int(time.time() * 1000)
    for name in ("stuck1", "stuck2"):
        half = svc.locate(ids[name])
        for n in range(6):
            svc.record_check(
                half,
                CheckAnswer.FAILED,
                "webhook",
                "http://x/check",
                now - (6 - n) * 1000,
                1000,
                "connection refused",
            )
    svc.end_transaction(ids["done"], "PID_orders", "COMMIT")
    svc.end_transaction(ids["gone"], "PID_orders", "ROLLBACK")
    return ids
