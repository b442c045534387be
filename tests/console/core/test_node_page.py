"""The node page: processes' health, disk, counts, the store's configuration
and the console's settings, with no secret shown."""

from __future__ import annotations

import pytest

from broker_core import Message

pytestmark = pytest.mark.django_db


def test_node_page(client_as, broker, settings) -> None:
    settings.REDIS_URL = "redis://:s3cret-pass@127.0.0.1:6399/3"
    broker.create_topic("shop", 2)
    for _ in range(3):
        broker.send(Message("shop", b"x" * 100))
    broker.commit_offset("billing", "shop", 0, 1)
    page = client_as("viewer").get("/node/")
    assert page.status_code == 200
    rt = page.context["runtime"]
    assert rt["log_end"] == broker.store.max_physical_offset() > 300
    assert rt["log_bytes"] == rt["log_end"] - rt["log_start"]
    assert rt["groups"] == 1 and rt["topics"] >= 1
    assert rt["disk_total_bytes"] > rt["disk_free_bytes"] > 0
    assert 0 <= rt["room_bytes"] < rt["disk_total_bytes"]
    # 3 messages in the last minute (and nothing else in this store).
    assert rt["stored_per_s_1m"] == pytest.approx(3 / 60)
    import broker_core

    assert rt["version"] == broker_core.__version__
    assert 'data-testid="version"' in page.content.decode()
    config = dict(page.context["config"])
    assert config["segment_size"] == broker.store.config.segment_size
    html = page.content.decode()
    for component in ("database", "redis", "store", "beat", "worker"):
        assert f'data-component="{component}"' in html
    assert "s3cret-pass" not in html
    assert "redis://127.0.0.1:6399/3" in html
    assert 'data-testid="node-config"' in html
    # In the top navigation.
    assert '<a href="/node/" class="active" aria-current="page">Node</a>' in html


def test_node_page_needs_a_role(client) -> None:
    r = client.get("/node/")
    assert r.status_code in (302, 403)


def test_the_version_is_the_project_s() -> None:
    import tomllib

    import broker_core
    from tests.conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert broker_core.__version__ == project["version"]


def test_stored_per_second_counts_the_window_only(broker) -> None:
    """Messages stored before the window, in it, in two topics: only those in
    it count (a queue whose last message is older is skipped)."""
    import time

    from broker_core.browse import stored_per_second

    broker.create_topic("old", 1)
    broker.create_topic("new", 2)
    broker.send_batch([Message("old", b"o", queue_id=0) for _ in range(4)])
    time.sleep(0.05)
    split = int(time.time() * 1000)
    time.sleep(0.05)
    broker.send_batch([Message("new", b"n", queue_id=i % 2) for i in range(6)])
    now = int(time.time() * 1000) + 1
    assert stored_per_second(broker.store, now - split, now) == pytest.approx(
        6 * 1000 / (now - split)
    )
    assert stored_per_second(broker.store, 60_000, now) == pytest.approx(10 / 60)
