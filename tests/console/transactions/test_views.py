"""Transaction pages under each role; actions allowed and denied; two
operators on one half."""

from __future__ import annotations

import json

import pytest

from broker_core.transaction import TransactionState
from console.audit.models import AuditRecord
from console.brokerlink import get_transaction_service

pytestmark = pytest.mark.django_db


def _state(tid):
    return get_transaction_service().state(tid)


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_pending_list(client_as, halves, role) -> None:
    body = client_as(role).get("/transactions/").content.decode()
    for name in ("stuck1", "stuck2", "fresh", "html"):
        assert halves[name] in body
    assert halves["done"] not in body and halves["gone"] not in body
    assert ("Roll back</button>" in body) == (role != "viewer")
    assert ('name="ids"' in body) == (role != "viewer")
    assert body.count('class="stuck"') == 2


def test_filters_sort_and_states(client_as, halves) -> None:
    c = client_as("viewer")
    body = c.get("/transactions/", {"producer_group": "PID_pay"}).content.decode()
    assert halves["fresh"] in body and halves["stuck1"] not in body
    body = c.get("/transactions/", {"min_checks": 5}).content.decode()
    assert halves["stuck1"] in body and halves["fresh"] not in body
    body = c.get("/transactions/", {"key": "key-fresh2"}).content.decode()
    assert halves["fresh2"] in body and halves["fresh"] not in body
    body = c.get("/transactions/", {"state": "COMMITTED"}).content.decode()
    assert halves["done"] in body and halves["stuck1"] not in body
    body = c.get("/transactions/", {"sort": "-checks", "per_page": 25}).content.decode()
    assert body.index(halves["stuck1"]) < body.index(halves["fresh"])
    assert c.get("/transactions/discarded/").status_code == 200
    # The filter form is on the page, each field keeping what was asked.
    body = c.get("/transactions/", {"min_checks": 5}).content.decode()
    for name in ("producer_group", "topic", "key", "min_age_minutes", "state"):
        assert f'name="{name}"' in body, name
    assert 'name="min_checks" value="5"' in body


def test_no_role(client_as, halves) -> None:
    c = client_as("none")
    assert c.get("/transactions/").status_code == 403
    assert c.get(f"/transactions/{halves['fresh']}/").status_code == 403


def test_half_page_by_role(client_as, halves) -> None:
    url = f"/transactions/{halves['stuck1']}/"
    viewer = client_as("viewer").get(url).content.decode()
    assert "connection refused" in viewer and "#6" in viewer  # the check timeline
    assert (
        'data-testid="body-hidden"' in viewer
        and "order" not in viewer.split("Body")[-1]
    )
    assert "Roll back</button>" not in viewer and "Commit</button>" not in viewer
    operator = client_as("operator").get(url).content.decode()
    assert "Roll back</button>" in operator and "Commit</button>" not in operator
    assert "&quot;order&quot;" in operator
    admin = client_as("admin").get(url).content.decode()
    assert "Commit</button>" in admin
    assert client_as("viewer").get("/transactions/NOPE/").status_code == 404


def test_html_body_escaped(client_as, halves) -> None:
    body = (
        client_as("operator").get(f"/transactions/{halves['html']}/").content.decode()
    )
    assert "<script>window.pwned" not in body and "&lt;script&gt;" in body


def test_rollback_needs_operator_and_reason(client_as, halves) -> None:
    url = f"/transactions/{halves['stuck1']}/rollback/"
    assert client_as("viewer").post(url, {"reason": "stuck"}).status_code == 403
    client_as("operator").post(url, {"reason": ""})
    assert _state(halves["stuck1"]) == TransactionState.PENDING
    r = client_as("operator").post(url, {"reason": "checker down"}, follow=True)
    assert b"Rolled back" in r.content
    assert _state(halves["stuck1"]) == TransactionState.ROLLED_BACK
    rec = AuditRecord.objects.get(action="transaction.rollback")
    assert rec.reason == "checker down" and rec.before["state"] == "PENDING"
    assert rec.after["state"] == "ROLLED_BACK"
    body = client_as("viewer").get("/transactions/").content.decode()
    assert halves["stuck1"] not in body


def test_commit_admin_only_with_typed_confirmation(client_as, halves) -> None:
    url = f"/transactions/{halves['fresh']}/commit/"
    data = {"confirm": "COMMIT", "reason": "verified in ledger"}
    assert client_as("operator").post(url, data).status_code == 403
    client_as("admin").post(url, data | {"confirm": "commit"})
    client_as("admin").post(url, {"confirm": "COMMIT", "reason": ""})
    assert _state(halves["fresh"]) == TransactionState.PENDING
    r = client_as("admin").post(url, data, follow=True)
    assert b"Committed" in r.content
    assert _state(halves["fresh"]) == TransactionState.COMMITTED
    assert (
        AuditRecord.objects.get(action="transaction.commit").actor_username == "admin"
    )
    # A second commit changes nothing, and its audit record says so.
    client_as("admin").post(url, data | {"reason": "double click"}, follow=True)
    second = AuditRecord.objects.filter(action="transaction.commit").order_by("id")
    assert second.count() == 2
    assert second.first().message == ""
    assert second.last().message == "no change: already committed (by admin)"


def test_two_operators_on_one_half(client_as, users, halves) -> None:
    from django.test import Client

    other = users["operator"].__class__.objects.create_user(
        "operator2", password="x" * 12
    )
    from console.ui.roles import set_role

    set_role(other, "operator")
    c2 = Client()
    c2.force_login(other)
    url = f"/transactions/{halves['stuck2']}/rollback/"
    first = client_as("operator").post(url, {"reason": "mine"}, follow=True)
    second = c2.post(url, {"reason": "also mine"}, follow=True)
    assert b"Rolled back" in first.content
    assert b"already rolled_back" in second.content and b"operator" in second.content
    # A commit after the rollback is refused, not applied.
    r = client_as("admin").post(
        f"/transactions/{halves['stuck2']}/commit/",
        {"confirm": "COMMIT", "reason": "late"},
        follow=True,
    )
    assert b"Not committed" in r.content
    assert _state(halves["stuck2"]) == TransactionState.ROLLED_BACK
    statuses = list(
        AuditRecord.objects.order_by("id").values_list("actor_username", "status")
    )
    assert statuses == [
        ("operator", "success"),
        ("operator2", "success"),
        ("admin", "failed"),
    ]


def test_bulk_rollback_selected_and_matching(client_as, halves) -> None:
    c = client_as("operator")
    assert (
        client_as("viewer")
        .post(
            "/transactions/bulk-rollback/",
            {"ids": [halves["fresh"]], "reason": "x" * 5},
        )
        .status_code
        == 403
    )
    r = c.post(
        "/transactions/bulk-rollback/",
        {"ids": [halves["fresh"], halves["fresh2"]], "reason": "bad batch"},
        follow=True,
    )
    assert b"Rolled back 2" in r.content
    r = c.post(
        "/transactions/bulk-rollback/",
        {
            "all_matching": "on",
            "filters": '{"min_checks": "5"}',
            "reason": "checker dead",
        },
        follow=True,
    )
    assert b"Rolled back 2" in r.content
    assert _state(halves["stuck1"]) == TransactionState.ROLLED_BACK
    assert _state(halves["html"]) == TransactionState.PENDING
    assert AuditRecord.objects.filter(action="transaction.rollback").count() == 4


def test_resume_discarded(client_as, halves) -> None:
    svc = get_transaction_service()
    half = svc.locate(halves["stuck1"])
    svc.discard(half, "max checks", 6)
    body = client_as("viewer").get("/transactions/discarded/").content.decode()
    assert halves["stuck1"] in body
    page = (
        client_as("operator").get(f"/transactions/{halves['stuck1']}/").content.decode()
    )
    assert "Resume check" in page
    url = f"/transactions/{halves['stuck1']}/resume/"
    assert client_as("viewer").post(url).status_code == 403
    client_as("operator").post(url, {"reason": "checker fixed"})
    assert _state(halves["stuck1"]) == TransactionState.PENDING
    assert AuditRecord.objects.get(action="transaction.resume").after == {
        "state": "PENDING"
    }


def test_overview_counts_pending_and_stuck(client_as, halves) -> None:
    body = client_as("viewer").get("/").content.decode()
    assert "pending halves" in body
    tiles = body.split("pending halves")[0]
    assert '<div class="v">5</div>' in tiles  # five pending
    assert "stuck: checked 5+ times" in body
    assert '<div class="v error">2</div><div class="k">stuck: checked' in body


def test_resume_from_the_discarded_list(client_as, halves) -> None:
    svc = get_transaction_service()
    svc.discard(svc.locate(halves["stuck2"]), "max checks", 6)
    assert (
        "Resume</button>"
        not in client_as("viewer").get("/transactions/discarded/").content.decode()
    )
    body = client_as("operator").get("/transactions/discarded/").content.decode()
    assert "Resume</button>" in body
    action = f'action="/transactions/{halves["stuck2"]}/resume/"'
    assert action in body
    r = client_as("operator").post(
        f"/transactions/{halves['stuck2']}/resume/",
        {"next": "/transactions/discarded/"},
    )
    assert r["Location"] == "/transactions/discarded/"
    assert _state(halves["stuck2"]) == TransactionState.PENDING


def test_bulk_rollback_with_garbled_filter(client_as, halves) -> None:
    r = client_as("operator").post(
        "/transactions/bulk-rollback/",
        {"all_matching": "on", "filters": "{not json", "reason": "oops"},
        follow=True,
    )
    assert b"unreadable" in r.content
    assert _state(halves["fresh"]) == TransactionState.PENDING


def test_next_check_says_when_the_check_will_come(client_as, halves) -> None:
    """A half not yet due shows its due time and that the first check run after
    it checks it; one already due says the next check run will (it showed a
    time in the past as the "next check")."""
    import time

    from django.template import Context, Template

    svc = get_transaction_service()
    fresh = svc.get_half(halves["fresh"]).info
    assert fresh.next_check_at > time.time() * 1000
    page = client_as("viewer").get(f"/transactions/{halves['fresh']}/")
    text = page.content.decode()
    assert "or the first check run after it (the check runs every 60 s)" in text

    def render(due_ms: int, full: bool) -> str:
        t = Template("{% load ui %}{% next_check due full %}")
        return t.render(Context({"due": due_ms, "full": full}))

    past = int(time.time() * 1000) - 5000
    assert "at the next check run (due since" in render(past, True)
    assert ">next run</span>" in render(past, False)
    future = int(time.time() * 1000) + 30_000
    assert "or the first check run after it" in render(future, True)
    assert "next run" not in render(future, False)


@pytest.mark.parametrize(
    "bad", [{"state": "all"}, {"state": "bogus"}, {"min_checks": "abc"}]
)
def test_an_invalid_filter_is_refused_never_dropped(client_as, halves, bad) -> None:
    """With a filter value the form refuses, the list showed every pending half
    and "every half matching the filter" rolled back all of them (helper-14:
    ``state=all&key=rk3`` rolled back 10 halves instead of 1)."""
    query = {"key": "key-fresh", **bad}
    page = client_as("operator").get("/transactions/", query)
    text = page.content.decode()
    assert 'data-testid="filter-error"' in text
    assert not any(halves[n] in text for n in ("stuck1", "stuck2", "fresh", "html"))
    assert "every half matching the filter" not in text
    r = client_as("operator").post(
        "/transactions/bulk-rollback/",
        {"all_matching": "on", "reason": "only fresh", "filters": json.dumps(query)},
    )
    assert r.status_code == 302
    for name in ("stuck1", "stuck2", "fresh", "fresh2", "html"):
        assert _state(halves[name]) is TransactionState.PENDING, name
    assert not AuditRecord.objects.filter(action="transaction.rollback").exists()
    # The same filter, valid: exactly its half.
    r = client_as("operator").post(
        "/transactions/bulk-rollback/",
        {"all_matching": "on", "reason": "only fresh",
         "filters": json.dumps({"key": "key-fresh", "state": "ALL"})},
    )  # fmt: skip
    assert _state(halves["fresh"]) is TransactionState.ROLLED_BACK
    assert _state(halves["fresh2"]) is TransactionState.PENDING


def test_times_say_their_zone_once_and_a_discard_names_no_empty_source(
    client_as, halves
) -> None:
    """The half page gives its age once (it read "3 min ago (2 minutes
    ago)"); a discarded half's outcome has no "by ;"; the list's times carry
    their zone (born: an age with the full time and zone in its title; last
    check: time of day and zone)."""
    import re

    svc = get_transaction_service()
    svc.discard(svc.locate(halves["stuck1"]), "max checks", 6)
    page = client_as("viewer").get(f"/transactions/{halves['stuck1']}/")
    text = page.content.decode()
    born = re.search(r"<dt>Born</dt><dd>(.*?)</dd>", text, re.S).group(1)
    assert re.sub(r"<[^>]+>", "", born).count(" ago") == 1, born
    outcome = re.search(r"<dt>Outcome</dt><dd>(.*?)</dd>", text, re.S).group(1)
    assert "discarded" in outcome and " by ;" not in outcome and " by <" not in outcome
    assert not re.search(r" by\s*;", outcome), outcome

    listed = client_as("viewer").get("/transactions/").content.decode()
    row = re.search(
        rf"<tr[^>]*>(?:(?!</tr>).)*{halves['stuck2']}(?:(?!</tr>).)*</tr>", listed, re.S
    ).group(0)
    born_cell = re.search(r'<time datetime="[^"]+" title="([^"]+)">([^<]+)</time>', row)
    assert born_cell and born_cell.group(1).endswith(" UTC"), row
    assert born_cell.group(2).endswith(" ago")
    # stuck2 was checked: its last check is a time of day with the zone.
    assert re.search(r">\d\d:\d\d:\d\d UTC</time>", row), row
