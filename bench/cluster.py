"""The broker as a cluster: throughput over nodes, replication lag, failover.

    .venv/bin/python bench/cluster.py [--messages N] [--clients 1,4]
        [--body 1024] [--window 256] [--registry redis://127.0.0.1:6379/11]
        [--json out.json]

Everything runs on 127.0.0.1 (each node on ports of its own, no network
namespaces): ``python -m broker_core serve --cluster ... --registry ...``
processes on temporary stores, registered in a route registry in Redis (a
cluster name of its own per section of each run; its keys are deleted at the
end). Clients are the official RocketMQ Python client, several processes, run
with bench/grpc.py's helpers and measured its way (imported, not copied):
its ``rmq_send`` worker (``send_async``, at most ``--window`` in flight per
process); SimpleConsumers receiving batches of 32 and acknowledging each
message (``recv_acked`` here: grpc.py's receive loop, but the phase ends at
the last ack instead of after every consumer's final empty long polls, and
the message ids come back, so lost and duplicated messages are counted);
server CPU is the utime+stime from /proc of every node process over the
phase, per message; client CPU each client's own over its loop.

1. Scale-out: ONE master (broker-a) and TWO masters (broker-a, broker-b),
   the topic created beforehand with 4 queues on each node
   (``Broker.open(dir).create_topic(topic, 4, 4)``); for each ``--clients``
   count N, N processes send ``--messages`` in total (1 KiB bodies), then N
   consumers receive and ack them. With two nodes the clients' access points
   alternate between the nodes; routes spread the sends over both. Messages
   the consumers left behind (a consumer stops after five empty long polls)
   are drained afterwards (untimed, for up to 60 s) so that "lost" means
   lost; "stored" is what the nodes' queues hold afterwards (more than was
   sent: a send stored twice, e.g. a client retry on the other node).
2. Replication under load: broker-a ASYNC_MASTER (``--ha-listen``) with a
   slave following (``--master-ha``); the largest client count sends at full
   speed while a thread samples every 10 ms the master's log end and the
   slave's replicated end. Both are read from the stores' shared state
   (``broker_core.shared.read_commit_pos``): the registry's NodeInfo.log_end
   is refreshed only at each heartbeat (every expiry/3 s, 3.3 s by default),
   far too coarse for 10 ms samples. Reported: lag in bytes p50/p99/max
   during the load, and the time the slave needs after the last send was
   acknowledged to reach the master's final end. Then SYNC_MASTER: the send
   rate (full speed, largest client count) and the latency of single
   sequential sends (p50/p99, one process) with a slave following, and
   without one (a SYNC_MASTER without ``--ha-listen`` answers at once).
3. Failover: two masters with ``--registry-expiry`` 3 s and 10 s (the
   default); broker-a's process is SIGKILLed, then (a) the time until
   ``RouteRegistry.route(topic)`` (polled every 50 ms) no longer has
   broker-a, and (b) the time until a fresh official-client producer (a new
   one per attempt, through broker-b's access point, 16 sends each) has all
   its sends succeed, all on broker-b.
4. Automatic promotion: broker-a ASYNC_MASTER with a slave started with
   ``--auto-promote-after`` (``--auto-promote-after``, 1 s) under each
   registry expiry; 1,000 messages sent and replicated, then broker-a's
   process is SIGKILLed: the time until the registry routes broker-a to the
   promoted slave (``RouteRegistry.find("broker-a", 0)`` at the slave's
   endpoint, polled every 50 ms), and how many messages the promoted slave
   holds against the sends the client saw acknowledged (the topic holds
   nothing else).

5. Failover under the controller, with the clients that were sending:
   a 3-member etcd on loopback (``tests/etcd.py``), broker-a SYNC_MASTER and
   its slave with ``--controller`` (``--lease-ttl``, 6 s), broker-b a plain
   master; ``--steady-clients`` official-client producers, each one send at
   a time at ``--steady-rate`` per second for ``--steady-s`` seconds, their
   access point every node (``a;b;s``). broker-a's master is SIGKILLed after
   ``--kill-after`` s. Reported: sends failed (and when, after the kill),
   acknowledged sends in neither surviving store (must be 0), and the time
   from the kill to the first send stored on the promoted slave.

6. The same against Apache RocketMQ 5.3.3 in controller mode
   (``bench/peers/rocketmq.py``'s ``ApacheControllerCluster``, 7 JVMs on
   free ports): the NameServer with the embedded DLedger controller (one
   member), broker-a's two brokers with ``enableControllerMode`` and
   ``allAckInSyncStateSet=true`` (the first one started is elected SYNC
   master, the second waited for until it is in the SyncStateSet), broker-b a
   plain master, and one cluster-mode gRPC proxy per broker; the access point
   lists the three proxies. The same producers (``steady_send``); after
   ``--kill-after`` s broker-a's master JVM is SIGKILLed, with the proxy in
   front of it (``--apache-kill node``, as section 5 kills a node that is also
   an access point) or alone (``--apache-kill broker``). The official client
   sends everything through the first of its access point's addresses (sorted,
   gRPC pick_first): ``--apache-client-on killed`` (default) gives that to the
   proxy killed with the master, ``survivor`` to broker-b's, ``any`` leaves it
   to the free ports. "Lost" and "stored on
   the promoted slave" read the three brokers' commit logs after every JVM is
   stopped (``commitlog_bytes``, the message id being the UNIQ_KEY property);
   the election time is the first of the controller's sync-state answers
   (polled every 100 ms, as ``mqadmin getSyncStateSet``) naming the slave
   master. Not in the default ``--sections``: it needs Java and the jars
   (``python bench/peers/rocketmq.py fetch``).

``--sections 1,2,3,4,5`` runs only the given sections (6 only when named).

Prints a table (with the load average at the start and the end: the figures
depend on what else runs on the machine) and writes JSON (``--json``, else
to stdout). Temporary stores are removed, started processes stopped.
"""

from __future__ import annotations

import os
import sys

# This directory holds grpc.py: keep it off sys.path so that the client's
# "import grpc" finds grpcio.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
SECRET = "bench-cluster-ha-secret-0123456789"


def _load_grpc_bench():
    """bench/grpc.py as a module (its name would shadow grpcio's)."""
    spec = importlib.util.spec_from_file_location("bench_grpc", Path(_HERE, "grpc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bg = _load_grpc_bench()


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


# -- client workers of this script (each in its own process) --------------------
def lat_send(ep: str, topic: str, n: int, body: int) -> dict:
    """``n`` sequential sends (each waits for its answer): their latency."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    p = Producer(ClientConfiguration(ep, Credentials(), request_timeout=10), (topic,))
    p.startup()
    payload = b"x" * body
    lat, errors, first = [], 0, ""
    cpu0, t0 = time.process_time(), time.time()
    for _ in range(n):
        m = Message()
        m.topic = topic
        m.body = payload
        s = time.perf_counter()
        try:
            p.send(m)
        except Exception as exc:  # noqa: BLE001 - counted
            errors += 1
            first = first or str(exc)[:200]
            continue
        lat.append((time.perf_counter() - s) * 1000)
    t1, cpu1 = time.time(), time.process_time()
    p.shutdown()
    return {
        "done": len(lat),
        "errors": errors,
        "t0": t0,
        "t1": t1,
        "cpu_s": cpu1 - cpu0,
        "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99),
        "first_error": first,
    }


def recv_acked(ep: str, topic: str, group: str, total: int, deadline_s: float) -> dict:
    """bench/grpc.py's rmq_recv, but the phase ends with the last ack (its
    t1 includes the final empty long polls of every consumer, which with
    several consumers dominate a short phase), and returns the message ids
    (lost and duplicated messages are counted over all consumers)."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    c = SimpleConsumer(
        ClientConfiguration(ep, Credentials()),
        group,
        {topic: FilterExpression("*")},
        await_duration=1,
    )
    c.startup()
    pool = ThreadPoolExecutor(16)
    ids, acks, empty = [], [], 0

    def ack(m) -> float:
        c.ack(m)
        return time.time()

    cpu0, t0 = time.process_time(), time.time()
    while time.time() - t0 < deadline_s and len(ids) < total:
        try:
            msgs = c.receive(32, 30)
        except Exception:  # noqa: BLE001 - "no new message" after a long poll
            msgs = []
        if not msgs:
            empty += 1
            # Patient: the phase ends at the last ack, not here, and with two
            # nodes a receive can come back empty while the other node's
            # queues still hold messages.
            if (empty >= 5 and ids) or empty >= 8:
                break
            continue
        empty = 0
        acks += [pool.submit(ack, m) for m in msgs]
        ids += [m.message_id for m in msgs]
    cpu1 = time.process_time()
    wait(acks)
    ok = [f.result() for f in acks if f.exception() is None]
    c.shutdown()
    return {
        "done": len(ids),
        "errors": len(acks) - len(ok),
        "t0": t0,
        "t1": max(ok, default=t0),
        "cpu_s": cpu1 - cpu0,
        "ids": ids,
    }


def failover_probe(ep: str, topic: str, per: int, deadline_s: float) -> dict:
    """Print READY, wait for the kill time on stdin, then make a fresh
    producer per attempt and send ``per`` messages until all succeed on
    broker-b; report when (from the kill) and what the attempts saw."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    print("READY", flush=True)
    killed = float(sys.stdin.readline())
    attempts = []
    while time.time() - killed < deadline_s:
        start = time.time() - killed
        ok, brokers, first = 0, {}, ""
        try:
            p = Producer(
                ClientConfiguration(ep, Credentials(), request_timeout=3), (topic,)
            )
            p.startup()
            try:
                for i in range(per):
                    m = Message()
                    m.topic = topic
                    m.body = f"probe-{len(attempts)}-{i}".encode()
                    try:
                        r = p.send(m)
                    except Exception as exc:  # noqa: BLE001 - counted
                        first = first or str(exc)[:160]
                        continue
                    ok += 1
                    b = str(r.message_queue).split(".", 1)[0]
                    brokers[b] = brokers.get(b, 0) + 1
            finally:
                p.shutdown()
        except Exception as exc:  # noqa: BLE001 - startup failed: next attempt
            first = first or f"startup: {str(exc)[:160]}"
        end = time.time() - killed
        attempts.append(
            {
                "start_s": round(start, 2),
                "end_s": round(end, 2),
                "ok": ok,
                "brokers": brokers,
                "error": first,
            }
        )
        if ok == per and set(brokers) == {"broker-b"}:
            return {"all_ok_s": end, "attempts": attempts}
        time.sleep(0.05)
    return {"all_ok_s": None, "attempts": attempts}


def steady_send(ep: str, topic: str, seconds: float, rate: float) -> dict:
    """One official-client producer sending one message at a time at ``rate``
    per second for ``seconds``, through access point ``ep`` (several nodes:
    ``a;b;c``): every send's time, latency, outcome (1/0) and message id (or
    the exception's type, then its text)."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    p = Producer(ClientConfiguration(ep, Credentials(), request_timeout=3), (topic,))
    p.startup()
    sends: list[list] = []
    t0 = time.time()
    i = 0
    while time.time() - t0 < seconds:
        due = t0 + i / rate
        if due > time.time():
            time.sleep(due - time.time())
        m = Message()
        m.topic = topic
        m.body = b"steady-%d" % i
        at = time.time()
        try:
            r = p.send(m)
            sends.append([at, time.time() - at, 1, r.message_id])
        except Exception as exc:  # noqa: BLE001 - a failed send, counted
            text = str(exc).replace("\n", " ")[:600]
            sends.append([at, time.time() - at, 0, type(exc).__name__, text])
        i += 1
    try:
        p.shutdown()
    except Exception:  # noqa: BLE001
        pass
    return {"sends": sends}


WORKERS = {
    "steady_send": (steady_send, (str, str, float, float)),
    "recv_acked": (recv_acked, (str, str, str, int, float)),
    "lat_send": (lat_send, (str, str, int, int)),
    "failover_probe": (failover_probe, (str, str, int, float)),
}


def spawn(name: str, *args: object, home: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen(
        [PY, os.path.abspath(__file__), "_worker", name, *map(str, args)],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=home,
        env=dict(os.environ, HOME=home),
    )


def result_of(p: subprocess.Popen, timeout: float = 600) -> dict:
    out, _ = p.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"worker failed: {out[-2000:]}")
    return json.loads(lines[-1][7:])


# -- the cluster -------------------------------------------------------------------
class Cluster:
    """Nodes of one cluster on 127.0.0.1, each ``serve`` a process of its own."""

    def __init__(self, tmp: Path, registry: str, cluster: str, expiry: float = 10):
        self.tmp, self.registry_url, self.name = tmp, registry, cluster
        self.expiry = expiry
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.stores: dict[str, Path] = {}
        self.secret = tmp / "ha.secret"
        self.secret.write_text(SECRET + "\n")

    def store(self, key: str, topics: list[str], queues: int = 4) -> Path:
        from broker_core import Broker

        path = self.tmp / f"{self.name}-{key}"
        with Broker.open(str(path)) as broker:
            for t in topics:
                broker.create_topic(t, queues, queues)
        self.stores[key] = path
        return path

    def start_pair(self, role: str, ha: int, *slave_extra: str) -> None:
        """broker-a as ``role`` serving its log on port ``ha``, and its slave."""
        secret = ("--ha-secret-file", str(self.secret))
        self.start("a", "broker-a", "--role", role,
                   "--ha-listen", f"127.0.0.1:{ha}", *secret)  # fmt: skip
        self.start("s", "broker-a", "--broker-id", "1",
                   "--master-ha", f"127.0.0.1:{ha}", *secret,
                   *slave_extra)  # fmt: skip

    def start(self, key: str, node: str, *extra: str) -> None:
        """Start a node (``key`` names its store); wait_up() waits for it."""
        port = bg.free_port()
        log = open(self.tmp / f"{self.name}-{key}.log", "w")  # noqa: SIM115
        self.procs[key] = subprocess.Popen(
            [
                PY,
                "-m",
                "broker_core",
                "serve",
                "--store",
                str(self.stores[key]),
                "--listen",
                f"127.0.0.1:{port}",
                "--cluster",
                self.name,
                "--node",
                node,
                "--registry",
                self.registry_url,
                "--registry-expiry",
                str(self.expiry),
                "--no-redis-relay",
                *extra,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.ports[key] = port

    def ep(self, key: str) -> str:
        return f"127.0.0.1:{self.ports[key]}"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def registry(self):
        from broker_core.cluster import RouteRegistry

        return RouteRegistry(self.registry_url, self.name, self.expiry)

    def wait_up(self, want: set[str], timeout: float = 60) -> None:
        for key, port in self.ports.items():
            bg.wait_port(port, self.procs[key])
        reg = self.registry()
        deadline = time.monotonic() + timeout
        while {n.key for n in reg.nodes()} != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes {want} did not register: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        return "\n".join(
            f"[{k}] " + Path(self.tmp / f"{self.name}-{k}.log").read_text()[-1500:]
            for k in self.procs
        )

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def node_errors(c: Cluster) -> list[str]:
    """Tracebacks and ERROR lines in the nodes' logs (reported, not raised)."""
    out = []
    for k in c.procs:
        for ln in Path(c.tmp / f"{c.name}-{k}.log").read_text().splitlines():
            if " ERROR " in ln or ln.startswith("Traceback"):
                out.append(f"{c.name}/{k}: {ln[:200]}")
    return out


def measure(name: str, args: list[list[object]], home: str, pids: list[int]) -> dict:
    """bench/grpc.py's phase (workers of either script), keeping the load's
    start and end times, and the message ids received (if any)."""
    c0 = bg.proc_cpu(pids)
    if name in WORKERS:
        rs = [result_of(p) for p in [spawn(name, *x, home=home) for x in args]]
    else:
        rs = bg.run_workers(name, args, home)
    c1 = bg.proc_cpu(pids)
    done = sum(r["done"] for r in rs)
    t0, t1 = min(r["t0"] for r in rs), max(r["t1"] for r in rs)
    cpu = None if c0 is None or c1 is None else (c1 - c0) / max(1, done) * 1e6
    return {
        "messages": done,
        "errors": sum(r["errors"] for r in rs),
        "msg_per_s": round(done / (t1 - t0), 1) if t1 > t0 else None,
        "server_cpu_us_per_msg": None if cpu is None else round(cpu, 1),
        "client_cpu_us_per_msg": round(
            sum(r["cpu_s"] for r in rs) / max(1, done) * 1e6, 1
        ),
        "t0": t0,
        "t1": t1,
        "ids": [i for r in rs for i in r.get("ids", [])],
    }


# -- 1. scale-out ------------------------------------------------------------------
def bench_scale(a, tmp: Path, base: str, nodes: int, counts: list[int]) -> dict:
    c = Cluster(tmp, a.registry, f"{base}-scale{nodes}")
    keys = ["a", "b"][:nodes]
    topics = {n: f"Scale{nodes}x{n}" for n in counts}
    out: dict = {}
    try:
        for k in keys:
            c.store(k, list(topics.values()))
            c.start(k, f"broker-{k}")
        c.wait_up({f"broker-{k}:0" for k in keys})
        for n in counts:
            t = topics[n]
            eps = [c.ep(keys[i % nodes]) for i in range(n)]
            per = a.messages // n
            send = measure(
                "rmq_send",
                [[ep, t, per, a.body, a.window] for ep in eps],
                str(tmp),
                c.pids(),
            )
            recv = measure(
                "recv_acked",
                [[ep, t, f"G{t}", send["messages"], 120] for ep in eps],
                str(tmp),
                c.pids(),
            )
            ids = recv.pop("ids")
            send.pop("ids")
            missing = send["messages"] - len(set(ids))
            drained: list[str] = []
            end = time.time() + 60  # past the 30 s invisible time of a receive
            while missing > len(set(drained)) and time.time() < end:
                # left behind by the consumers' stop rule, or lost?
                left = missing - len(set(drained))
                drained += result_of(
                    spawn("recv_acked", eps[0], t, f"G{t}", left, 15, home=str(tmp))
                )["ids"]
            unique = len(set(ids + drained))
            out[str(n)] = {
                "send": send,
                "receive_ack": recv,
                "not_received_in_phase": missing,
                "drained_after_phase": len(drained),
                "lost": send["messages"] - unique,
                "duplicates": len(ids) + len(drained) - unique,
            }
            print(
                f"  {nodes} node(s), {n} client(s): send {send['msg_per_s']} "
                f"msg/s, receive+ack {recv['msg_per_s']} msg/s",
                flush=True,
            )
        out["node_errors"] = node_errors(c)
    finally:
        c.stop()
    from broker_core import Broker

    for n, t in topics.items():  # stored on the nodes: more than sent = a
        stored = 0  # send stored twice (a client retry on another node)
        for k in keys:
            with Broker.open(str(c.stores[k])) as broker:
                stored += sum(broker.store.max_offset(t, q) for q in range(4))
        if str(n) in out:
            out[str(n)]["stored"] = stored
    return out


# -- 2. replication ----------------------------------------------------------------
class LagSampler(threading.Thread):
    """(time, master end, slave end) every 10 ms from the stores' state."""

    def __init__(self, master: Path, slave: Path) -> None:
        super().__init__(daemon=True)
        self.master, self.slave = master, slave
        self.samples: list[tuple[float, int, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        from broker_core.shared import read_commit_pos

        while not self.stop_event.is_set():
            self.samples.append(
                (time.time(), read_commit_pos(self.master), read_commit_pos(self.slave))
            )
            self.stop_event.wait(0.01)


def wait_caught_up(s: LagSampler, target: int, timeout: float = 120) -> float | None:
    end = time.time() + timeout
    while time.time() < end:
        if s.samples and s.samples[-1][2] >= target:
            return next(t for t, _, sl in s.samples if sl >= target)
        time.sleep(0.01)
    return None


def bench_async_lag(a, tmp: Path, base: str, clients: int) -> dict:
    c = Cluster(tmp, a.registry, f"{base}-async")
    topic = "Replicated"
    ha = bg.free_port()
    sampler = None
    try:
        c.store("a", [topic])
        c.store("s", [])
        c.start_pair("ASYNC_MASTER", ha)
        c.wait_up({"broker-a:0", "broker-a:1"})
        sampler = LagSampler(c.stores["a"], c.stores["s"])
        sampler.start()
        per = a.messages // clients
        send = measure(
            "rmq_send",
            [[c.ep("a"), topic, per, a.body, a.window]] * clients,
            str(tmp),
            c.pids(),
        )
        send.pop("ids")
        from broker_core.shared import read_commit_pos

        final = read_commit_pos(c.stores["a"])
        caught = wait_caught_up(sampler, final)
        reg = {n.key: n for n in c.registry().nodes()}
        during = [m - s for t, m, s in sampler.samples if send["t0"] <= t <= send["t1"]]
        out = {
            "clients": clients,
            "send": send,
            "samples": len(during),
            "lag_bytes_p50": pct(during, 50),
            "lag_bytes_p99": pct(during, 99),
            "lag_bytes_max": max(during) if during else None,
            "catch_up_s": None
            if caught is None
            else round(max(0.0, caught - send["t1"]), 3),
            "master_end": final,
            "slave_end": read_commit_pos(c.stores["s"]),
            "registry_log_end": {k: n.log_end for k, n in reg.items()},
            "registry_heartbeat_s": round(max(0.2, c.expiry / 3), 2),
            "node_errors": node_errors(c),
        }
    finally:
        if sampler is not None:
            sampler.stop_event.set()
        c.stop()
    return out


def bench_sync(a, tmp: Path, base: str, clients: int, slave: bool) -> dict:
    c = Cluster(tmp, a.registry, f"{base}-sync{int(slave)}")
    topic = "Synced"
    try:
        c.store("a", [topic])
        want = {"broker-a:0"}
        if slave:
            ha = bg.free_port()
            c.store("s", [])
            c.start_pair("SYNC_MASTER", ha)
            want.add("broker-a:1")
        else:
            c.start("a", "broker-a", "--role", "SYNC_MASTER")
        c.wait_up(want)
        if slave:  # let the slave connect (a SYNC send fails without one)
            time.sleep(1.0)
        per = a.messages // clients
        rate = measure(
            "rmq_send",
            [[c.ep("a"), topic, per, a.body, a.window]] * clients,
            str(tmp),
            c.pids(),
        )
        rate.pop("ids")
        lat = result_of(
            spawn("lat_send", c.ep("a"), topic, a.latency_sends, a.body, home=str(tmp))
        )
        out = {
            "slave": slave,
            "clients": clients,
            "send": rate,
            "latency": {
                k: lat[k] for k in ("done", "errors", "p50_ms", "p99_ms", "first_error")
            },
            "node_errors": node_errors(c),
        }
        if slave:
            from broker_core.shared import read_commit_pos

            time.sleep(0.5)
            out["master_end"] = read_commit_pos(c.stores["a"])
            out["slave_end"] = read_commit_pos(c.stores["s"])
    finally:
        c.stop()
    return out


# -- 3. failover -------------------------------------------------------------------
def bench_failover(a, tmp: Path, base: str, expiry: float) -> dict:
    c = Cluster(tmp, a.registry, f"{base}-fo{int(expiry)}", expiry)
    topic = "Failover"
    probe = None
    try:
        for k in ("a", "b"):
            c.store(k, [topic])
            c.start(k, f"broker-{k}")
        c.wait_up({"broker-a:0", "broker-b:0"})
        reg = c.registry()
        before = {e.node.name for e in reg.route(topic)}
        probe = spawn(
            "failover_probe",
            c.ep("b"),
            topic,
            16,
            60,
            home=str(tmp),
            stdin=subprocess.PIPE,
        )
        line = probe.stdout.readline()
        if "READY" not in line:
            raise RuntimeError(f"failover probe: {line}")
        # Kill just after a heartbeat would be the worst case; just after
        # start is arbitrary: note how old broker-a's registration is.
        age = time.time() * 1000 - reg.find("broker-a", 0).heartbeat_ms
        c.procs["a"].send_signal(signal.SIGKILL)
        killed = time.time()
        probe.stdin.write(f"{killed}\n")
        probe.stdin.flush()
        routed_away = None
        while time.time() - killed < expiry * 3 + 10:
            if all(e.node.name != "broker-a" for e in reg.route(topic)):
                routed_away = time.time() - killed
                break
            time.sleep(0.05)
        r = result_of(probe, timeout=120)
        probe = None
        return {
            "expiry_s": expiry,
            "route_before": sorted(before),
            "heartbeat_age_at_kill_ms": round(age),
            "route_without_a_s": None if routed_away is None else round(routed_away, 2),
            "all_sends_ok_on_b_s": None
            if r["all_ok_s"] is None
            else round(r["all_ok_s"], 2),
            "failed_sends": sum(16 - x["ok"] for x in r["attempts"]),
            "attempts": r["attempts"],
            "node_errors": node_errors(c),
        }
    finally:
        if probe is not None and probe.poll() is None:
            probe.kill()
            probe.wait()
        c.stop()


def bench_auto_promote(a, tmp: Path, base: str, expiry: float) -> dict:
    c = Cluster(tmp, a.registry, f"{base}-ap{int(expiry)}", expiry)
    topic = "AutoPromote"
    ha = bg.free_port()
    try:
        c.store("a", [topic])
        c.store("s", [])
        c.start_pair("ASYNC_MASTER", ha, "--auto-promote-after",
                     str(a.auto_promote_after))  # fmt: skip
        c.wait_up({"broker-a:0", "broker-a:1"})
        send = measure("rmq_send", [[c.ep("a"), topic, 1000, a.body, a.window]],
                       str(tmp), c.pids())  # fmt: skip
        send.pop("ids")
        acked = int(send["messages"])  # sends the client saw acknowledged
        from broker_core.shared import read_commit_pos

        final = read_commit_pos(c.stores["a"])
        deadline = time.monotonic() + 60
        while read_commit_pos(c.stores["s"]) < final:
            if time.monotonic() > deadline:
                raise RuntimeError("the slave did not catch up")
            time.sleep(0.01)
        reg = c.registry()
        age = time.time() * 1000 - reg.find("broker-a", 0).heartbeat_ms
        c.procs["a"].send_signal(signal.SIGKILL)
        killed = time.time()
        promoted = None
        while time.time() - killed < expiry * 3 + a.auto_promote_after + 20:
            live = reg.find("broker-a", 0)
            if live is not None and live.endpoints == [c.ep("s")]:
                promoted = time.time() - killed
                break
            time.sleep(0.05)
        from broker_core import Broker

        held: set[str] = set()
        with Broker.open(str(c.stores["s"])) as b:
            cfg = b.store.topic_config(topic)
            for q in range(cfg.queue_nums if cfg else 0):
                msgs = b.pull("probe", topic, q, 0, 100_000).messages
                held.update(m.msg_id for m in msgs)
        return {
            "expiry_s": expiry,
            "auto_promote_after_s": a.auto_promote_after,
            "heartbeat_age_at_kill_ms": round(age),
            "routed_to_promoted_slave_s": None
            if promoted is None
            else round(promoted, 2),
            "acknowledged": acked,
            "held_by_promoted_slave": len(held),
            "missing_on_slave": max(0, acked - len(held)),
            "node_errors": node_errors(c),
        }
    finally:
        c.stop()


def failover_figures(
    sends: list, killed: float, old: bytes, promoted: bytes, other: bytes
) -> dict:
    """What sections 5 and 6 report of the producers' sends (``steady_send``:
    time, latency, ok, body) around a kill at ``killed``, from the old
    master's, the promoted slave's and the other master's logs."""
    acked = [x for x in sends if x[2]]
    failed = [x for x in sends if not x[2]]
    survivors = promoted + other
    after = [x for x in acked if x[0] >= killed]
    on_promoted = [x for x in after if x[3].encode() in promoted]
    return {
        "sends": len(sends),
        "acknowledged": len(acked),
        "failed": len(failed),
        "failed_kinds": sorted({x[3] for x in failed}),
        "failed_after_kill_s": (
            [
                round(min(x[0] for x in failed) - killed, 2),
                round(max(x[0] for x in failed) - killed, 2),
            ]
            if failed
            else None
        ),  # fmt: skip
        "acknowledged_lost": sum(1 for x in acked if x[3].encode() not in survivors),
        "first_send_on_promoted_s": (
            round(min(x[0] for x in on_promoted) - killed, 2) if on_promoted else None
        ),
        "acknowledged_after_kill": len(after),
        "after_kill_on_promoted": len(on_promoted),
        "after_kill_on_old_master": sum(1 for x in after if x[3].encode() in old),
        "after_kill_on_broker_b": sum(1 for x in after if x[3].encode() in other),
        "max_send_latency_s": round(max((x[1] for x in sends), default=0), 2),
    }


def bench_controller_failover(a, tmp: Path, base: str) -> dict:
    """Section 5 (module doc): SIGKILL of a SYNC master under the controller
    while producers whose access point lists every node keep sending."""
    sys.path.insert(0, str(ROOT))
    from tests.etcd import EtcdCluster

    etcd_dir = tmp / f"{base}-etcd"
    etcd_dir.mkdir()
    etcd = EtcdCluster(etcd_dir, 3)
    c = Cluster(tmp, a.registry, f"{base}-ctl", a.controller_expiry)
    topic = "Steady"
    ha = bg.free_port()
    ctl = ("--controller", etcd.urls, "--lease-ttl", str(a.lease_ttl))
    secret = ("--ha-secret-file", str(c.secret))
    procs: list[subprocess.Popen] = []
    try:
        c.store("a", [topic])
        c.store("s", [])
        c.store("b", [topic])
        c.start("a", "broker-a", "--role", "SYNC_MASTER",
                "--ha-listen", f"127.0.0.1:{ha}", *secret, *ctl)  # fmt: skip
        c.start("s", "broker-a", "--broker-id", "1",
                "--master-ha", f"127.0.0.1:{ha}", *secret, *ctl)  # fmt: skip
        c.start("b", "broker-b")
        c.wait_up({"broker-a:0", "broker-a:1", "broker-b:0"})
        access = ";".join(c.ep(k) for k in ("a", "b", "s"))
        procs = [
            spawn(
                "steady_send", access, topic, a.steady_s, a.steady_rate, home=str(tmp)
            )
            for _ in range(a.steady_clients)
        ]
        time.sleep(a.kill_after)
        c.procs["a"].send_signal(signal.SIGKILL)
        killed = time.time()
        sends = [x for p in procs for x in result_of(p, a.steady_s + 120)["sends"]]
        procs = []
        c.stop()
        held = {k: _log_bytes(c.stores[k]) for k in ("a", "s", "b")}
        return {
            "clients": a.steady_clients,
            "rate_per_client": a.steady_rate,
            "lease_ttl_s": a.lease_ttl,
            "registry_expiry_s": a.controller_expiry,
            **failover_figures(sends, killed, held["a"], held["s"], held["b"]),
            "node_errors": node_errors(c),
        }
    finally:
        for p in procs:
            p.kill()
        c.stop()
        etcd.close()


def _log_bytes(store: Path) -> bytes:
    from broker_core.shared import read_commit_pos

    end = read_commit_pos(store)
    out = bytearray()
    for seg in sorted((store / "commitlog").iterdir()):
        out += seg.read_bytes()
    return bytes(out[:end])


def print_controller(res: dict) -> None:
    r = res["controller"]
    print("\n5. SIGKILL of a SYNC master under the controller, clients sending")
    print(f"  {r['clients']} producers x {r['rate_per_client']:g}/s, access point "
          f"= every node; lease {r['lease_ttl_s']} s, registry expiry "
          f"{r['registry_expiry_s']:g} s")  # fmt: skip
    print(f"  sends {r['sends']:,}, acknowledged {r['acknowledged']:,}, failed "
          f"{r['failed']:,} {r['failed_kinds']} (from/to after the kill: "
          f"{r['failed_after_kill_s']})")  # fmt: skip
    print(f"  acknowledged and lost: {r['acknowledged_lost']}; first send stored "
          f"on the promoted slave {r['first_send_on_promoted_s']} s after the "
          f"kill ({r['after_kill_on_promoted']:,} of "
          f"{r['acknowledged_after_kill']:,} acknowledged after it); slowest send "
          f"{r['max_send_latency_s']} s")  # fmt: skip


# -- 6. the same against Apache RocketMQ in controller mode -------------------------
def bench_apache_failover(a, tmp: Path, base: str) -> dict:
    """Section 6 (module doc): section 5's producers and kill against Apache
    RocketMQ 5.3.3 in controller mode (bench/peers/rocketmq.py)."""
    from bench.peers.rocketmq import ApacheControllerCluster, commitlog_bytes

    topic = "Steady"
    # The client's channel goes through one proxy (ApacheControllerCluster.
    # client_proxy): the one killed with the master, or another.
    client_proxy = {"killed": "proxy-a-0", "survivor": "proxy-b", "any": None}
    cl = ApacheControllerCluster(
        a.apache_version,
        workdir=tmp,
        verbose=True,
        proxy_conf=a.apache_proxy_conf,
        client_proxy=client_proxy[a.apache_client_on],
    )
    procs: list[subprocess.Popen] = []
    polls: list[tuple[float, dict]] = []
    stop_poll = threading.Event()

    def poll() -> None:
        while not stop_poll.is_set():
            try:
                polls.append((time.time(), cl.sync_state("broker-a")))
            except Exception as exc:  # noqa: BLE001 - recorded
                polls.append((time.time(), {"error": str(exc)[:200]}))
            stop_poll.wait(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    try:
        cl.start()
        start_s = cl.start_seconds
        # No +message.type attribute: Apache 5.3.2/5.3.3's slave cannot copy
        # a topic with attributes from its master (apache/rocketmq#9403,
        # fixed after 5.3.3: SyncTopicConfig fails with "only add attribute
        # is supported while creating topic. key: essage.type" and the slave
        # keeps no topic at all). The proxy takes NORMAL messages for a topic
        # of no type (UNSPECIFIED).
        cl.create_topic(topic, None, 4)
        # The slave copies its master's topics every 10 s: wait for it, so
        # that a promoted slave knows the topic.
        slave_cfg = cl.store_of("broker-a-1") / "config" / "topics.json"
        deadline = time.monotonic() + 60
        while topic not in (slave_cfg.read_text() if slave_cfg.exists() else ""):
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker-a-1 has no topic {topic} after 60 s")
            time.sleep(0.2)
        before = cl.sync_state("broker-a")
        old, new = cl.addr_of("broker-a-0"), cl.addr_of("broker-a-1")
        procs = [
            spawn(
                "steady_send",
                cl.access_point,
                topic,
                a.steady_s,
                a.steady_rate,
                home=str(tmp),
            )
            for _ in range(a.steady_clients)
        ]
        poller.start()
        time.sleep(a.kill_after)
        victims = ["broker-a-0"] + (["proxy-a-0"] if a.apache_kill == "node" else [])
        killed = cl.kill(*victims)
        per = [result_of(p, a.steady_s + 120)["sends"] for p in procs]
        sends = [x for r in per for x in r]
        procs = []
        stop_poll.set()
        poller.join()
        masters_after = cl.masters()
        # Nothing writes any more: then read the three commit logs.
        cl.kill(*[n for n in cl.pid_map() if n not in victims])
        held = {b: commitlog_bytes(cl.store_of(b)) for b in cl.BROKERS}
        elected = next(
            (t for t, s in polls if t >= killed and s.get("masterAddress") == new),
            None,
        )
        log_line = _apache_election_line(cl.home_of("namesrv"))
        failed = [x for x in sends if not x[2]]
        return {
            "apache_version": a.apache_version,
            "clients": a.steady_clients,
            "rate_per_client": a.steady_rate,
            "killed": victims,
            "proxy_conf": a.apache_proxy_conf,
            "client_channel_proxy": cl.client_proxy,
            "start_s": round(start_s or 0, 1),
            "sync_state_before": before,
            "sync_state_after": polls[-1][1] if polls else None,
            "namesrv_masters_after": masters_after,
            "old_master": old,
            "promoted": new,
            "elected_s": None if elected is None else round(elected - killed, 2),
            "election_log_line": log_line,
            "sync_state_polls": len(polls),
            "sync_state_poll_errors": sum(1 for _, s in polls if "error" in s),
            **failover_figures(
                sends, killed, held["broker-a-0"], held["broker-a-1"], held["broker-b"]
            ),
            "failed_per_producer": [sum(1 for x in r if not x[2]) for r in per],
            "failed_texts": _first_texts(failed, killed),
            "commitlog_bytes": {b: len(v) for b, v in held.items()},
        }
    finally:
        stop_poll.set()
        for p in procs:
            p.kill()
            p.wait()
        cl.stop(graceful=False)


def _first_texts(failed: list[list], killed: float) -> list[str]:
    """Each distinct failure text (first 3), with when it was first seen."""
    seen: dict[str, float] = {}
    for x in sorted(failed):
        text = f"{x[3]}: {x[4]}" if len(x) > 4 else x[3]
        seen.setdefault(text, x[0] - killed)
    return [f"+{t:.2f}s {text}" for text, t in list(seen.items())[:3]]


def _apache_election_line(home: Path) -> str | None:
    """The controller's "Elect a new master ... done" line for broker-a (its
    time is to the second, GMT+8: the sync-state polls time the election)."""
    for name in ("controller.log", "namesrv.log"):
        f = home / "logs" / "rocketmqlogs" / name
        if f.exists():
            for ln in f.read_text(errors="replace").splitlines():
                if "Elect a new master in broker-set: broker-a done" in ln:
                    return ln[:300]
    return None


def print_apache(res: dict) -> None:
    r = res["apache_controller"]
    print(f"\n6. The same against Apache RocketMQ {r['apache_version']} in "
          f"controller mode (killed: {', '.join(r['killed'])}; the clients' "
          f"channel on {r['client_channel_proxy']})")  # fmt: skip
    print(f"  {r['clients']} producers x {r['rate_per_client']:g}/s, access point "
          f"= every proxy; cluster up in {r['start_s']} s; extra proxy conf "
          f"{r.get('proxy_conf') or '-'}")  # fmt: skip
    print(f"  sends {r['sends']:,}, acknowledged {r['acknowledged']:,}, failed "
          f"{r['failed']:,} {r['failed_kinds']} (from/to after the kill: "
          f"{r['failed_after_kill_s']})")  # fmt: skip
    print(f"  acknowledged and lost: {r['acknowledged_lost']}; controller elected "
          f"broker-a-1 {r['elected_s']} s after the kill; first send stored on it "
          f"{r['first_send_on_promoted_s']} s after the kill "
          f"({r['after_kill_on_promoted']:,} of {r['acknowledged_after_kill']:,} "
          f"acknowledged after it); slowest send "
          f"{r['max_send_latency_s']} s")  # fmt: skip
    print(f"  failed per producer {r['failed_per_producer']}; acknowledged after "
          f"the kill stored on broker-b {r['after_kill_on_broker_b']:,}, on the old "
          f"master {r['after_kill_on_old_master']}")  # fmt: skip
    for text in r["failed_texts"]:
        print(f"    {text}")


# -- output ------------------------------------------------------------------------
def fmt(v, spec=",.0f") -> str:
    return "-" if v is None else format(v, spec)


def print_auto_promote(res: dict) -> None:
    print("\n4. Automatic promotion: ASYNC_MASTER + slave (--auto-promote-after), "
          "SIGKILL the master")  # fmt: skip
    print(f"{'expiry s':>9}{'after s':>9}{'routed to slave s':>19}"
          f"{'acknowledged':>14}{'missing':>9}{'heartbeat age ms':>18}")  # fmt: skip
    for r in res["auto_promote"]:
        print(
            f"{fmt(r['expiry_s'], 'g'):>9}{fmt(r['auto_promote_after_s'], 'g'):>9}"
            f"{fmt(r['routed_to_promoted_slave_s'], '.2f'):>19}"
            f"{r['acknowledged']:>14,}{r['missing_on_slave']:>9}"
            f"{r['heartbeat_age_at_kill_ms']:>18}"
        )


def print_scale(res: dict) -> None:
    print("\n1. Scale-out (official Python client; server CPU summed over nodes)")
    print(
        f"{'nodes':>5}{'clients':>8}  {'phase':<12}{'msg/s':>9}{'server us/msg':>15}"
        f"{'client us/msg':>15}{'msgs':>8}{'errors':>8}  stored | lost/dup"
    )
    for nodes in ("1", "2"):
        for n, run in res["scale"][nodes].items():
            if not n.isdigit():
                continue
            for kind in ("send", "receive_ack"):
                r = run[kind]
                print(
                    f"{nodes:>5}{n:>8}  {kind:<12}{fmt(r['msg_per_s']):>9}"
                    f"{fmt(r['server_cpu_us_per_msg']):>15}"
                    f"{fmt(r['client_cpu_us_per_msg']):>15}{r['messages']:>8}"
                    f"{r['errors']:>8}"
                    + (f"  {run.get('stored', '-')}" if kind == "send" else "")
                    + (
                        f"  {run['lost']}/{run['duplicates']}"
                        f" ({run['not_received_in_phase']} left, drained after)"
                        if kind != "send" and run["not_received_in_phase"]
                        else f"  {run['lost']}/{run['duplicates']}"
                        if kind != "send"
                        else ""
                    )
                )


def print_replication(res: dict) -> None:
    ra = res["replication"]["async"]
    print(
        f"\n2. Replication: ASYNC_MASTER + slave, {ra['clients']} client(s) at full "
        "speed (10 ms samples of the stores' commit positions)"
    )
    print(
        f"   send {fmt(ra['send']['msg_per_s'])} msg/s, server CPU (master+slave) "
        f"{fmt(ra['send']['server_cpu_us_per_msg'])} us/msg, "
        f"{ra['send']['errors']} errors"
    )
    print(
        f"   lag bytes p50 {fmt(ra['lag_bytes_p50'])}  p99 {fmt(ra['lag_bytes_p99'])}"
        f"  max {fmt(ra['lag_bytes_max'])}  over {ra['samples']} samples"
    )
    print(
        f"   slave caught up {fmt(ra['catch_up_s'], '.3f')} s after the last send was "
        f"acknowledged (master end {ra['master_end']:,}, slave end "
        f"{ra['slave_end']:,})"
    )
    print(
        f"   registry log_end (heartbeat every {ra['registry_heartbeat_s']} s): "
        f"{ra['registry_log_end']}"
    )
    print(
        f"   SYNC_MASTER{'':<14}{'send msg/s':>11}{'errors':>8}"
        f"{'seq. send p50 ms':>18}{'p99 ms':>8}{'errors':>8}"
    )
    for label, key in (("with a slave", "sync_slave"), ("without", "sync_alone")):
        r = res["replication"][key]
        print(
            f"   {label:<25}{fmt(r['send']['msg_per_s']):>11}{r['send']['errors']:>8}"
            f"{fmt(r['latency']['p50_ms'], '.2f'):>18}"
            f"{fmt(r['latency']['p99_ms'], '.2f'):>8}{r['latency']['errors']:>8}"
        )


def print_failover(res: dict) -> None:
    print("\n3. Failover: two masters, SIGKILL broker-a")
    print(
        f"{'expiry s':>9}{'route w/o broker-a s':>22}{'fresh producer all ok s':>25}"
        f"{'attempts':>10}{'failed sends':>14}{'heartbeat age at kill ms':>26}"
    )
    for r in res["failover"]:
        print(
            f"{fmt(r['expiry_s'], 'g'):>9}{fmt(r['route_without_a_s'], '.2f'):>22}"
            f"{fmt(r['all_sends_ok_on_b_s'], '.2f'):>25}{len(r['attempts']):>10}"
            f"{r['failed_sends']:>14}{r['heartbeat_age_at_kill_ms']:>26}"
        )
    print(
        "   (a) polls RouteRegistry.route every 50 ms; (b) a fresh producer per "
        "attempt through broker-b, 16 sends each, all ok and all on broker-b"
    )


def print_tables(res: dict) -> None:
    print(
        f"\nload average at start {res['load_before']}, at end {res['load_after']}"
        f" ({res['cpus']} CPUs); {res['messages']} messages of {res['body_bytes']} "
        "bytes per phase"
    )
    for key, show in (("scale", print_scale), ("replication", print_replication),
                      ("failover", print_failover),
                      ("auto_promote", print_auto_promote),
                      ("controller", print_controller),
                      ("apache_controller", print_apache)):  # fmt: skip
        if key in res:
            show(res)


def cleanup_redis(url: str, base: str) -> int:
    import redis

    r = redis.Redis.from_url(url)
    keys = list(r.scan_iter(match=f"rmq:{base}-*", count=500))
    if keys:
        r.delete(*keys)
    r.close()
    return len(keys)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_worker":
        fn, types = WORKERS[argv[1]]
        r = fn(*(t(v) for t, v in zip(types, argv[2:], strict=True)))
        print("RESULT " + json.dumps(r), flush=True)
        os._exit(0)
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=16000, help="per phase")
    ap.add_argument("--clients", default="1,4", help="client process counts")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument(
        "--latency-sends",
        type=int,
        default=500,
        help="sequential sends for the SYNC_MASTER latency",
    )
    ap.add_argument("--expiries", default="3,10", help="failover registry expiries")
    ap.add_argument(
        "--auto-promote-after", type=float, default=1.0,
        help="section 4: the slave's --auto-promote-after",
    )  # fmt: skip
    ap.add_argument("--sections", default="1,2,3,4,5", help="which sections to run")
    ap.add_argument("--steady-clients", type=int, default=2, help="section 5")
    ap.add_argument(
        "--steady-rate", type=float, default=50, help="section 5, per client"
    )
    ap.add_argument("--steady-s", type=float, default=60, help="section 5: how long")
    ap.add_argument("--kill-after", type=float, default=15, help="section 5")
    ap.add_argument("--lease-ttl", type=int, default=6, help="section 5")
    ap.add_argument("--controller-expiry", type=float, default=3, help="section 5")
    ap.add_argument("--apache-version", default="5.3.3", help="section 6")
    ap.add_argument(
        "--apache-kill", choices=("node", "broker"), default="node",
        help="section 6: SIGKILL broker-a's master JVM and the proxy in front "
        "of it (node, as section 5 kills a node), or the broker JVM only",
    )  # fmt: skip
    ap.add_argument(
        "--apache-client-on", choices=("killed", "survivor", "any"),
        default="killed",
        help="section 6: the proxy the clients' gRPC channel goes through (the "
        "official client uses the access point's first address, sorted): the "
        "killed one (proxy-a-0), a surviving one (proxy-b), or as the free "
        "ports fall",
    )  # fmt: skip
    ap.add_argument(
        "--apache-proxy-conf", type=json.loads, default={}, metavar="JSON",
        help="section 6: extra rmq-proxy.json entries for every proxy",
    )  # fmt: skip
    ap.add_argument("--registry", default="redis://127.0.0.1:6379/11")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    counts = [int(x) for x in a.clients.split(",") if x]
    base = f"bench-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    res: dict = {
        "messages": a.messages,
        "body_bytes": a.body,
        "window": a.window,
        "clients": counts,
        "cpus": os.cpu_count(),
        "cluster_prefix": base,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    started = time.time()
    sections = set(a.sections.split(","))
    expiries = [float(e) for e in a.expiries.split(",") if e]
    try:
        if "1" in sections:
            print("1. scale-out", flush=True)
            res["scale"] = {
                str(n): bench_scale(a, tmp, base, n, counts) for n in (1, 2)
            }
        if "2" in sections:
            print("2. replication", flush=True)
            top = max(counts)
            res["replication"] = {
                "async": bench_async_lag(a, tmp, base, top),
                "sync_slave": bench_sync(a, tmp, base, top, True),
                "sync_alone": bench_sync(a, tmp, base, top, False),
            }
        if "3" in sections:
            print("3. failover", flush=True)
            res["failover"] = [bench_failover(a, tmp, base, e) for e in expiries]
        if "4" in sections:
            print("4. automatic promotion", flush=True)
            res["auto_promote"] = [
                bench_auto_promote(a, tmp, base, e) for e in expiries
            ]
        if "5" in sections:
            print("5. controller failover, clients sending", flush=True)
            res["controller"] = bench_controller_failover(a, tmp, base)
        if "6" in sections:
            print("6. Apache RocketMQ controller failover, clients sending", flush=True)
            res["apache_controller"] = bench_apache_failover(a, tmp, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        res["redis_keys_deleted"] = cleanup_redis(a.registry, base)
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    res["elapsed_s"] = round(time.time() - started, 1)
    print_tables(res)
    parts = [
        *res.get("scale", {}).values(),
        *res.get("replication", {}).values(),
        *res.get("failover", []),
        *res.get("auto_promote", []),
        *([res["controller"]] if "controller" in res else []),
    ]
    errs = [e for part in parts for e in part.get("node_errors", [])]
    print(f"\nnode log errors: {len(errs)}" + "".join(f"\n  {e}" for e in errs[:10]))
    print(
        f"elapsed {res['elapsed_s']} s; {res['redis_keys_deleted']} registry keys "
        "deleted"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
        print(f"JSON: {a.json}")
    else:
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
