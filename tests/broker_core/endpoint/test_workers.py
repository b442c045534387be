"""``serve --workers 2`` over one store, with each client pinned to a worker
(``--worker-ports``: worker I also answers on BASE+I), so that what must work
*across* workers is shown to: one group's messages shared by consumers on
both, a handle popped on one acknowledged and renewed on the other, attempts
and dead letters counted over both, FIFO groups blocked store-wide, worker 0's
check-back reaching a producer on worker 1, and a worker SIGKILLed and
restarted by the supervisor without losing acknowledged state.

``clients.json`` (merged from the workers' lists) tells which worker serves
each client: the tests assert the pinning really split them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from broker_core.endpoint.workers import announced
from tests.endpoint_server import (
    ROOT,
    pid_alive,
    result,
    spawn,
    start_server,
    stop_server,
    wait_workers,
)
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    base = tmp_path_factory.mktemp("workers")
    store = base / "store"
    port, pinned = free_port(), free_port()
    # Worker 1 listens on pinned + 1: that port must be free too (a port
    # taken by something else made worker 1 exit at start, seen in CI).
    while pinned + 1 == port or not _bindable(pinned + 1):
        pinned = free_port()
    # With an admin API: served by worker 0 alone (each worker bound its port
    # and all but one failed to start).
    admin = free_port()
    (base / "admin_token").write_text("workers-admin-token-0123456789")
    proc = start_server(
        store,
        port,
        base / "server.log",
        ("--worker-ports", str(pinned), "--fifo-groups", "GWFw",
         "--admin-listen", f"127.0.0.1:{admin}",
         "--admin-token-file", str(base / "admin_token")),
        workers=2,
    )  # fmt: skip
    up = announced(store)
    ep = f"127.0.0.1:{pinned};127.0.0.1:{pinned + 1}"
    yield {"proc": proc, "store": store, "base": base, "ep": ep, "up": up,
           "admin": admin}  # fmt: skip
    pids = [w["pid"] for w in announced(store).values()]
    assert stop_server(proc) == 0
    assert not [p for p in pids if pid_alive(p)]
    log = (base / "server.log").read_text()
    assert "Traceback" not in log, log[-4000:]


def run(w, name: str, suffix: str = "w") -> dict:
    return result(spawn(name, w["ep"], suffix, w["base"]))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def served_by(store) -> dict[str, int]:
    """client id -> the worker that last served it (``clients.json``; online
    or not: the scenario has shut its clients down when this is read)."""
    data = json.loads((store / "clients.json").read_text())
    return {c["client_id"]: c["worker"] for c in data["clients"]}


def test_workers_have_their_own_pids_and_share_the_port(workers):
    up = workers["up"]
    assert sorted(up) == [0, 1]
    assert up[0]["pid"] != up[1]["pid"] != workers["proc"].pid
    assert up[0]["port"] == up[1]["port"]


def test_worker_zero_serves_the_admin_api(workers):
    from broker_core.cluster.node_ops import RemoteNodeOps

    ops = RemoteNodeOps(
        f"http://127.0.0.1:{workers['admin']}",
        "workers-admin-token-0123456789",
        timeout=10,
    )
    assert "log_end" in ops.node_status()
    assert len(workers["up"]) == 2  # both workers started


def test_one_group_shared_by_consumers_on_both_workers(workers):
    r = run(workers, "w_share")
    on0, on1 = r["got"]
    # Every message delivered once to the group, across both workers.
    assert len(on0) + len(on1) == r["sent"] == 60
    assert sorted(on0 + on1) == sorted(f"s{i}" for i in range(60))
    assert on0 and on1
    assert r["after"] == [0, 0]
    serving = served_by(workers["store"])
    ids = r["client_ids"]
    assert serving.get(ids[0]) == 0 and serving.get(ids[1]) == 1


def test_handles_attempts_and_dead_letters_across_workers(workers):
    r = run(workers, "w_handles")
    assert r["first"] == ["moved", 1]
    assert r["while_invisible"] == 0
    assert r["again"] == ["moved", 2]  # redelivered by the other worker
    assert r["handle_changed"]
    assert r["stale"] == "40013"  # INVALID_RECEIPT_HANDLE
    assert r["after_ack"] == 0
    assert r["attempts"] == [1, 2, 3]
    assert r["dlq"] == ["poison"]
    assert r["after_dlq"] == 0


def test_fifo_groups_blocked_across_workers(workers):
    r = run(workers, "w_fifo")
    assert r["first"] == ["g1-0", "g2-0"]
    assert r["blocked_on_1"] == []  # both groups in flight on worker 0
    assert r["g1_next_on_1"] == ["g1-1"]  # g1 acknowledged, g2 still not
    for grp in ("g1", "g2"):
        assert [b for b in r["order"] if b.startswith(grp)] == [
            f"{grp}-{i}" for i in range(6)
        ]
    assert all(len(b) == len(set(b)) for b in r["batches"])  # one per group


def test_check_back_reaches_a_producer_on_another_worker(workers):
    r = run(workers, "w_tx")
    assert r["got"] == ["checked"]
    assert r["checked"] == ["checked"]
    assert served_by(workers["store"]).get(r["id"], 1) == 1
    log = (workers["base"] / "server.log").read_text()
    assert "Traceback" not in log


def test_a_killed_worker_is_restarted_and_acks_survive(workers):
    store = workers["store"]
    a = run(workers, "w_kill_a")
    assert len(a["acked"]) == 3 and len(a["unacked"]) == 3
    old = announced(store)[1]["pid"]
    os.kill(old, signal.SIGKILL)
    end = time.time() + 30
    while time.time() < end:
        w = announced(store).get(1)
        if w and w["pid"] != old:
            break
        time.sleep(0.2)
    up = wait_workers(workers["proc"], store, 2)
    assert up[1]["pid"] != old and up[0]["pid"] == workers["up"][0]["pid"]
    assert workers["proc"].poll() is None
    b = run(workers, "w_kill_b")
    # Acknowledged before the kill: never again. The rest: once more.
    assert b["got"] == sorted(a["unacked"])
    assert b["attempts"] == [2, 2, 2]
    assert b["later"] == ["after"]  # the restarted worker serves


def test_sigint_stops_every_worker(tmp_path):
    port = free_port()
    proc = start_server(tmp_path / "store", port, tmp_path / "log", workers=2)
    pids = [w["pid"] for w in announced(tmp_path / "store").values()]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert not [p for p in pids if pid_alive(p)]


def test_workers_that_cannot_start_stop_the_supervisor(tmp_path):
    """The port is held by a socket without SO_REUSEPORT: no worker binds, the
    supervisor gives up (exit 1) instead of restarting them forever."""
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "broker_core", "serve", "--store",
             str(tmp_path / "store"), "--listen", f"127.0.0.1:{port}",
             "--workers", "2", "--no-redis-relay"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert r.returncode == 1
    assert "while starting" in r.stdout  # a JSON log line, on stdout


def test_a_retried_send_is_recognised_by_the_other_worker(workers):
    """The same client message id sent to worker 0, then (a retry after its
    connection broke) to worker 1: the first result, stored once."""
    w0, w1 = workers["ep"].split(";")
    first = result(spawn("retry_send", w0, "wr", workers["base"]))
    time.sleep(0.2)  # the id is shared once the writer thread is free
    again = result(spawn("retry_send", w1, "wr", workers["base"]))
    assert first["status"] == "OK" and first["offset"] == 0
    assert again == first
