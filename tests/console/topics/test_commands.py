"""``manage.py seed_demo`` fills the store through broker_core."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from console.consumers.models import ConsumerQueue
from console.topics.models import Topic

pytestmark = pytest.mark.django_db


def test_seed_demo(broker, client_as) -> None:
    call_command("seed_demo", "--messages", "500")
    assert Topic.objects.filter(system=False).count() == 5
    assert (
        sum(Topic.objects.filter(system=False).values_list("messages", flat=True))
        == 511  # 500 sent, one HTML body, ten committed transactions
    )
    lags = dict(ConsumerQueue.objects.values_list("group", "lag").order_by("lag"))
    assert lags["CID_order_fulfilment"] == 0 and lags["CID_analytics"] > 0
    from console.delays.services import delay_stats

    stats = delay_stats()
    assert all(lv.backlog >= 1 for lv in stats.levels)
    assert stats.timers.pending == 4
    from console.transactions.services import list_transactions

    pending = list_transactions(page_size=200).items
    assert len(pending) == 40  # 60 halves: a sixth committed, a sixth rolled back
    assert sum(1 for h in pending if h.check_count >= 6) == 20  # stuck
    # Every page answers on a seeded store.
    c = client_as("operator")
    for url in (
        "/topics/",
        "/topics/orders/",
        "/topics/orders/queues/0/",
        "/consumer-groups/",
        "/consumer-groups/CID_analytics/",
        "/delays/",
        "/delays/scheduled/",
        "/messages/?topic=orders&tag=paid",
        "/audit/",
    ):
        assert c.get(url).status_code == 200, url


def test_sync_task(broker) -> None:
    from broker_core import Message
    from console.topics.tasks import sync_store_tables

    broker.send(Message("clicks", b"x"))
    broker.commit_offset("g1", "clicks", 0, 0)
    counts = sync_store_tables.apply().get()
    assert counts["offsets"] == 4  # every queue of a topic the group consumes
    assert Topic.objects.get(name="clicks").messages == 1
