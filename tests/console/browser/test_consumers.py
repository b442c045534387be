"""An operator's offset reset in the browser is honoured by a RocketMQ 5
SimpleConsumer reading through the gRPC endpoint (pop consumption keeps its own
cursor, which used to override the reset)."""

from __future__ import annotations

import time

import pytest

from tests.broker_core.endpoint.test_protocol import (
    free_port,
    result,
    spawn,
    start_server,
    stop_server,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.protocol,
    pytest.mark.django_db(transaction=True),
]


def test_a_reset_is_honoured_by_a_simple_consumer(
    page, users, sign_in, broker, tmp_path, screenshot
) -> None:
    from console.consumers.services import sync_offsets

    topic, group = "TZr", "GZr"
    broker.create_topic(topic, read_queue_nums=1)
    port = free_port()
    server = start_server(broker.store.root, port, tmp_path / "endpoint.log")
    try:
        ep = f"127.0.0.1:{port}"
        first = result(spawn("reset_a", ep, "r", tmp_path))
        assert first["got"] == [f"z{i}" for i in range(6)]
        end = time.time() + 10  # the endpoint commits its low-water mark
        while broker.store.committed_offset(group, topic, 0) != 6:
            assert time.time() < end, "the endpoint never committed offset 6"
            time.sleep(0.2)
        sync_offsets(force=True)
        sign_in(page, "operator")
        page.goto(f"/consumer-groups/{group}/")
        page.select_option("select[name=topic]", topic)
        page.locator("input[name=mode][value=offset]").check()
        page.fill("input[name=offset]", "3")
        page.fill("input[name=queue_id]", "0")
        if page.locator("[name=reason]").count():
            page.fill("[name=reason]", "replay the last three orders")
        page.get_by_role("button", name="Preview").click()
        preview = page.locator("[data-testid=reset-preview]").inner_text()
        assert "consumed again" in preview
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Reset offsets").click()
        page.wait_for_load_state()
        screenshot(page, "consumer-reset")
        again = result(spawn("reset_b", ep, "r", tmp_path))
    finally:
        assert stop_server(server) == 0
    assert again["got"] == ["z3", "z4", "z5"]
