"""Check-backs reach a producer that outlives an endpoint restart.

Why they stopped: after a restart the official Python client (5.1.2) has no
Telemetry stream until its 5-minute settings sync fails and re-opens one, and
that new stream carries no settings (they follow at the next sync). The
restarted endpoint knew nothing of the client, so it had no topic to match the
half against and the check found "no live producer". The endpoint now
remembers the clients its last run saw (``clients.json``) and learns a
producer's topics from its sends. These tests drive the wire as the Python
client does (raw stubs, no settings on the new stream); the Node.js client,
which re-opens at once and resends settings, is in ``test_node_client.py``.
"""

from __future__ import annotations

import queue
import time

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker_core.rawclient import RawClient
from tests.endpoint_server import start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def _first_check(client: RawClient, timeout: float) -> str | None:
    try:
        return client.checks.get(timeout=timeout)
    except queue.Empty:
        return None


def test_a_producer_alive_across_a_restart_gets_check_backs(tmp_path):
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    client = RawClient(f"127.0.0.1:{port}", "py-producer-1")
    try:
        client.open_telemetry(["TRx"])
        client.heartbeat()
        tid = client.send_half("TRx", b"pending")
        # Before the restart the check reaches it (transaction timeout 1 s).
        assert _first_check(client, 15) == tid
        time.sleep(1.0)  # the client list is saved every 0.5 s
    finally:
        client.close()
        assert stop_server(proc) == 0
    port = free_port()
    proc = start_server(store, port, tmp_path / "b.log")
    client = RawClient(f"127.0.0.1:{port}", "py-producer-1")
    other = RawClient(f"127.0.0.1:{port}", "py-producer-2")
    try:
        # As the Python client does after a restart: a stream with no settings,
        # heartbeats every 10 s. Another producer, never of this topic, also
        # has a stream without settings: it must not be asked.
        client.open_telemetry(None)
        client.heartbeat()
        other.open_telemetry(None)
        other.heartbeat()
        assert _first_check(client, 20) == tid
        assert other.checks.empty()
    finally:
        client.close()
        other.close()
        assert stop_server(proc) == 0


def test_a_producer_unknown_to_the_restarted_endpoint_is_found_by_its_sends(
    tmp_path,
):
    """No saved client list (lost, or older than the memory window): the first
    send to the topic after the restart makes the client one of its producers."""
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    client = RawClient(f"127.0.0.1:{port}", "py-producer-3")
    try:
        tid = client.send_half("TRy", b"pending")
    finally:
        client.close()
        assert stop_server(proc) == 0
    (store / "clients.json").unlink()
    port = free_port()
    proc = start_server(store, port, tmp_path / "b.log")
    client = RawClient(f"127.0.0.1:{port}", "py-producer-3")
    try:
        client.open_telemetry(None)
        client.heartbeat()
        time.sleep(4)  # two check intervals: nobody to ask yet
        assert client.checks.empty()
        msg = pb.Message(topic=pb.Resource(name="TRy"), body=b"normal")
        msg.system_properties.message_type = pb.NORMAL
        msg.system_properties.message_id = "01CHECKBACKRESTART000000000000001"
        client.stub.SendMessage(
            spb.SendMessageRequest(messages=[msg]), metadata=client.md
        )
        assert _first_check(client, 15) == tid
    finally:
        client.close()
        assert stop_server(proc) == 0
