"""Conformance: the unmodified official RocketMQ Python client (5.1.2), in
subprocesses, against ``python -m broker_core serve`` (also a subprocess).

One server is shared by all scenarios; the scenarios run concurrently (each on
its own topics and groups) to keep the wall time low. All of it runs twice:
against one endpoint process, and against ``serve --workers 2`` (the clients'
connections land on either worker; ``test_workers.py`` pins them).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_core.endpoint.workers import announced
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable
SCEN = Path(__file__).with_name("scenarios.py")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
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


def start_server(
    store: Path,
    port: int,
    log: Path,
    extra: tuple[str, ...] = (),
    workers: int | None = None,
) -> subprocess.Popen:
    """``serve --embedded-timers``; with ``workers`` > 1, check-backs between
    the workers go through Redis on a channel of this server's own. The
    default is ``$ENDPOINT_TEST_WORKERS`` (else 1): every test that starts
    its server here runs against ``serve --workers N`` with it set."""
    if workers is None:
        workers = int(os.environ.get("ENDPOINT_TEST_WORKERS", "1"))
    if workers == 1:
        relay: tuple[str, ...] = ("--no-redis-relay",)
    else:
        relay = (
            "--workers", str(workers), "--redis-url", REDIS_URL,
            "--redis-channel", f"broker_core:grpc:check:test{port}",
        )  # fmt: skip
    cmd = [
        PY, "-m", "broker_core", "serve", "--store", str(store),
        "--listen", f"127.0.0.1:{port}", "--embedded-timers",
        "--transaction-timeout-ms", "1000", "--check-interval-ms", "2000",
        "--max-delivery-attempts", "3", "--consumer-backoff-ms", "300,300,300",
        # These scenarios send FIFO, delayed and transactional messages to
        # topics made on first use (NORMAL); the type check has its own tests
        # (test_topic_types.py) and the conformance suite.
        "--no-topic-type-check",
        *relay, *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT
    )
    wait_port(proc, port)
    if workers > 1:
        wait_workers(proc, store, workers)
    return proc


def wait_port(proc: subprocess.Popen, port: int) -> None:
    end = time.time() + 30
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def wait_workers(proc: subprocess.Popen, store: Path, n: int) -> dict[int, dict]:
    """Wait until the ``n`` workers serve: index -> announcement (pid, ports)."""
    from broker_core.endpoint.workers import announced

    end = time.time() + 30
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        up = announced(store)
        if len(up) == n and all(pid_alive(w["pid"]) for w in up.values()):
            return up
        time.sleep(0.1)
    raise RuntimeError(f"{n} workers did not start")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return -9


def spawn(name: str, endpoint: str, suffix: str, home: Path) -> subprocess.Popen:
    env = dict(os.environ, HOME=str(home), PYTHONPATH="")
    return subprocess.Popen(
        [PY, str(SCEN), name, endpoint, suffix],
        cwd=str(home),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def result(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"scenario failed:\n{out[-4000:]}"
    return json.loads(lines[-1][7:])


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
    assert r["seen"] == sorted(f"p{i}" for i in range(20))


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
