"""A producer that answers a check-back with "unknown" is visible as such: the
half's history shows each UNKNOWN answer with its latency, and the overview
counts it apart from failures (it used to read "sent" and "0 answered")."""

from __future__ import annotations

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


def test_an_unknown_answer_is_in_the_half_history(
    page, users, sign_in, broker, tmp_path, screenshot
) -> None:
    port = free_port()
    server = start_server(broker.store.root, port, tmp_path / "endpoint.log")
    try:
        got = result(spawn("unknown_answer", f"127.0.0.1:{port}", "u", tmp_path))
    finally:
        assert stop_server(server) == 0
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
