"""Pop state survives a restart: acknowledged messages stay acknowledged,
received-but-unacknowledged ones come back when their invisible time (4 s)
ends, attempt + 1, unread ones arrive."""

from __future__ import annotations

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def test_pop_state_survives_restart(tmp_path):
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    try:
        a = result(spawn("restart_a", f"127.0.0.1:{port}", "x", tmp_path))
    finally:
        assert stop_server(proc) == 0
    # SIGTERM closed the store cleanly: the next start is a normal recovery.
    assert not (store / "abort").exists()
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


def test_a_retried_send_is_stored_once_across_a_kill(tmp_path):
    """The client's message id is the stored UNIQ_KEY; a retry with the same id,
    before or after the endpoint was SIGKILLed, gets the first result."""
    import signal

    from broker_core import Broker

    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    try:
        ep = f"127.0.0.1:{port}"
        first = result(spawn("retry_send", ep, "r", tmp_path))
        again = result(spawn("retry_send", ep, "r", tmp_path))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    port = free_port()
    proc = start_server(store, port, tmp_path / "b.log")
    try:
        after = result(spawn("retry_send", f"127.0.0.1:{port}", "r", tmp_path))
    finally:
        assert stop_server(proc) == 0
    assert first["status"] == "OK"
    assert first["message_id"] == "01RETRYSEND0000000000000000000001"
    assert again == first and after == first
    with Broker.open(store) as b:
        cfg = b.store.get_topic("TRSr")
        copies = sum(b.store.max_offset("TRSr", q) for q in range(cfg.queue_nums))
        assert copies == 1
        assert b.get_message(first["message_id"], "TRSr").body == b"once"
