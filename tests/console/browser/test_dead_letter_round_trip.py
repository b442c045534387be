"""A dead-letter round trip in Chromium with the official client: a real
SimpleConsumer fails a message until the endpoint dead-letters it; the
operator finds it on the group's dead-letter page and resends it in a batch;
the same group's SimpleConsumer receives it once, and another group nothing.
The endpoint (``python -m broker_core serve``) and the console share the store,
as under ``make run``."""

from __future__ import annotations

import time

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [
    pytest.mark.browser,
    pytest.mark.protocol,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

SUF = "r"  # the scenarios' names: topic TRTr, groups GRTr and GRT2r
TOPIC, GROUP = f"TRT{SUF}", f"GRT{SUF}"


def test_a_dead_letter_resent_from_the_browser_reaches_the_group_once(
    page, users, sign_in, broker, tmp_path, screenshot
) -> None:
    store = broker.store.root
    port = free_port()
    proc = start_server(
        store, port, tmp_path / "server.log", ("--max-delivery-attempts", "2")
    )
    ep = f"127.0.0.1:{port}"
    try:
        first = result(spawn("rt_first", ep, SUF, tmp_path))
        assert first["attempts"] == [1, 2], first
        sign_in(page, "operator")
        url = f"/consumer-groups/{GROUP}/dead-letters/"
        rows = page.locator("[data-testid=dlq-list] tbody tr")
        deadline = time.time() + 20
        while True:  # the endpoint moves it to the DLQ on its next sweep
            page.goto(url)
            if page.locator("[data-testid=dlq-list] tbody input").count() == 1:
                break
            assert time.time() < deadline, "never dead-lettered"
            time.sleep(1)
        assert first["id"] in rows.first.inner_text()
        assert TOPIC in rows.first.inner_text()
        reason = rows.first.locator("[data-testid=dlq-reason]").inner_text()
        assert reason == "delivery attempts ran out", reason
        screenshot(page, "dead-letter-round-trip")
        page.get_by_label("Select all dead letters").check()
        page.get_by_label("Resend reason").fill("consumer fixed, INC-77")
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Resend").click()
        assert (
            f"Resent 1 dead letter(s) to {GROUP}."
            in page.locator(".flash").inner_text()
        )
        once = result(spawn("rt_once", ep, SUF, tmp_path))
        assert [(m["topic"], m["body"], m["id"]) for m in once["got"]] == [
            (TOPIC, "poison", first["id"])
        ], once
        assert once["other"] == []
    finally:
        assert stop_server(proc) == 0
