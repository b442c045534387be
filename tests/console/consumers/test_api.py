"""``/api/consumer-groups/``: lag for all roles, reset for operators."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def group(broker):
    broker.create_topic("events", 2)
    broker.send_batch([Message("events", b"e", queue_id=i % 2) for i in range(20)])
    broker.commit_offset("etl", "events", 0, 3)
    broker.commit_offset("etl", "events", 1, 10)


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(api_as, group, role) -> None:
    c = api_as(role)
    rows = c.get("/api/consumer-groups/", {"min_lag": 1}).json()["results"]
    assert [(r["group"], r["queue_id"], r["lag"]) for r in rows] == [("etl", 0, 7)]
    assert c.get("/api/consumer-groups/etl/").json()["lag"] == 7
    assert c.get("/api/consumer-groups/nope/").status_code == 404


def test_reset(api_as, group, broker) -> None:
    url = "/api/consumer-groups/etl/reset-offset/"
    body = {"topic": "events", "to_offset": 0, "reason": "replay"}
    assert api_as("viewer").post(url, body, format="json").status_code == 403
    preview = (
        api_as("operator").post(url, body | {"dry_run": True}, format="json").json()
    )
    assert not preview["applied"] and [c["delta"] for c in preview["changes"]] == [
        3,
        10,
    ]
    assert broker.committed_offset("etl", "events", 0) == 3
    assert (
        api_as("operator")
        .post(url, {"topic": "events", "to_offset": 0}, format="json")
        .status_code
        == 400
    )
    r = api_as("operator").post(url, body, format="json")
    assert r.status_code == 200 and r.json()["applied"]
    assert broker.committed_offset("etl", "events", 1) == 0
    bad = api_as("operator").post(
        url,
        {"topic": "events", "to_offset": 99, "queue_id": 0, "reason": "x" * 5},
        format="json",
    )
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_offset"
    # The refused reset is audited too, as failed (as the Cluster page's).
    resets = AuditRecord.objects.filter(action="consumer_group.reset_offset")
    assert sorted(r.status for r in resets) == ["failed", "success"]
    # A group that does not consume the topic here: refused, not created.
    nobody = api_as("operator").post(
        url.replace("etl", "nobody"),
        {"topic": "events", "to_offset": 0, "reason": "a typo"},
        format="json",
    )
    assert nobody.status_code == 404 and nobody.json()["code"] == "group_not_consuming"
    assert broker.committed_offset("nobody", "events", 0) == -1


# --- group settings -----------------------------------------------------------
SETTINGS = "/api/consumer-groups/etl/settings/"


def test_settings_read_by_every_role(api_as, group) -> None:
    for role in ("viewer", "operator", "admin"):
        r = api_as(role).get(SETTINGS)
        assert r.status_code == 200
        assert r.json() == {
            "group": "etl",
            "configured": False,
            "fifo": False,
            "max_delivery_attempts": None,
            "default_max_delivery_attempts": 17,
            "effective_max_delivery_attempts": 17,
        }
    assert api_as("none").get(SETTINGS).status_code == 403


def test_admin_puts_settings_audited(api_as, group, broker) -> None:
    body = {"fifo": True, "max_delivery_attempts": 3, "reason": "orders in order"}
    for role in ("viewer", "operator"):
        assert api_as(role).put(SETTINGS, body, format="json").status_code == 403
    assert broker.store.groups.get("etl") is None
    r = api_as("admin").put(SETTINGS, body, format="json")
    assert r.status_code == 200, r.content
    assert r.json() == {
        "group": "etl",
        "configured": True,
        "fifo": True,
        "max_delivery_attempts": 3,
        "default_max_delivery_attempts": 17,
        "effective_max_delivery_attempts": 3,
    }
    assert broker.store.groups.is_fifo("etl")
    assert broker.store.groups.max_attempts("etl", 17) == 3
    assert api_as("viewer").get(SETTINGS).json()["effective_max_delivery_attempts"] == 3
    rec = AuditRecord.objects.get(action="consumer_group.update_settings")
    assert (rec.object_id, rec.actor_username, rec.reason) == (
        "local/etl",  # the console's own node, no BROKER_NODE
        "admin",
        "orders in order",
    )
    assert rec.before is None
    assert rec.after == {"fifo": True, "max_delivery_attempts": 3}
    # A PUT replaces: what it leaves out takes its default.
    r = api_as("admin").put(SETTINGS, {"reason": "defaults again"}, format="json")
    assert r.json()["fifo"] is False and r.json()["max_delivery_attempts"] is None
    assert broker.store.groups.get("etl").max_delivery_attempts is None
    assert AuditRecord.objects.order_by("-id").first().before == {
        "fifo": True,
        "max_delivery_attempts": 3,
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_delivery_attempts": 0, "reason": "try"}, "max_delivery_attempts"),
        ({"max_delivery_attempts": 1001, "reason": "try"}, "max_delivery_attempts"),
        ({"max_delivery_attempts": "many", "reason": "try"}, "max_delivery_attempts"),
        ({"fifo": "perhaps", "reason": "try"}, "fifo"),
        ({"max_delivery_attempts": 3}, "reason"),
        ({"max_delivery_attempts": 3, "reason": "x"}, "reason"),
    ],
)
def test_bad_settings_are_400(api_as, group, broker, body, field) -> None:
    r = api_as("admin").put(SETTINGS, body, format="json")
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    assert field in r.json()["fields"]
    if field == "max_delivery_attempts":
        assert "from 1 to 1000" in r.json()["message"]
    assert broker.store.groups.get("etl") is None
    assert not AuditRecord.objects.exists()


def test_a_bad_group_name_is_400(api_as, group, broker) -> None:
    url = "/api/consumer-groups/no%20spaces/settings/"
    assert api_as("viewer").get(url).status_code == 400
    r = api_as("admin").put(url, {"fifo": True, "reason": "try"}, format="json")
    assert r.status_code == 400 and "illegal characters" in r.json()["message"]
    assert broker.list_groups() == []
    # The attempt is in the audit log, as failed.
    rec = AuditRecord.objects.get()
    assert (
        rec.status == AuditRecord.Status.FAILED and rec.object_id == "local/no spaces"
    )


def test_a_group_without_consumers_can_be_set_up(api_as, broker) -> None:
    r = api_as("admin").put(
        "/api/consumer-groups/CID_new/settings/",
        {"fifo": True, "max_delivery_attempts": 1000, "reason": "ahead of launch"},
        format="json",
    )
    assert r.status_code == 200 and r.json()["configured"]
    assert broker.store.groups.get("CID_new").max_delivery_attempts == 1000


def test_settings_are_in_the_schema(api_as) -> None:
    schema = api_as("viewer").get("/api/schema/?format=json").json()
    path = schema["paths"]["/api/consumer-groups/{group}/settings/"]
    assert set(path) >= {"get", "put"}
    put = path["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert put["$ref"].endswith("/GroupSettingsUpdate")
    update = schema["components"]["schemas"]["GroupSettingsUpdate"]["properties"]
    attempts = update["max_delivery_attempts"]
    assert (attempts["minimum"], attempts["maximum"]) == (1, 1000)
    assert attempts["nullable"] is True
    get = path["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert get["$ref"].endswith("/GroupSettings")


@pytest.fixture
def node_api(settings, broker, tmp_path):
    """The console's store served by a node's admin API whose endpoint gives
    5 delivery attempts by default (``serve --max-delivery-attempts 5``)."""
    from broker_core.cluster.admin import AdminServer
    from broker_core.cluster.node_ops import NodeOps
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint
    from console.brokerlink import (
        get_broker,
        get_delay_service,
        get_transaction_service,
    )
    from tests.console.conftest import ADMIN_TOKEN

    ops = NodeOps(
        get_broker,
        get_transaction_service,
        get_delay_service,
        NodeOps.clients_file(settings.BROKER_STORE_DIR),
        max_delivery_attempts=5,
    )
    ep = Endpoint(broker, EndpointConfig(max_attempts=5))
    admin = AdminServer(ep, "127.0.0.1:0", ADMIN_TOKEN, node_ops=ops).start()
    token_file = tmp_path / "node_admin_token"
    token_file.write_text(ADMIN_TOKEN)
    settings.BROKER_ADMIN_URL = f"http://{admin.address}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token_file)
    try:
        yield ops
    finally:
        admin.stop()
        ep.close()


def test_settings_through_the_node_s_admin_api(
    api_as, client_as, group, broker, node_api
) -> None:
    """``groups`` and ``put_group`` cross ``POST /v1/ops/<name>``: the page and
    the API show the node's own default and change the node's store."""
    from broker_core.cluster.node_ops import RemoteNodeOps
    from console.brokerlink import node_ops

    assert isinstance(node_ops(), RemoteNodeOps)
    got = api_as("viewer").get(SETTINGS).json()
    assert got["default_max_delivery_attempts"] == 5
    assert got["effective_max_delivery_attempts"] == 5
    page = client_as("viewer").get("/consumer-groups/etl/").content.decode()
    assert "default (5)" in page
    r = api_as("admin").put(
        SETTINGS,
        {"fifo": True, "max_delivery_attempts": 2, "reason": "remote"},
        format="json",
    )
    assert r.status_code == 200 and r.json()["effective_max_delivery_attempts"] == 2
    assert broker.store.groups.get("etl") == node_api.groups()["groups"][0]
    assert broker.store.groups.is_fifo("etl")
    # The node's library validation answers through the API as a 400.
    bad = api_as("admin").put(
        "/api/consumer-groups/a%20b/settings/", {"reason": "try"}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_group"
    r = client_as("admin").post(
        "/consumer-groups/etl/settings/",
        {"max_delivery_attempts": "", "reason": "node default"},
        follow=True,
    )
    assert "FIFO off, the default (5) delivery attempts" in r.content.decode()
    assert broker.store.groups.get("etl").max_delivery_attempts is None


def test_a_slave_refuses_put_group(broker) -> None:
    from broker_core.cluster import opscodec
    from broker_core.cluster.node_ops import NodeOps
    from broker_core.errors import ReplicaReadOnlyError

    ops = NodeOps(lambda: broker, lambda: None, lambda: None, lambda g=None: [])
    body = {"args": opscodec.encode(["etl", True, 3])}
    with pytest.raises(ReplicaReadOnlyError):
        ops.call("put_group", body, writable=False)
    assert broker.list_groups() == []
    assert opscodec.decode(ops.call("put_group", body))
    answer = opscodec.decode(ops.call("groups", {}, writable=False))
    assert [g.name for g in answer["groups"]] == ["etl"]
    assert answer["default_max_delivery_attempts"] == 17


def test_a_group_that_consumes_nothing_is_the_node_s_404(api_as, broker) -> None:
    """The broker's error for a group with no offsets and no subscription on
    the node (``GroupNotConsumingError``), as its reset answers."""
    r = api_as("viewer").get("/api/consumer-groups/NOSUCH/")
    assert (r.status_code, r.json()) == (
        404,
        {
            "code": "group_not_consuming",
            "message": "'NOSUCH' consumes no topic on this node",
        },
    )
