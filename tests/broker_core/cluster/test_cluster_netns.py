"""A real multi-host cluster on one machine: network namespaces on a bridge.

Hosts: ``registry`` (a redis-server: the route registry), ``a`` (broker-a,
SYNC_MASTER, serving its log to slaves), ``b`` (broker-b, ASYNC_MASTER) and
``s`` (broker-a's slave). The official Python client runs on the test's own
host, reaching the nodes over the bridge. Then host ``a`` dies (SIGKILL of
every process in its namespace): sends fail over to broker-b, everything
broker-a acknowledged is read from its slave, and once the slave is promoted
it resumes broker-a's pending half (checked back by it) and its timers, with
no loss and no duplicate delivery.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.netns import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.protocol, pytest.mark.services]

CLIENT = Path(__file__).with_name("cluster_client.py")
ROOT = Path(__file__).resolve().parents[3]
TOPIC = "orders"
EXPIRY = 3.0


def client(*args: str, timeout: float = 120) -> dict:
    done = subprocess.run(
        [sys.executable, str(CLIENT), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, (
        f"client {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULT ") :])


def node_client(*args: str) -> dict:
    modules = ROOT / "var" / "node" / "node_modules"
    if (
        shutil.which("node") is None
        or not (modules / "rocketmq-client-nodejs").is_dir()
    ):
        pytest.fail("the Node.js client is not installed: run make node-client")
    done = subprocess.run(
        ["node", str(CLIENT.with_suffix(".js")), *args],
        env=dict(os.environ, NODE_PATH=str(modules)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, f"node client failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def stored_keys(store: Path) -> set[str]:
    """The KEYS values in a running node's log (read, never opened)."""
    from tests.broker_core.cluster._nodes import stored

    text = stored(store).decode("latin-1")
    return set(re.findall("KEYS\x01([^\x02]*)\x02", text))


def test_cluster_routes_replication_failover_and_promotion(network, tmp_path):
    c = Cluster(network, tmp_path, TOPIC, EXPIRY)
    c.serve(c.a, c.store("a"), "broker-a", "--role", "SYNC_MASTER",
            "--ha-listen", f"{c.a.address}:10912",
            "--ha-secret-file", str(c.secret))  # fmt: skip
    c.serve(c.b, c.store("b", 2), "broker-b")
    c.serve(c.s, c.store("s", None), "broker-a", "--broker-id", "1",
            "--master-ha", f"{c.a.address}:10912",
            "--ha-secret-file", str(c.secret))  # fmt: skip
    c.wait_nodes({"broker-a:0", "broker-a:1", "broker-b:0"})

    # Sends through one access point spread over both masters' queues.
    first = client("send", c.access(c.a), TOPIC, "120", "m")
    assert not first["failed"], first["failed"][:3]
    assert set(first["brokers"]) == {"broker-a", "broker-b"}, first["brokers"]
    # An access point listing every node: each receipt names the node that
    # stored the message (this node's queues carried the whole list, and the
    # client's channel sent broker-a's messages to broker-b).
    both = f"{c.access(c.a)};{c.access(c.b)}"
    multi = client("send", both, TOPIC, "60", "mp")
    assert not multi["failed"], multi["failed"][:3]
    assert set(multi["brokers"]) == {"broker-a", "broker-b"}, multi["brokers"]
    stored = {n: stored_keys(tmp_path / f"store-{n}") for n in ("a", "b")}
    for body, broker in multi["where"].items():
        home = "a" if broker == "broker-a" else "b"
        assert body in stored[home], (body, broker)
        assert body not in stored["b" if home == "a" else "a"], (body, broker)
    # A route asked at broker-b by a client whose access point lists both
    # nodes (as when broker-a was briefly unreachable): each queue carries
    # the nodes of its own broker name, its master first (broker-a's slave
    # forwards to its master, forward.py), never another name's node, which
    # would store broker-b's sends on broker-a.
    for q in client("route", c.access(c.b), TOPIC, both):
        if q["broker"] == "broker-a":
            assert q["addresses"] == [c.access(c.a), c.access(c.s)], q
        else:
            assert q["addresses"] == [c.access(c.b)], q
    # Delayed messages on both nodes, due after broker-a's death below.
    delayed = client("send", c.access(c.b), TOPIC, "20", "late", "12000")
    assert set(delayed["brokers"]) == {"broker-a", "broker-b"}, delayed["brokers"]
    sent_at = time.time()
    # A half on broker-a whose producer went away: pending.
    pending = None
    for i in range(10):
        h = client("half", c.access(c.a), TOPIC, f"half-{i}")
        if h["broker"] == "broker-a":
            pending = f"half-{i}"
            break
    assert pending is not None
    # Consumed from any access point: every message once, from both nodes.
    got = client("consume", c.access(c.b), "g1", TOPIC, "120", "60", "m-")["bodies"]
    # Halves that landed on broker-b are checked back by broker-b... but
    # their producer is gone too: they stay pending; only plain messages here.
    plain = [b for b in got if b.startswith("m-")]
    assert Counter(plain) == Counter(first["sent"]), "g1 missed or duplicated"

    # The official Node.js client, the same way, through broker-b.
    node = node_client("roundtrip", c.access(c.b), TOPIC, "gnode", "12", "js")
    assert set(node["brokers"]) == {"broker-a", "broker-b"}, node["brokers"]
    assert Counter(b for b in node["got"] if b.startswith("js-")) == Counter(
        node["sent"]
    )

    # SYNC_MASTER: the slave has everything broker-a acknowledged.
    status = {n["key"]: n for n in c.nodes()}
    assert status["broker-a:1"]["role"] == "SLAVE"

    # broker-a's host dies.
    c.a.kill()
    killed = time.monotonic()
    c.wait_nodes({"broker-a:1", "broker-b:0"}, timeout=EXPIRY * 4)
    route_update_s = time.monotonic() - killed
    # Sends fail over to broker-b (a new producer routes from the registry).
    after = client("send", c.access(c.b), TOPIC, "40", "after")
    assert not after["failed"], after["failed"][:3]
    assert after["brokers"] == {"broker-b": 40}
    # Everything acknowledged is readable: broker-a's messages from its slave.
    g2 = client("consume", c.access(c.b), "g2", TOPIC, "172", "60", "m-,af,js")
    g2 = g2["bodies"]
    assert Counter(b for b in g2 if b[:2] in ("m-", "af", "js")) == Counter(
        first["sent"] + after["sent"] + node["sent"]
    )
    # A slave takes no writes: its route is read-only (sends went to b).

    # Promote the slave: it resumes broker-a's pending half and its timers.
    done = subprocess.run(
        [sys.executable, "-m", "broker_core", "promote", str(tmp_path / "store-s"),
         "--role", "ASYNC_MASTER"],  # no slave follows it: SYNC would ack nothing
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 20
    while {n["key"] for n in c.nodes()} != {"broker-a:0", "broker-b:0"}:
        assert time.monotonic() < deadline, c.nodes()
        time.sleep(0.2)
    # The promoted node checks broker-a's half back. (broker-b may check a
    # half of its own first: the producer listens to every node it routes to.)
    checked = client("checker", c.access(c.s), TOPIC, "30", pending)["checked"]
    assert pending in checked
    wait = 12 - (time.time() - sent_at) + 2
    # Until every delayed message and the checked half arrived (a loaded
    # machine's promoted node may take a while over its overdue timers).
    want = str(len(delayed["sent"]) + 1)
    g3 = client("consume", c.access(c.s), "g3", TOPIC, want,
                str(max(wait, 5) + 45), f"late-,{pending}")  # fmt: skip
    bodies = Counter(g3["bodies"])
    late = Counter(b for b in bodies.elements() if b.startswith("late-"))
    assert late == Counter(delayed["sent"]), (
        "delayed messages lost or repeated",
        sorted(set(delayed["sent"]) - set(late)),
        sorted(b for b, n in late.items() if n > 1),
    )
    assert bodies[pending] == 1, "the checked half is delivered once"
    assert all(n == 1 for n in bodies.values()), [b for b, n in bodies.items() if n > 1]
    print(f"route update after the master's death: {route_update_s:.1f} s")
