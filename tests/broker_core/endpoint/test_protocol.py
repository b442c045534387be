"""Conformance: the unmodified official RocketMQ Python client (5.1.2), in
subprocesses, against ``python -m broker_core serve`` (also a subprocess).

One server is shared by all scenarios; the scenarios run concurrently (each on
its own topics and groups) to keep the wall time low. All of it runs twice:
against one endpoint process, and against ``serve --workers 2`` (the clients'
connections land on either worker; ``test_workers.py`` pins them).
"""

from __future__ import annotations

import json
import time

import pytest

from broker_core.endpoint.workers import announced
from tests.endpoint_server import (
    pid_alive,
    result,
    spawn,
    start_server,
    stop_server,
)
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

NAMES = [
    "push_ok",
    "push_fifo_dlq",
    "normal",
    "invisible",
    "filters",
    "delay",
    "fifo",
    "transaction",
    "push_dlq",
    "bad",
]


@pytest.fixture(scope="module", params=[1, 2], ids=["1worker", "2workers"])
def server(request, tmp_path_factory):
    workers = request.param
    base = tmp_path_factory.mktemp("grpc")
    port = free_port()
    proc = start_server(
        base / "store",
        port,
        base / "server.log",
        # FIFO consumer groups of the scenarios (s_fifo and the FIFO push one)
        ("--fifo-groups", f"GPFs{port},GOs{port}"),
        workers=workers,
    )
    pids = [w["pid"] for w in announced(base / "store").values()]
    ep = f"127.0.0.1:{port}"
    runs = {n: spawn(n, ep, f"s{port}", base) for n in NAMES}
    yield {"proc": proc, "endpoint": ep, "runs": runs, "base": base}
    for p in runs.values():
        if p.poll() is None:
            p.kill()
    assert stop_server(proc) == 0
    assert not [p for p in pids if pid_alive(p)]  # every worker stopped
    log = (base / "server.log").read_text()
    assert "Traceback" not in log, log[-4000:]


def test_normal_send_receive_ack(server):
    r = result(server["runs"]["normal"])
    assert sorted(r["got_ids"]) == sorted(
        r["sent_ids"]
    )  # echoed ids are the received ids
    assert r["bodies"] == sorted(
        [f"m{i}" for i in range(5)] + [f"async{i}" for i in range(5)]
    )
    assert r["props"]["m3"] == {"n": "3"}
    assert r["tags"] == ["a"] and r["keys"] == [f"k{i}" for i in range(5)]
    assert r["empty_after"] == 0


def test_invisibility_change_and_redelivery(server):
    r = result(server["runs"]["invisible"])
    assert r["first_attempt"] == 1 and r["second_attempt"] == 2
    assert 1.0 <= r["waited"] <= 6
    assert r["handle_changed"]
    assert r["stale_err"] == "40013"  # INVALID_RECEIPT_HANDLE
    assert r["none_while_invisible"] == 0 and r["after_ack"] == 0


def test_tag_and_sql92_subscriptions(server):
    r = result(server["runs"]["filters"])
    assert r["tag"] == ["a0", "a3", "b1"]
    assert r["sql"] == ["c2", "d4"]


def test_delay_and_recall(server):
    r = result(server["runs"]["delay"])
    assert r["early"] == 0
    assert r["got"] == ["later"]
    assert r["elapsed"] >= 2.0
    assert r["recall_handle"] and r["recalled_id"]
    assert r["extra"] == []  # the recalled message never arrives


def test_fifo_order_one_in_flight_per_group(server):
    r = result(server["runs"]["fifo"])
    assert "error" not in r, r
    for grp in ("g1", "g2"):
        assert [b for b in r["order"] if b.startswith(grp)] == [
            f"{grp}-{i}" for i in range(6)
        ]
    assert r["max_batch"] <= 2


def test_transaction_commit_rollback_checkback(server):
    r = result(server["runs"]["transaction"])
    assert r["tx_id"]
    assert r["got"] == ["checked", "committed"]  # rolled-back never delivered
    assert "checked" in r["checked"]


def test_push_consumer_failure_redelivered_then_dlq(server):
    r = result(server["runs"]["push_dlq"])
    assert [a for _b, a in r["attempts"]][:3] == [1, 2, 3]
    assert (
        r["dlq"] and r["dlq"][0][1] == "poison" and r["dlq"][0][0].startswith("%DLQ%")
    )


def test_push_consumer_acks_each_message_once(server):
    r = result(server["runs"]["push_ok"])
    assert r["seen"] == sorted(f"p{i}" for i in range(20)), r.get("client_errors")


def test_fifo_push_consumer_forwards_to_dlq_and_goes_on(server):
    r = result(server["runs"]["push_fifo_dlq"])
    order = [b for b, _a in r["seen"]]
    # the client retries "bad" locally max_attempts (3) times (its
    # delivery_attempt stays 1), forwards it to the DLQ, then goes on in order
    assert order[0] == "first" and order[-1] == "after"
    assert order.count("bad") == 3 and order.count("after") == 1
    assert r["dlq"] == ["bad"]


def test_bad_input_statuses(server):
    r = result(server["runs"]["bad"])
    assert r == {
        "ok": "OK",
        "oversized": "MESSAGE_BODY_TOO_LARGE",
        "empty_body": "MESSAGE_BODY_EMPTY",
        "invalid_topic": "ILLEGAL_TOPIC",
        "empty_topic": "ILLEGAL_TOPIC",
        "prop_separator": "ILLEGAL_MESSAGE_PROPERTY_KEY",
        "prop_name_separator": "ILLEGAL_MESSAGE_PROPERTY_KEY",
        "prop_reserved_delay": "ILLEGAL_MESSAGE_PROPERTY_KEY",
        "prop_reserved_uniq": "ILLEGAL_MESSAGE_PROPERTY_KEY",
        "prop_reserved_sharding": "ILLEGAL_MESSAGE_PROPERTY_KEY",
        "tag_separator": "ILLEGAL_MESSAGE_TAG",
        "key_separator": "ILLEGAL_MESSAGE_KEY",
        "tag_newline": "ILLEGAL_MESSAGE_TAG",
        "tag_escape": "ILLEGAL_MESSAGE_TAG",
        "tag_del": "ILLEGAL_MESSAGE_TAG",
        "key_blank": "ILLEGAL_MESSAGE_KEY",
        "key_newline": "ILLEGAL_MESSAGE_KEY",
        "group_separator": "ILLEGAL_MESSAGE_GROUP",
        "prop_plain": "OK",
        "no_messages": "BAD_REQUEST",
        "route_invalid": "ILLEGAL_TOPIC",
        "unknown_tx": "INVALID_TRANSACTION_ID",
        "empty_tx": "INVALID_TRANSACTION_ID",
        "ack_malformed": "INVALID_RECEIPT_HANDLE",
        "ack_first": "OK",
        "ack_stale": "INVALID_RECEIPT_HANDLE",
        "change_stale": "INVALID_RECEIPT_HANDLE",
        "bad_sql": "ILLEGAL_FILTER_EXPRESSION",
        "no_group": "ILLEGAL_CONSUMER_GROUP",
        "bad_invisible": "ILLEGAL_INVISIBLE_TIME",
        "unknown_topic_receive": "TOPIC_NOT_FOUND",
        "recall_unknown": "NOT_FOUND",
        "garbage": "BAD_REQUEST",  # undecodable protobuf
        "get_offset": "NOT_IMPLEMENTED",
        "pull": ["NOT_IMPLEMENTED"],
        "still_ok": "OK",
    }


def test_clients_registry_file(server):
    # after the scenarios ran, clients.json lists producers and consumers
    for p in server["runs"].values():
        p.wait(timeout=120)
    time.sleep(1.0)
    data = json.loads((server["base"] / "store" / "clients.json").read_text())
    types = {c["client_type"] for c in data["clients"]}
    assert {"PRODUCER", "SIMPLE_CONSUMER", "PUSH_CONSUMER"} <= types
    groups = {c["group"] for c in data["clients"]}
    assert any(g.startswith("GN") for g in groups)
    assert all("last_heartbeat" in c and "address" in c for c in data["clients"])
