"""Check-back from another process (as the Celery check task does) through the
Redis relay to the producer's Telemetry stream."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.endpoint_server import PY, ROOT, result, spawn, stop_server, wait_port
from tests.support import free_port, redis_db

pytestmark = [pytest.mark.protocol, pytest.mark.slow, pytest.mark.services]

REDIS = redis_db(15)


def relay_server(store: Path, port: int, channel: str, log: Path) -> subprocess.Popen:
    """Start an endpoint that listens for relayed check-backs on ``channel``."""
    return subprocess.Popen(
        [
            PY, "-m", "broker_core", "serve", "--store", str(store),
            "--listen", f"127.0.0.1:{port}",
            "--redis-url", REDIS, "--redis-channel", channel,
            # The scenario sends a half to a topic made on first use (NORMAL).
            "--no-topic-type-check",
        ],
        cwd=ROOT,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_check_back_through_redis_relay(tmp_path):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS).ping()
    except Exception:  # noqa: BLE001
        pytest.skip("no Redis")
    from broker_core import Broker
    from broker_core.endpoint.relay import RedisRelayTransport
    from broker_core.transaction import TransactionService

    store = tmp_path / "store"
    channel = f"test:grpc:check:{uuid.uuid4().hex}"
    port = free_port()
    proc = relay_server(store, port, channel, tmp_path / "server.log")
    wait_port(proc, port)
    try:
        client = spawn("relay", f"127.0.0.1:{port}", "r", tmp_path)
        b = Broker.open(store)
        tx = TransactionService(b, transaction_timeout_ms=1000, check_interval_ms=3000)
        # the endpoint persists kind "grpc" for the group (topic) once the
        # client's half is stored; here the relay is pointed at this test's
        # own channel
        end = time.time() + 60
        while time.time() < end and "TYr" not in tx.checkers.configured():
            time.sleep(0.2)
        assert tx.checkers.configured().get("TYr", {}).get("kind") == "grpc"
        tx.checkers.set_transport("TYr", RedisRelayTransport(REDIS, channel))
        answers = {}
        try:
            end = time.time() + 20
            while time.time() < end and client.poll() is None:
                r = tx.run_check(time_budget_s=2)
                for k, v in r.answers.items():
                    answers[k] = answers.get(k, 0) + v
                time.sleep(0.5)
        finally:
            tx.close()
            b.close()
        res = result(client, timeout=60)
    finally:
        assert stop_server(proc) == 0
    assert res["got"] == ["relayed"], (res, answers)
    assert res["checked"] == ["relayed"]
    assert answers.get("SENT", 0) >= 1


def test_no_live_producer_then_the_groups_own_checker_answers(tmp_path):
    """The Celery check's order: live producers through the relay first; every
    endpoint says it has none, so the group's own checker is asked at once."""
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS).ping()
    except Exception:  # noqa: BLE001
        pytest.skip("no Redis")
    from broker_core import Broker, Message
    from broker_core.endpoint import relay
    from broker_core.transaction import (
        CallableTransport,
        TransactionService,
        TransactionState,
    )

    store = tmp_path / "store"
    channel = f"test:grpc:check:{uuid.uuid4().hex}"
    port = free_port()
    proc = relay_server(store, port, channel, tmp_path / "server.log")
    try:
        deadline = time.time() + 30
        client = redis.Redis.from_url(REDIS)
        while time.time() < deadline and not client.pubsub_numsub(channel)[0][1]:
            time.sleep(0.2)
        assert client.pubsub_numsub(channel)[0][1] == 1, "endpoint not subscribed"
        with (
            Broker.open(store) as b,
            TransactionService(b, transaction_timeout_ms=0, check_interval_ms=0) as tx,
        ):
            relay.install(tx, REDIS, channel)
            relay.install(tx, REDIS, channel)  # idempotent
            asked = []
            tx.checkers.set_transport(
                "PG_webhookish",
                CallableTransport(lambda r: asked.append(r) or "COMMIT"),
            )
            half = tx.send_half("PG_webhookish", Message("Orders", b"x"))
            res = tx.run_check(time_budget_s=10)
            assert res.answers.get("COMMIT") == 1, res
            assert len(asked) == 1
            assert tx.state(half.transaction_id) is TransactionState.COMMITTED
            check = [
                h for h in tx.get_half(half.transaction_id).history if h.kind == "CHECK"
            ][0]
            assert check.transport == "callable"
            # The relay's failure is recorded: the endpoint answered "none".
            assert "grpc: NoProducerOnlineError: gRPC endpoint: none" in (
                check.detail or ""
            )
            # With no checker of its own the group's check reaches nobody: it
            # is recorded, and does not count against the maximum checks.
            lone = tx.send_half("PG_alone", Message("Orders", b"y"))
            res = tx.run_check(time_budget_s=10)
            assert res.answers.get("FAILED") == 1 and res.not_delivered == 1, res
            info = tx.get_half(lone.transaction_id).info
            assert info.check_count == 0 and info.state is TransactionState.PENDING
            assert tx.metrics().checks_no_producer == 1
    finally:
        assert stop_server(proc) == 0


def test_the_endpoint_listens_again_after_redis_restarts(tmp_path):
    """A private Redis is shut down and started again on the same port: the
    endpoint subscribes again by itself, and the next relayed check reaches it
    (it answers; before, checks reached nobody for a while after the return).
    Pending halves checked through the relay while Redis is away, and again
    after it returns (the endpoint has no producer of their group), are
    recorded each time but never counted toward the discard limit."""
    import shutil

    redis = pytest.importorskip("redis")
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("no redis-server")
    from broker_core.endpoint.relay import RedisRelayTransport
    from broker_core.transaction import CheckRequest, NoProducerOnlineError

    rport = free_port()
    url = f"redis://127.0.0.1:{rport}/0"

    def start_redis() -> subprocess.Popen:
        proc = subprocess.Popen(
            [server, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        end = time.time() + 20
        while True:
            try:
                redis.Redis.from_url(url).ping()
                return proc
            except redis.RedisError:
                assert time.time() < end, "redis-server did not start"
                time.sleep(0.1)

    def subscribers(channel: str) -> int:
        return int(redis.Redis.from_url(url).pubsub_numsub(channel)[0][1])

    def wait_subscribed(channel: str) -> float:
        t0 = time.time()
        while subscribers(channel) < 1:
            assert time.time() - t0 < 30, "the endpoint never subscribed again"
            time.sleep(0.05)
        return time.time() - t0

    request = CheckRequest(
        transaction_id="T1", msg_id="M1", producer_group="G", topic="Nobody",
        queue_id=0, tags=None, keys=None, properties={}, body=b"",
        born_timestamp=0, check_no=1, half_offset=0, queue_offset=0,
    )  # fmt: skip
    channel = "broker_core:grpc:check"
    rds = start_redis()
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", str(tmp_path / "store"),
         "--listen", f"127.0.0.1:{port}", "--redis-url", url],
        cwd=ROOT, stdout=open(tmp_path / "server.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    from broker_core import Broker, Message
    from broker_core.transaction import TransactionService, TransactionState

    tx_broker = Broker.open(tmp_path / "txstore")
    tx = TransactionService(tx_broker, transaction_timeout_ms=0, check_interval_ms=0)
    tx.checkers.set_live(RedisRelayTransport(url, channel))
    halves = [
        tx.send_half("PG_relayed", Message("Orders", b"h%d" % i)).transaction_id
        for i in range(5)
    ]

    def check_all() -> None:
        """One check run over the five halves: each is recorded as a check
        that reached nobody, and none is counted."""
        before = tx.metrics().checks_no_producer
        res = tx.run_check(time_budget_s=30)
        assert res.answers.get("FAILED") == 5 and res.not_delivered == 5, res
        assert tx.metrics().checks_no_producer == before + 5
        for tid in halves:
            detail = tx.get_half(tid)
            assert detail.info.state is TransactionState.PENDING
            assert detail.info.check_count == 0, detail.info

    try:
        wait_subscribed(channel)
        check_all()  # Redis up, the endpoint has no producer of the group
        for _ in range(2):
            redis.Redis.from_url(url).shutdown(nosave=True)
            rds.wait(10)
            check_all()  # Redis away: the relay is unreachable
            time.sleep(2)  # Redis stays away a while
            rds = start_redis()
            took = wait_subscribed(channel)
            print(f"subscribed again {took:.2f} s after Redis returned")
            # The endpoint answers the relayed check (it has no producer of
            # the topic): "none" from it, not "no gRPC endpoint subscribed".
            with pytest.raises(NoProducerOnlineError) as got:
                RedisRelayTransport(url, channel).check(request)
            assert "no gRPC endpoint subscribed" not in str(got.value)
            assert "gRPC endpoint:" in str(got.value)
            check_all()
        # Frozen (SIGSTOP) past the connection's health check, then thawed:
        # the first relayed check after it reaches the endpoint.
        os.kill(rds.pid, signal.SIGSTOP)
        try:
            time.sleep(7)
        finally:
            os.kill(rds.pid, signal.SIGCONT)
        thawed = time.time()
        wait_subscribed(channel)
        deadline = thawed + 20
        while True:
            with pytest.raises(NoProducerOnlineError) as got:
                RedisRelayTransport(url, channel).check(request)
            if "no gRPC endpoint subscribed" not in str(got.value):
                break
            assert time.time() < deadline, "the endpoint never answered again"
            time.sleep(0.2)
        print(f"the endpoint answered {time.time() - thawed:.2f} s after the thaw")
        assert "gRPC endpoint:" in str(got.value)
        check_all()
        # Every check was recorded in the halves' histories.
        for tid in halves:
            checks = [h for h in tx.get_half(tid).history if h.kind == "CHECK"]
            assert len(checks) == 6, checks  # one per run
            assert all("not counted" in (h.detail or "") for h in checks)
    finally:
        tx.close()
        tx_broker.close()
        assert stop_server(proc) == 0
        rds.terminate()
        rds.wait(10)
