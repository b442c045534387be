"""``/api/transactions/`` under each role, and two operators at once."""

from __future__ import annotations

import threading

import pytest

from broker_core.transaction import TransactionState
from console.audit.models import AuditRecord
from console.brokerlink import get_transaction_service

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(api_as, halves, role) -> None:
    c = api_as(role)
    data = c.get("/api/transactions/", {"sort": "-checks"}).json()
    assert data["count"] == 5
    assert data["results"][0]["id"] in (halves["stuck1"], halves["stuck2"])
    assert data["results"][0]["stuck"] is True
    assert "body_text" not in data["results"][0]
    d = c.get(f"/api/transactions/{halves['stuck1']}/").json()
    assert d["check_count"] == 6 and len(d["history"]) == 6
    assert ("body_text" in d) == (role != "viewer")


def test_filters(api_as, halves) -> None:
    c = api_as("viewer")
    ids = {
        r["id"]
        for r in c.get("/api/transactions/", {"topic": "payments"}).json()["results"]
    }
    assert ids == {halves["fresh"], halves["fresh2"], halves["html"]}
    data = c.get(
        "/api/transactions/", {"state": "ALL", "page_size": 2, "page": 2}
    ).json()
    assert data["count"] == 7 and len(data["results"]) == 2
    assert c.get("/api/transactions/", {"state": "BOGUS"}).status_code == 400
    assert c.get("/api/transactions/NOPE/").json()["code"] == "unknown_transaction"


def test_actions_by_role(api_as, halves) -> None:
    tid = halves["fresh"]
    assert (
        api_as("viewer")
        .post(f"/api/transactions/{tid}/rollback/", {"reason": "abc"}, format="json")
        .status_code
        == 403
    )
    assert (
        api_as("operator")
        .post(
            f"/api/transactions/{tid}/commit/",
            {"reason": "abc", "confirm": "COMMIT"},
            format="json",
        )
        .status_code
        == 403
    )
    assert (
        api_as("admin")
        .post(f"/api/transactions/{tid}/commit/", {"reason": "abc"}, format="json")
        .status_code
        == 400
    )
    r = api_as("admin").post(
        f"/api/transactions/{tid}/commit/",
        {"reason": "paid", "confirm": "COMMIT"},
        format="json",
    )
    assert r.status_code == 200 and r.json()["state"] == "COMMITTED"
    assert r.json()["commit_offset_msg_id"]
    r = api_as("operator").post(
        f"/api/transactions/{tid}/rollback/", {"reason": "late"}, format="json"
    )
    assert r.status_code == 409 and r.json()["code"] == "transaction_conflict"
    r = (
        api_as("operator")
        .post(
            "/api/transactions/bulk-rollback/",
            {"ids": [halves["fresh2"], halves["gone"]], "reason": "bulk"},
            format="json",
        )
        .json()
    )
    assert r["rolled_back"] == [halves["fresh2"]] and r["already"] == [halves["gone"]]


@pytest.mark.django_db(transaction=True)
def test_two_operators_at_once(users, halves) -> None:
    """Both press roll back / commit on the same half at the same instant:
    exactly one outcome is recorded, and both actions are audited."""
    from console.transactions import services

    tid = halves["stuck1"]
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def act(name: str, user) -> None:
        from django.db import connection

        barrier.wait()
        try:
            results[name] = services.perform(
                name, actor=user, transaction_id=tid, reason=f"{name} says so"
            )
        except Exception as exc:  # the loser's conflict is the expected answer
            results[name] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=act, args=("rollback", users["operator"])),
        threading.Thread(target=act, args=("commit", users["admin"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = get_transaction_service().state(tid)
    assert final in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)
    winner = "commit" if final == TransactionState.COMMITTED else "rollback"
    loser = "rollback" if winner == "commit" else "commit"
    assert not isinstance(results[winner], Exception)
    assert type(results[loser]).__name__ == "TransactionConflictError"
    assert sorted(AuditRecord.objects.values_list("status", flat=True)) == [
        "failed",
        "success",
    ]


def test_inputs_that_were_500s_are_400s(api_as, halves) -> None:
    """What a generated-request fuzzer (Schemathesis) found: each is a clear 400."""
    c = api_as("operator")
    r = c.get("/api/transactions/", {"min_age_minutes": "1e300"})
    assert r.status_code == 400
    r = c.post(f"/api/transactions/{halves['stuck1']}/resume/", [1, 2], format="json")
    assert r.status_code == 400 and "Expected a dictionary" in r.json()["message"]
    assert c.get("/api/delay-scheduled/", {"kind": "AAA"}).status_code == 400
