"""The console against a real gRPC endpoint on its store, driven by the
official Python client: what operators do there reaches the clients, and what
the clients say reaches the pages."""

from __future__ import annotations

import time

import pytest

from tests.endpoint_server import result, spawn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.protocol,
    pytest.mark.django_db(transaction=True),
]


def test_a_reset_is_honoured_by_a_simple_consumer(
    page, users, sign_in, broker, grpc_endpoint, tmp_path, screenshot
) -> None:
    """An operator's offset reset in the browser is honoured by a RocketMQ 5
    SimpleConsumer reading through the endpoint (pop consumption keeps its own
    cursor, which used to override the reset)."""
    from console.consumers.services import sync_offsets

    topic, group, ep = "TZr", "GZr", grpc_endpoint
    broker.create_topic(topic, read_queue_nums=1)
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
    page.fill("[name=reason]", "replay the last three orders")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("[data-testid=reset-preview]").inner_text()
    assert "consumed again" in preview
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Reset offsets").click()
    page.wait_for_load_state()
    screenshot(page, "consumer-reset")
    again = result(spawn("reset_b", ep, "r", tmp_path))
    assert again["got"] == ["z3", "z4", "z5"]


def test_an_unknown_answer_is_in_the_half_history(
    page, users, sign_in, broker, grpc_endpoint, tmp_path, screenshot
) -> None:
    """A producer that answers a check-back with "unknown" is visible as such:
    the half's history shows each UNKNOWN answer with its latency, and the
    overview counts it apart from failures (it used to read "sent")."""
    got = result(spawn("unknown_answer", grpc_endpoint, "u", tmp_path))
    assert got["calls"] >= 2
    sign_in(page, "operator")
    page.goto(f"/transactions/{got['tx']}/")
    timeline = page.locator("[data-testid=timeline]").inner_text()
    assert timeline.count("→ unknown") >= 2, timeline
    assert "answer" in timeline and " ms" in timeline
    screenshot(page, "half-unknown-answers")
    page.goto("/")
    tile = page.locator("[data-testid=checks-tile]").inner_text()
    assert "0 unknown" not in tile and "unknown" in tile, tile
