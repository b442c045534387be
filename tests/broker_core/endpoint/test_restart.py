"""Pop state survives a restart: acknowledged messages stay acknowledged,
received-but-unacknowledged ones come back (attempt + 1), unread ones arrive."""

from __future__ import annotations

import pytest

from tests.broker_core.endpoint.test_protocol import (
    free_port,
    result,
    spawn,
    start_server,
    stop_server,
)

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def test_pop_state_survives_restart(tmp_path):
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    try:
        a = result(spawn("restart_a", f"127.0.0.1:{port}", "x", tmp_path))
    finally:
        assert stop_server(proc) == 0
    assert len(a["received"]) == 3
    port = free_port()
    proc = start_server(store, port, tmp_path / "b.log")
    try:
        b = result(spawn("restart_b", f"127.0.0.1:{port}", "x", tmp_path))
    finally:
        assert stop_server(proc) == 0
    expected = sorted({"r0", "r1", "r2", "r3"} - {a["acked"]})
    assert b["got"] == expected
    for body in set(a["received"]) - {a["acked"]}:
        assert b["attempts"][body] == 2
    (unread,) = {"r0", "r1", "r2", "r3"} - set(a["received"])
    assert b["attempts"][unread] == 1
