"""Throughput of the gRPC endpoint through the official RocketMQ Python client.

    .venv/bin/python bench/grpc.py [--clients 4] [--messages 20000] [--body 1024]
        [--window 256] [--endpoint HOST:PORT] [--json out.json]

Starts ``python -m broker_core serve`` on a temporary store (unless --endpoint
is given), then N client processes send ``--messages`` in total with
``send_async`` (at most ``--window`` in flight per process), then N processes
receive and acknowledge them with SimpleConsumer (batches of 32,
``ack_async``). Beside it, in the same run, the broker_core facade's
single-message ``Broker.send`` rate on its own temporary store. Prints a table
and writes JSON.
"""

from __future__ import annotations

import os
import sys

# This file is named grpc.py: keep its directory off sys.path so that
# ``import grpc`` (done by the RocketMQ client) finds the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def worker_send(ep: str, topic: str, n: int, body: int, window: int) -> dict:
    from concurrent.futures import wait

    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    p = Producer(ClientConfiguration(ep, Credentials()), (topic,))
    p.startup()
    payload = b"x" * body
    inflight: set = set()
    errors = 0
    t0 = time.time()
    for _ in range(n):
        m = Message()
        m.topic = topic
        m.body = payload
        inflight.add(p.send_async(m))
        if len(inflight) >= window:
            done, inflight = wait(inflight, return_when="FIRST_COMPLETED")
            errors += sum(1 for f in done if f.exception() is not None)
    done, _ = wait(inflight)
    errors += sum(1 for f in done if f.exception() is not None)
    dt = time.time() - t0
    cpu = time.process_time()
    p.shutdown()
    return {
        "sent": n - errors,
        "errors": errors,
        "seconds": dt,
        "t0": t0,
        "t1": t0 + dt,
        "cpu_s": cpu,
    }


def worker_recv(ep: str, topic: str, group: str, total: int, deadline_s: float) -> dict:
    from concurrent.futures import wait

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
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(16)
    got = 0
    acks = []
    t0 = time.time()
    t_last = t0
    empty = 0
    errors = 0
    while time.time() - t0 < deadline_s and got < total:
        try:
            msgs = c.receive(32, 30)
        except Exception as exc:  # noqa: BLE001
            errors += 1
            print(f"receive error: {exc}", file=sys.stderr, flush=True)
            time.sleep(0.1)
            continue
        if not msgs:
            empty += 1
            if empty >= 2 and got:
                break
            continue
        empty = 0
        for m in msgs:
            # SimpleConsumer.ack_async (5.1.2) returns None (missing return),
            # so acks are pipelined on a thread pool with the blocking ack.
            acks.append(pool.submit(c.ack, m))
        got += len(msgs)
        t_last = time.time()
    wait(acks)
    ack_err = sum(1 for f in acks if f.exception() is not None)
    t_last = max(t_last, time.time()) if acks else t_last
    cpu = time.process_time()
    c.shutdown()
    return {
        "cpu_s": cpu,
        "received": got,
        "ack_errors": ack_err,
        "receive_errors": errors,
        "t0": t0,
        "t1": t_last,
    }


def facade_rate(seconds: float, body: int) -> float:
    from broker_core import Broker, Message

    with tempfile.TemporaryDirectory() as d, Broker.open(d) as b:
        payload = b"x" * body
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(200):
                b.send(Message("BenchFacade", payload))
            n += 200
        return n / (time.perf_counter() - t0)


def proc_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(args: list[list[str]], home: str) -> list[dict]:
    env = dict(os.environ, HOME=home)
    procs = [
        subprocess.Popen(
            [PY, os.path.abspath(__file__), *a],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=home,
        )
        for a in args
    ]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            raise RuntimeError(f"worker failed: {stdout[-2000:]}")
        out.append(json.loads(line[-1][7:]))
    return out


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_send":
        r = worker_send(argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        print("RESULT " + json.dumps(r), flush=True)
        os._exit(0)
    if argv and argv[0] == "_recv":
        r = worker_recv(argv[1], argv[2], argv[3], int(argv[4]), float(argv[5]))
        print("RESULT " + json.dumps(r), flush=True)
        os._exit(0)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--messages", type=int, default=20000, help="total messages")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--endpoint", default=None)
    ap.add_argument("--facade-seconds", type=float, default=3.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="grpc-bench-")
    server = None
    ep = a.endpoint
    if ep is None:
        port = free_port()
        ep = f"127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                PY,
                "-m",
                "broker_core",
                "serve",
                "--store",
                f"{tmp}/store",
                "--listen",
                ep,
            ],
            cwd=ROOT,
            stdout=open(f"{tmp}/server.log", "w"),
            stderr=subprocess.STDOUT,
        )
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
    try:
        topic = f"Bench{int(time.time())}"
        per = a.messages // a.clients
        spid = server.pid if server is not None else None
        c0 = proc_cpu(spid)
        sends = run_workers(
            [
                ["_send", ep, topic, str(per), str(a.body), str(a.window)]
                for _ in range(a.clients)
            ],
            tmp,
        )
        sent = sum(r["sent"] for r in sends)
        send_span = max(r["t1"] for r in sends) - min(r["t0"] for r in sends)
        c1 = proc_cpu(spid)
        recvs = run_workers(
            [
                ["_recv", ep, topic, f"G{topic}", str(sent), "90"]
                for _ in range(a.clients)
            ],
            tmp,
        )
        received = sum(r["received"] for r in recvs)
        recv_span = max(r["t1"] for r in recvs) - min(r["t0"] for r in recvs)
        c2 = proc_cpu(spid)
        facade = facade_rate(a.facade_seconds, a.body)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    res = {
        "clients": a.clients,
        "body_bytes": a.body,
        "messages": sent,
        "send_errors": sum(r["errors"] for r in sends),
        "send_msg_per_s": sent / send_span if send_span else 0,
        "received": received,
        "ack_errors": sum(r["ack_errors"] for r in recvs),
        "receive_ack_msg_per_s": received / recv_span if recv_span else 0,
        "facade_single_send_msg_per_s": facade,
        "server_cpu_us_per_msg_send": (c1 - c0) / max(1, sent) * 1e6 if spid else None,
        "server_cpu_us_per_msg_receive_ack": (c2 - c1) / max(1, received) * 1e6
        if spid
        else None,
        "client_cpu_us_per_msg_send": sum(r["cpu_s"] for r in sends)
        / max(1, sent)
        * 1e6,
        "client_cpu_us_per_msg_receive_ack": sum(r["cpu_s"] for r in recvs)
        / max(1, received)
        * 1e6,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    print(f"{'measure':<40}{'msg/s':>12}")
    label = f"gRPC send ({a.clients} client processes)"
    print(f"{label:<40}{res['send_msg_per_s']:>12,.0f}")
    label = f"gRPC receive+ack ({a.clients} processes)"
    print(f"{label:<40}{res['receive_ack_msg_per_s']:>12,.0f}")
    print(f"{'facade Broker.send, one process':<40}{facade:>12,.0f}")
    ss = res["server_cpu_us_per_msg_send"] or 0
    sr = res["server_cpu_us_per_msg_receive_ack"] or 0
    cs = res["client_cpu_us_per_msg_send"]
    cr = res["client_cpu_us_per_msg_receive_ack"]
    print(
        f"CPU per message, server/clients: send {ss:,.0f}/{cs:,.0f} us, "
        f"receive+ack {sr:,.0f}/{cr:,.0f} us"
    )
    cpus = res["cpus"] or 1
    # Upper bounds from the measured CPU: all cores doing only client work (a
    # server costing nothing), and all cores shared by clients and server.
    res["ceiling_send_clients_only"] = cpus / (cs / 1e6) if cs else None
    res["ceiling_send_with_server"] = cpus / ((cs + ss) / 1e6) if cs + ss else None
    res["ceiling_receive_ack_clients_only"] = cpus / (cr / 1e6) if cr else None
    c_send = res["ceiling_send_clients_only"] or 0
    c_both = res["ceiling_send_with_server"] or 0
    c_recv = res["ceiling_receive_ack_clients_only"] or 0
    print(
        f"CPU ceiling on {cpus} cores: send {c_send:,.0f} msg/s if the server cost "
        f"nothing, {c_both:,.0f} with it; receive+ack {c_recv:,.0f} if the server "
        "cost nothing"
    )
    print(
        f"messages {sent} sent ({res['send_errors']} errors), {received} received "
        f"({res['ack_errors']} ack errors); load {res['load_average']}"
    )
    out = a.json or f"{tmp}/grpc-bench.json"
    Path(out).write_text(json.dumps(res, indent=2))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
