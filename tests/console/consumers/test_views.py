"""Consumer group pages: lag for every role; reset with preview for operators."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def lagging(broker):
    broker.create_topic("events", 2)
    broker.send_batch(
        [Message("events", b"e%d" % i, queue_id=i % 2) for i in range(40)]
    )
    broker.commit_offset("analytics", "events", 0, 5)
    broker.commit_offset("analytics", "events", 1, 20)
    return "analytics"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(client_as, lagging, role) -> None:
    c = client_as(role)
    body = c.get("/consumer-groups/").content.decode()
    assert "analytics" in body and ">15<" in body  # 15 behind on queue 0, 0 on queue 1
    detail = c.get("/consumer-groups/analytics/").content.decode()
    assert ("Reset offsets" in detail) == (role != "viewer")


def test_group_page_shows_its_dead_letters(client_as, lagging, broker) -> None:
    """Messages in %DLQ%<group> are not lag, but the page says they are there."""
    detail = client_as("viewer").get("/consumer-groups/analytics/").content.decode()
    assert '<div class="v">0</div><div class="k">dead letters</div>' in detail
    from broker_core import MessageInner

    for i in range(3):  # as the endpoint dead-letters (RETRY_TOPIC is reserved)
        broker.store.put_inner(
            MessageInner("%DLQ%analytics", 0, b"d%d" % i, {"RETRY_TOPIC": "events"})
        )
    detail = client_as("viewer").get("/consumer-groups/analytics/").content.decode()
    assert ">15<" in detail  # the lag is unchanged
    assert '<div class="v lag-high">3</div>' in detail
    assert "dead letters in %DLQ%analytics" in detail
    assert 'href="/consumer-groups/analytics/dead-letters/"' in detail
    page = client_as("viewer").get("/consumer-groups/analytics/dead-letters/")
    assert page.status_code == 200
    assert page.content.decode().count('<td class="mono"><a href="/messages/') == 3


def test_a_dead_letter_resent_once_is_not_resent_again_unless_asked(
    client_as, lagging, broker
) -> None:
    """A stale tab's second batch resend delivered every dead letter twice
    (helper-14); now the page shows what was resent, a second resend skips
    it, and 'resend again' sends it once more on purpose."""
    from broker_core import MessageInner

    for i in range(2):
        broker.store.put_inner(
            MessageInner("%DLQ%analytics", 0, b"d%d" % i, {"RETRY_TOPIC": "events"})
        )
    url = "/consumer-groups/analytics/dead-letters/"
    page = client_as("operator").get(url)
    ids = [r["offset_msg_id"] for r in page.context["rows"]]
    assert len(ids) == 2 and all(r["resent_at"] is None for r in page.context["rows"])

    def retry_depth() -> int:
        t = broker.store.topic_config("%RETRY%analytics")
        return 0 if t is None else broker.store.max_offset("%RETRY%analytics", 0)

    post = {"ids": ids, "reason": "fixed the consumer"}
    client_as("operator").post(url + "resend/", post)
    assert retry_depth() == 2
    page = client_as("viewer").get(url)
    assert all(r["resent_at"] is not None for r in page.context["rows"])
    assert all(r["resent_by"] == "operator" for r in page.context["rows"])
    r = client_as("operator").post(url + "resend/", post, follow=True)  # stale tab
    assert retry_depth() == 2
    assert "2 skipped: already resent" in r.content.decode()
    client_as("operator").post(url + "resend/", post | {"again": "on"})
    assert retry_depth() == 4


def test_filter_by_lag(client_as, lagging) -> None:
    body = (
        client_as("viewer").get("/consumer-groups/", {"min_lag": 100}).content.decode()
    )
    assert "analytics" not in body


def test_unknown_group_404_and_no_role_403(client_as, lagging) -> None:
    assert client_as("viewer").get("/consumer-groups/nobody/").status_code == 404
    assert client_as("none").get("/consumer-groups/").status_code == 403


def test_preview_changes_nothing(client_as, lagging, broker) -> None:
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/preview/",
        {"topic": "events", "mode": "offset", "offset": 0},
    )
    assert r.status_code == 200
    assert b"5 consumed again" in r.content and b"20 consumed again" in r.content
    assert broker.committed_offset("analytics", "events", 0) == 5
    assert not AuditRecord.objects.exists()


def test_reset_to_offset_needs_reason_and_operator(client_as, lagging, broker) -> None:
    data = {"topic": "events", "mode": "offset", "offset": 2, "queue_id": 0}
    assert (
        client_as("viewer").post("/consumer-groups/analytics/reset/", data).status_code
        == 403
    )
    assert (
        client_as("viewer")
        .post("/consumer-groups/analytics/reset/preview/", data)
        .status_code
        == 403
    )
    client_as("operator").post("/consumer-groups/analytics/reset/", data)
    assert broker.committed_offset("analytics", "events", 0) == 5  # no reason: refused
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/", data | {"reason": "reprocess after fix"}
    )
    assert r.status_code == 302
    assert broker.committed_offset("analytics", "events", 0) == 2
    assert broker.committed_offset("analytics", "events", 1) == 20
    rec = AuditRecord.objects.get()
    assert rec.before == {"0": 5} and rec.after["offsets"] == {"0": 2}


def test_reset_to_time(client_as, lagging, broker) -> None:
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/",
        {
            "topic": "events",
            "mode": "time",
            "at": "2999-01-01T00:00:00",
            "reason": "skip all",
        },
    )
    assert r.status_code == 302
    assert broker.committed_offset("analytics", "events", 0) == 20
    assert broker.committed_offset("analytics", "events", 1) == 20


def test_a_queue_never_read_counts_its_whole_depth(client_as, broker) -> None:
    """Four queues, the group committed on three: the fourth is listed
    ("never") with all its messages as lag; the topic page lists the group
    once, with its total lag."""
    from console.consumers.services import sync_offsets

    broker.create_topic("orders4", 4)
    broker.send_batch(
        [Message("orders4", b"o%d" % i, queue_id=i % 4) for i in range(40)]
    )
    for q in range(3):
        broker.commit_offset("billing", "orders4", q, 7)  # 3 behind on each
    sync_offsets(force=True)
    c = client_as("viewer")
    assert ">19<" in c.get("/consumer-groups/").content.decode()  # 3 * 3 + 10
    detail = c.get("/consumer-groups/billing/").content.decode()
    assert detail.count('<tr><td><a href="/topics/orders4/">') == 4
    assert ">never<" in detail
    topic = c.get("/topics/orders4/").content.decode()
    assert topic.count(">billing</a>") == 1 and "lag 19" in topic


def test_a_subscribed_group_that_never_consumed_is_listed(client_as, broker) -> None:
    """A group known only from a connected client's subscription (the
    endpoint's clients.json) lags by everything on the topic."""
    import json

    from console.consumers.services import sync_offsets

    broker.create_topic("fresh", 2)
    broker.send_batch([Message("fresh", b"f%d" % i, queue_id=i % 2) for i in range(6)])
    (broker.store.root / "clients.json").write_text(
        json.dumps(
            {
                "clients": [
                    {
                        "client_id": "c1",
                        "client_type": "SIMPLE_CONSUMER",
                        "group": "newcomers",
                        "topics": ["fresh"],
                        "language": "PYTHON",
                        "version": "5.1.2",
                        "address": "ipv4:127.0.0.1:50000",
                        "last_heartbeat": 1_790_000_000.0,
                        "online": True,
                    },
                    {
                        "client_id": "p1",
                        "client_type": "PRODUCER",
                        "group": "",
                        "topics": ["fresh"],
                        "language": "NODE_JS",
                        "version": "1.0.8",
                        "online": True,
                    },
                ]
            }
        )
    )
    sync_offsets(force=True)
    viewer = client_as("viewer")
    body = viewer.get("/consumer-groups/newcomers/").content.decode()
    assert body.count(">never<") == 2 and ">6<" in body
    # Its clients, with language, version and state; not the producer.
    assert ">c1<" in body and "python 5.1.2" in body and ">online<" in body
    assert ">p1<" not in body
    producers = viewer.get("/producer-groups/").content.decode()
    assert ">p1<" in producers and "node_js 1.0.8" in producers
    assert ">c1<" not in producers


# --- group settings (FIFO, delivery attempts) ----------------------------------
SETTINGS_URL = "/consumer-groups/analytics/settings/"


def _settings_block(body: str) -> str:
    start = body.index('data-testid="group-settings"')
    return body[start : body.index("</dl>", start)]


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_group_page_shows_its_settings(client_as, lagging, role) -> None:
    """Every role sees the settings (the defaults here); only an admin gets
    the form."""
    body = client_as(role).get("/consumer-groups/analytics/").content.decode()
    block = _settings_block(body)
    assert 'data-testid="group-fifo">no' in block
    assert "default (17)" in block and "then %DLQ%analytics" in block
    assert ("Save settings" in body) == (role == "admin")


def test_admin_changes_the_settings_audited(client_as, lagging, broker) -> None:
    admin = client_as("admin")
    r = admin.post(
        SETTINGS_URL,
        {"fifo": "on", "max_delivery_attempts": "3", "reason": "orders in order"},
        follow=True,
    )
    assert r.redirect_chain[-1][0] == "/consumer-groups/analytics/"
    body = r.content.decode()
    assert "Settings of analytics saved: FIFO on, 3 delivery attempts" in body
    block = _settings_block(body)
    assert 'data-testid="group-fifo">yes' in block
    assert 'data-testid="group-attempts">3 ' in block
    # What the endpoint reads.
    assert broker.store.groups.is_fifo("analytics")
    assert broker.store.groups.max_attempts("analytics", 17) == 3
    rec = AuditRecord.objects.get()
    assert (rec.action, rec.object_type, rec.object_id) == (
        "consumer_group.update_settings",
        "consumer_group",
        "local/analytics",
    )
    assert rec.actor_username == "admin" and rec.reason == "orders in order"
    assert rec.before is None  # no settings of its own before
    assert rec.after == {"fifo": True, "max_delivery_attempts": 3}
    assert rec.status == AuditRecord.Status.SUCCESS
    # The form starts from the settings in force.
    assert 'id="id_settings_fifo" checked' in body
    assert 'name="max_delivery_attempts" value="3"' in body

    # Unticked and emptied: back to not FIFO and the endpoint's default.
    r = admin.post(
        SETTINGS_URL,
        {"max_delivery_attempts": "", "reason": "back to defaults"},
        follow=True,
    )
    body = r.content.decode()
    assert "FIFO off, the default (17) delivery attempts" in body
    block = _settings_block(body)
    assert 'data-testid="group-fifo">no' in block and "default (17)" in block
    assert broker.store.groups.get("analytics").max_delivery_attempts is None
    assert not broker.store.groups.is_fifo("analytics")
    last = AuditRecord.objects.order_by("-id").first()
    assert last.before == {"fifo": True, "max_delivery_attempts": 3}
    assert last.after == {"fifo": False, "max_delivery_attempts": None}


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_changes_settings(client_as, lagging, broker, role) -> None:
    r = client_as(role).post(
        SETTINGS_URL, {"fifo": "on", "max_delivery_attempts": "3", "reason": "mine"}
    )
    assert r.status_code == 403
    assert broker.store.groups.get("analytics") is None
    assert not AuditRecord.objects.filter(
        action="consumer_group.update_settings", status="success"
    ).exists()


def test_settings_need_a_post(client_as, lagging) -> None:
    assert client_as("admin").get(SETTINGS_URL).status_code == 405


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"max_delivery_attempts": "0", "reason": "try"}, "from 1 to 1000"),
        ({"max_delivery_attempts": "1001", "reason": "try"}, "from 1 to 1000"),
        ({"max_delivery_attempts": "-4", "reason": "try"}, "from 1 to 1000"),
        ({"max_delivery_attempts": "lots", "reason": "try"}, "from 1 to 1000"),
        ({"max_delivery_attempts": "3"}, "Settings reason: This field is required"),
        ({"max_delivery_attempts": "3", "reason": "x"}, "Settings reason: Ensure"),
    ],
)
def test_bad_settings_are_refused_clearly(
    client_as, lagging, broker, data, says
) -> None:
    r = client_as("admin").post(SETTINGS_URL, data | {"fifo": "on"}, follow=True)
    body = r.content.decode()
    assert "Settings not saved: " in body and says in body, body
    if data.get("reason") == "try":
        assert (
            "Max delivery attempts: Give a number of attempts from 1 to 1000, "
            "or leave it empty for the default (17)." in body
        )
    assert broker.store.groups.get("analytics") is None
    assert not AuditRecord.objects.exists()
    assert 'data-testid="group-fifo">no' in _settings_block(body)


def test_the_bounds_are_accepted(client_as, lagging, broker) -> None:
    admin = client_as("admin")
    for n in (1, 1000):
        admin.post(SETTINGS_URL, {"max_delivery_attempts": str(n), "reason": "edge"})
        assert broker.store.groups.get("analytics").max_delivery_attempts == n


def test_a_group_set_up_before_its_consumers_has_a_page(client_as, broker) -> None:
    """Settings made ahead (CLI or API) give the group a page with no
    queues and no reset form; a group with neither is still 404."""
    broker.put_group("CID_later", True, 5)
    body = client_as("admin").get("/consumer-groups/CID_later/").content.decode()
    assert "This group has no subscription yet" in body
    assert 'data-testid="group-fifo">yes' in body
    assert 'data-testid="group-attempts">5 ' in body
    assert "Reset offsets" not in body and "Save settings" in body
    assert client_as("admin").get("/consumer-groups/CID_never/").status_code == 404


def test_the_list_shows_fifo_groups(client_as, lagging, broker) -> None:
    from console.consumers.services import sync_offsets

    broker.commit_offset("billing", "events", 0, 1)
    sync_offsets(force=True)
    broker.put_group("analytics", True, 4)
    body = client_as("viewer").get("/consumer-groups/").content.decode()
    rows = {
        name: body[body.index(f">{name}</a>") :].split("</tr>")[0]
        for name in ("analytics", "billing")
    }
    assert ">FIFO</span>" in rows["analytics"] and "4 attempts" in rows["analytics"]
    assert "FIFO" not in rows["billing"] and "attempts" not in rows["billing"]
