"""The gRPC endpoint beside a bare grpcio echo server, RabbitMQ and NATS JetStream.

    .venv/bin/python bench/grpc.py [--clients 1,4] [--messages 20000]
        [--body 1024] [--window 256] [--peers rabbitmq,nats]
        [--endpoint HOST:PORT --server-pid PID | --workers N]
        [--fronts python,native] [--rate 1000 --rate-seconds 10] [--rounds 1]
        [--json out.json]

Peers need ``pip install -r requirements-bench.txt`` (pika, nats-py).

For each client count N, in one run and measured the same way:

* endpoint: ``python -m broker_core serve [--workers N]`` on a temporary
  store (server CPU: the supervisor's and every worker's; or
  ``--endpoint`` with ``--server-pid`` to measure its CPU; without a pid the
  server CPU is "not measured"); N processes of the official RocketMQ Python
  client send ``--messages`` in total with ``send_async`` (at most ``--window``
  in flight each), then N SimpleConsumers receive (batches of 32) and
  acknowledge each message.
  With ``--fronts python,native`` (the default) this is done for each
  front, one endpoint each on a store of its own, in the same run: ``serve
  --front python`` (grpc.aio, table row "endpoint") and ``serve --front
  native`` (the C++ front of ``make native``, row "native"; skipped with a
  note when it is not built). The native front's ratios over the echo are
  printed beside the issue's goal (#30: <= 0.35).
* fixed rate (``--rate``, default 1,000 msg/s, ``--rate-seconds`` 10): after
  the client counts, one official client sends at that rate to each endpoint
  and to Apache RocketMQ (``send_async`` at each message's due time): the
  rate reached, p50/p99/max latency from due time to answer, server CPU.
* echo_native (with the native front): the echo's handlers behind the
  native front and its Python adapter: what the front costs without the
  broker's handlers.
* echo: a bare ``grpc.aio`` server with one generic unary handler that returns
  its request, called ``--messages`` times with a ``--body`` payload by N
  processes with the same window: the floor for any Python gRPC server here;
  and its server-streaming twin, which streams the body back 32 times a call
  (a ReceiveMessage's shape), for the floor of a received and acknowledged
  message: one streamed message plus one call.
* rabbitmq (127.0.0.1:5672, guest/guest, pika): a durable queue of its own;
  N publishers send persistent messages and commit a transaction every
  ``--window`` messages (durable on the broker when the commit returns, as a
  window of confirms would be); N consumers with prefetch ``--window``
  acknowledge each message.
* nats (127.0.0.1:4222, nats-py): a JetStream file stream of its own; N
  publishers keep ``--window`` acknowledged publishes in flight; N pull
  consumers fetch batches of 32 and acknowledge each message.

With ``--rounds N`` each client count is measured N times, every system
once a round in the order above, and each figure reported is the median
over the rounds (the rounds themselves are printed and kept in the JSON):
on a shared machine a message's cost moves by half between runs minutes
apart, so a ratio of two phases run once each carries that noise.

Server CPU is the server process's utime+stime from /proc (the endpoint or
echo process this script started; RabbitMQ's ``beam.smp`` and ``nats-server``
found by name) over each phase, divided by the messages; client CPU is each
client process's own CPU over its send or receive loop only (start-up
excluded). What this script creates on the peers (queue, stream) is deleted at
the end; their server-wide settings are never touched. The temporary store is
removed. Prints a table and the ratios the issue asks for (endpoint server CPU
per message sent and received+acked over the echo server's per call) and
writes JSON.
"""

from __future__ import annotations

import os
import sys

# This file is named grpc.py: keep its directory off sys.path so that
# ``import grpc`` finds the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ECHO_METHOD = "/bench.Echo/Echo"
ECHO_STREAM_METHOD = "/bench.Echo/Stream"
#: messages a receive asks for (the SimpleConsumer calls of rmq_recv)
BATCH = 32
#: a receive's long poll: Apache RocketMQ's proxy holds a poll at least 5 s
#: (grpcClientConsumerMinLongPollingTimeoutMillis) and refuses one whose
#: deadline is shorter than that; the same for both RocketMQs
LONG_POLL_S = 5
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
NATS_URL = "nats://127.0.0.1:4222"


# -- client workers (each in its own process) ------------------------------------
def rmq_send(ep: str, topic: str, n: int, body: int, window: int) -> dict:
    from concurrent.futures import wait

    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    p = Producer(ClientConfiguration(ep, Credentials()), (topic,))
    p.startup()
    payload = b"x" * body
    inflight: set = set()
    errors = 0
    cpu0, t0 = time.process_time(), time.time()
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
    t1, cpu1 = time.time(), time.process_time()
    p.shutdown()
    return {
        "done": n - errors,
        "errors": errors,
        "t0": t0,
        "t1": t1,
        "cpu_s": cpu1 - cpu0,
    }


def rmq_rate(ep: str, topic: str, rate: int, seconds: float, body: int) -> dict:
    """Send at a fixed ``rate`` for ``seconds`` (``send_async`` at its due
    times, whatever the answers): each send's latency, from its due time to
    its answer, so a server that falls behind shows it."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    p = Producer(ClientConfiguration(ep, Credentials()), (topic,))
    p.startup()
    payload = b"x" * body
    latencies: list[float] = []
    errors = [0]
    n = int(rate * seconds)
    futures = []
    cpu0, t0 = time.process_time(), time.perf_counter()

    def answered(due: float):
        def done(f) -> None:
            if f.exception() is not None:
                errors[0] += 1
            else:
                latencies.append(time.perf_counter() - due)

        return done

    for i in range(n):
        due = t0 + i / rate
        wait_s = due - time.perf_counter()
        if wait_s > 0:
            time.sleep(wait_s)
        m = Message()
        m.topic = topic
        m.body = payload
        f = p.send_async(m)
        f.add_done_callback(answered(due))
        futures.append(f)
    for f in futures:
        try:
            f.result(timeout=30)
        except Exception:  # noqa: BLE001 - counted by its callback
            pass
    t1, cpu1 = time.perf_counter(), time.process_time()
    p.shutdown()
    latencies.sort()

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(
            latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3, 2
        )

    return {
        "done": len(latencies),
        "errors": errors[0],
        "t0": t0,
        "t1": t1,
        "cpu_s": cpu1 - cpu0,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(latencies[-1] * 1e3, 2) if latencies else None,
    }


def rmq_first(ep: str, topic: str, deadline_s: float) -> dict:
    """Send one message, again and again until it is accepted: when it was."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    end = time.time() + deadline_s
    tries = 0
    while time.time() < end:
        tries += 1
        p = None
        try:
            p = Producer(
                ClientConfiguration(ep, Credentials(), request_timeout=2), (topic,)
            )
            p.startup()
            m = Message()
            m.topic = topic
            m.body = b"first"
            p.send(m)
            return {"accepted_at": time.time(), "tries": tries}
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
        finally:
            if p is not None:
                try:
                    p.shutdown()
                except Exception:  # noqa: BLE001
                    pass
    return {"accepted_at": None, "tries": tries}


def _simple_consumer(ep: str, topic: str, group: str):
    """A started SimpleConsumer of ``group`` on ``topic`` (every message), with
    the same settings for both RocketMQs."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    c = SimpleConsumer(
        ClientConfiguration(ep, Credentials(), request_timeout=10),
        group,
        {topic: FilterExpression("*")},
        await_duration=LONG_POLL_S,
    )
    c.startup()
    return c


def rmq_join(ep: str, topic: str, group: str) -> dict:
    """A consumer of ``group`` asks once and leaves: the group exists, and its
    position is the queues' start, before anything is sent (Apache RocketMQ
    starts a group it has never seen at the queues' end)."""
    c = _simple_consumer(ep, topic, group)
    # Apache RocketMQ answers a receive that comes before the client's
    # settings reached it with an internal error (a NullPointerException).
    time.sleep(1.5)
    try:
        c.receive(BATCH, 30)
    except Exception:  # noqa: BLE001 - nothing there yet
        pass
    c.shutdown()
    return {"done": 0, "errors": 0, "t0": 0, "t1": 0, "cpu_s": 0}


def rmq_recv(ep: str, topic: str, group: str, total: int, deadline_s: float) -> dict:
    from concurrent.futures import ThreadPoolExecutor, wait

    c = _simple_consumer(ep, topic, group)
    pool = ThreadPoolExecutor(16)
    got = empty = errors = 0
    acks = []
    cpu0, t0 = time.process_time(), time.time()
    t_last = t0
    while time.time() - t0 < deadline_s and got < total:
        try:
            msgs = c.receive(BATCH, 30)
        except Exception:  # noqa: BLE001 - "no new message" after a long poll
            errors += 1
            msgs = []
        if not msgs:
            empty += 1
            if empty >= 2 and got:
                break
            continue
        empty = 0
        # SimpleConsumer.ack_async (5.1.2) returns None: acks are pipelined on
        # a thread pool with the blocking ack instead.
        acks += [pool.submit(c.ack, m) for m in msgs]
        got += len(msgs)
        t_last = time.time()
    t_end = time.time()
    wait(acks)
    # The phase ends with this consumer's last message and its acks, not with
    # the empty long polls that tell it the others took the rest.
    t1 = t_last + (time.time() - t_end) if got else time.time()
    cpu1 = time.process_time()
    ack_errors = sum(1 for f in acks if f.exception() is not None)
    c.shutdown()
    return {"done": got, "errors": ack_errors, "t0": t0, "t1": t1, "cpu_s": cpu1 - cpu0}


async def echo(request: bytes, context) -> bytes:
    """The echo servers' unary handler (grpcio's and the native front's)."""
    return request


async def echo_stream(request: bytes, context):
    """A ReceiveMessage's shape: one request, BATCH (its first 4 bytes)
    messages streamed, each the rest of the request."""
    body = request[4:]
    for _ in range(int.from_bytes(request[:4], "big")):
        yield body


def echo_server(port: int) -> None:
    import asyncio

    import grpc

    async def main() -> None:
        handler = grpc.method_handlers_generic_handler(
            "bench.Echo",
            {
                "Echo": grpc.unary_unary_rpc_method_handler(echo),
                "Stream": grpc.unary_stream_rpc_method_handler(echo_stream),
            },
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("READY", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def echo_client(ep: str, n: int, body: int, window: int) -> dict:
    import asyncio

    import grpc

    async def main() -> dict:
        async with grpc.aio.insecure_channel(ep) as ch:
            call = ch.unary_unary(ECHO_METHOD)
            await call(b"warm-up")
            payload = b"x" * body
            sem = asyncio.Semaphore(window)
            errors = 0
            first: list[str] = []

            async def one() -> None:
                nonlocal errors
                async with sem:
                    try:
                        await call(payload)
                    except grpc.RpcError as exc:
                        errors += 1
                        if not first:
                            first.append(f"{exc.code()}: {exc.details()}")

            cpu0, t0 = time.process_time(), time.time()
            await asyncio.gather(*(one() for _ in range(n)))
            t1, cpu1 = time.time(), time.process_time()
            return {"done": n - errors, "errors": errors, "t0": t0, "t1": t1,
                    "cpu_s": cpu1 - cpu0, "first_error": first[:1]}  # fmt: skip

    return asyncio.run(main())


def echo_stream_client(ep: str, n: int, body: int, window: int) -> dict:
    """``n`` messages streamed by the echo server in calls of BATCH, as a
    SimpleConsumer receives them (at most ``window`` messages in flight)."""
    import asyncio

    import grpc

    async def main() -> dict:
        async with grpc.aio.insecure_channel(ep) as ch:
            call = ch.unary_stream(ECHO_STREAM_METHOD)
            request = BATCH.to_bytes(4, "big") + b"x" * body
            sem = asyncio.Semaphore(max(1, window // BATCH))
            got = errors = 0

            async def one() -> None:
                nonlocal got, errors
                async with sem:
                    try:
                        async for _ in call(request):
                            got += 1
                    except grpc.RpcError:
                        errors += 1

            cpu0, t0 = time.process_time(), time.time()
            await asyncio.gather(*(one() for _ in range(max(1, n // BATCH))))
            t1, cpu1 = time.time(), time.process_time()
            return {"done": got, "errors": errors, "t0": t0, "t1": t1,
                    "cpu_s": cpu1 - cpu0}  # fmt: skip

    return asyncio.run(main())


def _raw_channels(ep: str, k: int = 4) -> list:
    """``k`` channels on connections of their own (a local subchannel pool):
    spread over the workers of ``serve --workers N`` by the kernel."""
    import grpc

    opts = [("grpc.use_local_subchannel_pool", 1)]
    return [grpc.aio.insecure_channel(ep, options=opts) for _ in range(k)]


def raw_send(ep: str, topic: str, n: int, body: int, window: int) -> dict:
    """SendMessage calls over plain stubs: a client far cheaper than the
    official one, so that the server is what limits the rate."""
    import asyncio

    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    md = (("x-mq-client-id", f"raw-{os.getpid()}"),)
    msg = pb.Message(topic=pb.Resource(name=topic), body=b"x" * body)
    msg.system_properties.message_type = pb.NORMAL
    msg.system_properties.body_encoding = pb.IDENTITY
    req = spb.SendMessageRequest(messages=[msg])

    async def main() -> dict:
        chans = _raw_channels(ep)
        stubs = [sg.MessagingServiceStub(c) for c in chans]
        await stubs[0].QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=md
        )
        sem = asyncio.Semaphore(window)
        errors = 0

        async def one(i: int) -> None:
            nonlocal errors
            async with sem:
                try:
                    r = await stubs[i % len(stubs)].SendMessage(req, metadata=md)
                    errors += r.status.code != pb.OK
                except grpc.RpcError:  # CANCELLED now and then, as echo's
                    errors += 1

        cpu0, t0 = time.process_time(), time.time()
        await asyncio.gather(*(one(i) for i in range(n)))
        t1, cpu1 = time.time(), time.process_time()
        for c in chans:
            await c.close()
        return {"done": n - errors, "errors": errors, "t0": t0, "t1": t1,
                "cpu_s": cpu1 - cpu0}  # fmt: skip

    return asyncio.run(main())


def raw_recv(ep: str, topic: str, group: str, total: int, deadline_s: float) -> dict:
    """ReceiveMessage (batches of 32) and one AckMessage a message over plain
    stubs, one receive loop per channel."""
    import asyncio

    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sg

    md = (("x-mq-client-id", f"raw-{os.getpid()}"),)
    rq = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
    )
    rq.invisible_duration.FromSeconds(30)
    rq.long_polling_timeout.FromSeconds(1)

    async def main() -> dict:
        chans = _raw_channels(ep)
        got = errors = 0
        t0 = time.time()

        sem = asyncio.Semaphore(256)  # acks in flight, pipelined with receives
        pending: set = set()

        async def ack(stub, h: str) -> None:
            nonlocal errors
            try:
                r = await stub.AckMessage(
                    spb.AckMessageRequest(
                        group=rq.group,
                        topic=rq.message_queue.topic,
                        entries=[spb.AckMessageEntry(receipt_handle=h)],
                    ),
                    metadata=md,
                )
                errors += r.status.code != pb.OK
            except grpc.RpcError:
                errors += 1
            finally:
                sem.release()

        async def loop(stub) -> None:
            nonlocal got
            empty = 0
            while got < total and time.time() - t0 < deadline_s and empty < 2:
                try:
                    handles = [
                        item.message.system_properties.receipt_handle
                        async for item in stub.ReceiveMessage(
                            rq, metadata=md, timeout=5
                        )
                        if item.HasField("message")
                    ]
                except grpc.RpcError:
                    handles = []  # what it popped comes back (released)
                empty = 0 if handles else empty + 1
                got += len(handles)
                for h in handles:
                    await sem.acquire()
                    task = asyncio.ensure_future(ack(stub, h))
                    pending.add(task)
                    task.add_done_callback(pending.discard)

        cpu0 = time.process_time()
        await asyncio.gather(*(loop(sg.MessagingServiceStub(c)) for c in chans))
        await asyncio.gather(*list(pending))
        t1, cpu1 = time.time(), time.process_time()
        for c in chans:
            await c.close()
        return {"done": got, "errors": errors, "t0": t0, "t1": t1,
                "cpu_s": cpu1 - cpu0}  # fmt: skip

    return asyncio.run(main())


def rabbit_send(queue: str, n: int, body: int, window: int) -> dict:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    ch = conn.channel()
    ch.tx_select()
    props = pika.BasicProperties(delivery_mode=2)
    payload = b"x" * body
    cpu0, t0 = time.process_time(), time.time()
    for i in range(n):
        ch.basic_publish("", queue, payload, props)
        if (i + 1) % window == 0:
            ch.tx_commit()
    ch.tx_commit()
    t1, cpu1 = time.time(), time.process_time()
    conn.close()
    return {"done": n, "errors": 0, "t0": t0, "t1": t1, "cpu_s": cpu1 - cpu0}


def rabbit_recv(queue: str, total: int, window: int, deadline_s: float) -> dict:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=window)
    got = 0
    cpu0, t0 = time.process_time(), time.time()
    t1 = t0
    for method, _props, _body in ch.consume(queue, inactivity_timeout=1.0):
        if method is None:
            if got or time.time() - t0 > deadline_s:
                break
            continue
        ch.basic_ack(method.delivery_tag)
        got += 1
        t1 = time.time()
        if got >= total:
            break
    cpu1 = time.process_time()
    ch.cancel()
    conn.close()
    return {"done": got, "errors": 0, "t0": t0, "t1": t1, "cpu_s": cpu1 - cpu0}


def nats_send(subject: str, n: int, body: int, window: int) -> dict:
    import asyncio

    import nats

    async def main() -> dict:
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        payload = b"x" * body
        sem = asyncio.Semaphore(window)
        errors = 0

        async def one() -> None:
            nonlocal errors
            async with sem:
                try:
                    await js.publish(subject, payload)
                except Exception:  # noqa: BLE001
                    errors += 1

        cpu0, t0 = time.process_time(), time.time()
        await asyncio.gather(*(one() for _ in range(n)))
        t1, cpu1 = time.time(), time.process_time()
        await nc.close()
        return {"done": n - errors, "errors": errors, "t0": t0, "t1": t1,
                "cpu_s": cpu1 - cpu0}  # fmt: skip

    return asyncio.run(main())


def nats_recv(subject: str, durable: str, total: int, deadline_s: float) -> dict:
    import asyncio

    import nats
    from nats.errors import TimeoutError as NatsTimeout

    async def main() -> dict:
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        sub = await js.pull_subscribe(subject, durable)
        got = empty = 0
        cpu0, t0 = time.process_time(), time.time()
        t1 = t0
        while got < total and time.time() - t0 < deadline_s:
            try:
                msgs = await sub.fetch(32, timeout=1)
            except (TimeoutError, NatsTimeout):
                empty += 1
                if empty >= 2 and got:
                    break
                continue
            empty = 0
            for m in msgs:
                await m.ack()
            got += len(msgs)
            t1 = time.time()
        cpu1 = time.process_time()
        await nc.close()
        return {"done": got, "errors": 0, "t0": t0, "t1": t1, "cpu_s": cpu1 - cpu0}

    return asyncio.run(main())


WORKERS = {
    "rmq_send": (rmq_send, (str, str, int, int, int)),
    "rmq_recv": (rmq_recv, (str, str, str, int, float)),
    "rmq_first": (rmq_first, (str, str, float)),
    "rmq_rate": (rmq_rate, (str, str, int, float, int)),
    "rmq_join": (rmq_join, (str, str, str)),
    "echo_client": (echo_client, (str, int, int, int)),
    "echo_stream_client": (echo_stream_client, (str, int, int, int)),
    "raw_send": (raw_send, (str, str, int, int, int)),
    "raw_recv": (raw_recv, (str, str, str, int, float)),
    "rabbit_send": (rabbit_send, (str, int, int, int)),
    "rabbit_recv": (rabbit_recv, (str, int, int, float)),
    "nats_send": (nats_send, (str, int, int, int)),
    "nats_recv": (nats_recv, (str, str, int, float)),
}


# -- orchestration ---------------------------------------------------------------
def proc_cpu(pid: int | list[int] | None) -> float | None:
    """utime + stime of a process (or the sum over several: the supervisor
    and workers of ``serve --workers N``), in seconds; None if it cannot be
    read."""
    if pid is None:
        return None
    total = 0.0
    for one in pid if isinstance(pid, list) else [pid]:
        try:
            f = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None
    return total


def peak_rss_mb(pid: int | list[int] | None) -> float | None:
    """The peak resident set (VmHWM) of a process, or the sum over several, in
    MiB; None if it cannot be read."""
    if pid is None:
        return None
    total = 0
    for one in pid if isinstance(pid, list) else [pid]:
        try:
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            return None
    return round(total / 1024, 1)


def pid_of(command: str) -> int | None:
    """The pid of the (first) process named ``command``, from /proc."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == command:
                    return int(d.name)
            except OSError:
                continue
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_workers(store: Path, n: int) -> list[int]:
    """The pids of the ``n`` workers of ``serve --workers``, once all serve."""
    from broker_core.endpoint.workers import announced

    end = time.time() + 60
    while time.time() < end:
        up = announced(store)
        if len(up) == n:
            return [w["pid"] for w in up.values()]
        time.sleep(0.1)
    raise RuntimeError(f"{n} workers did not start")


def wait_port(port: int, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or (
                time.monotonic() > deadline
            ):
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.1)


def run_workers(name: str, args: list[list[object]], home: str) -> list[dict]:
    env = dict(os.environ, HOME=home)
    procs = [
        subprocess.Popen(
            [PY, os.path.abspath(__file__), "_worker", name, *map(str, a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=home,
        )  # fmt: skip
        for a in args
    ]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            raise RuntimeError(f"{name} worker failed: {stdout[-2000:]}")
        out.append(json.loads(line[-1][7:]))
    return out


def phase(
    name: str, args: list[list[object]], home: str, server_pid: int | list[int] | None
) -> dict:
    """Run one phase's workers; the rate, and server and client CPU per message."""
    c0 = proc_cpu(server_pid)
    rs = run_workers(name, args, home)
    c1 = proc_cpu(server_pid)
    done = sum(r["done"] for r in rs)
    span = max(r["t1"] for r in rs) - min(r["t0"] for r in rs)
    server = None if c0 is None or c1 is None else (c1 - c0) / max(1, done) * 1e6
    return {
        "messages": done,
        "errors": sum(r["errors"] for r in rs),
        "msg_per_s": round(done / span, 1) if span > 0 else None,
        "server_cpu_us_per_msg": None if server is None else round(server, 1),
        "client_cpu_us_per_msg": round(
            sum(r["cpu_s"] for r in rs) / max(1, done) * 1e6, 1
        ),
    }


def bench_endpoint(a, n: int, ep: str, spid: int | None, home: str) -> dict:
    topic = f"Bench{uuid.uuid4().hex[:8]}"
    per = a.messages // n
    kind = "raw" if a.raw else "rmq"
    if not a.raw:
        run_workers("rmq_join", [[ep, topic, f"G{topic}"]], home)
    send = phase(f"{kind}_send", [[ep, topic, per, a.body, a.window]] * n, home, spid)
    recv = phase(
        f"{kind}_recv",
        [[ep, topic, f"G{topic}", send["messages"], 120]] * n,
        home,
        spid,
    )
    return {"send": send, "receive_ack": recv}


def fixed_rate(a, ep: str, pid, home: str, make_topic=None) -> dict:
    """One official client sending ``--rate`` messages a second for
    ``--rate-seconds``: the rate reached, p50/p99 send latency, server CPU."""
    topic = f"Rate{uuid.uuid4().hex[:8]}"
    if make_topic is not None:
        make_topic(topic)
    c0 = proc_cpu(pid)
    r = run_workers("rmq_rate", [[ep, topic, a.rate, a.rate_seconds, a.body]], home)[0]
    c1 = proc_cpu(pid)
    span = r["t1"] - r["t0"]
    return {
        "target_msg_per_s": a.rate,
        "messages": r["done"],
        "errors": r["errors"],
        "msg_per_s": round(r["done"] / span, 1) if span > 0 else None,
        "p50_ms": r["p50_ms"],
        "p99_ms": r["p99_ms"],
        "max_ms": r["max_ms"],
        "server_cpu_us_per_msg": None
        if c0 is None or c1 is None
        else round((c1 - c0) / max(1, r["done"]) * 1e6, 1),
    }


def first_send_s(ep: str, t0: float, home: str, topic: str = "") -> float | None:
    """Seconds from ``t0`` (the server's start) to its first accepted send."""
    topic = topic or f"First{uuid.uuid4().hex[:8]}"
    r = run_workers("rmq_first", [[ep, topic, 300]], home)[0]
    return None if r["accepted_at"] is None else round(r["accepted_at"] - t0, 2)


def start_apache(a, home: str):
    """Apache RocketMQ (NameServer + proxy in local mode) on free ports, its
    start-up time measured to the first accepted send."""
    sys.path.insert(0, str(ROOT))
    from bench.peers.rocketmq import ApacheRocketMQ, ensure_jars

    ensure_jars(a.apache_version)  # a first download is no part of start-up
    rmq = ApacheRocketMQ(
        a.apache_version, grpc_port=free_port(), namesrv_port=free_port(),
        broker_port=free_port(), remoting_port=free_port(), heap=a.apache_heap,
    )  # fmt: skip
    t0 = time.time()
    rmq.start()
    try:
        # Its proxy answers "no such topic" for a topic it was asked about
        # before it existed: the topic is made first (the admin helper, ~1 s,
        # counted in the start-up). Ours makes a topic on its first route query.
        topic = f"First{uuid.uuid4().hex[:8]}"
        rmq.create_topic(topic, "NORMAL", 8)
        ready = first_send_s(rmq.grpc_endpoint, t0, home, topic)
    except Exception:
        rmq.stop()
        raise
    return rmq, ready


def bench_apache(a, n: int, rmq, home: str) -> dict:
    topic = f"Bench{uuid.uuid4().hex[:8]}"
    rmq.create_topic(topic, "NORMAL", 8)
    rmq.create_group(f"G{topic}")
    pids = rmq.pids()
    ep = rmq.grpc_endpoint
    run_workers("rmq_join", [[ep, topic, f"G{topic}"]], home)
    per = a.messages // n
    send = phase("rmq_send", [[ep, topic, per, a.body, a.window]] * n, home, pids)
    recv = phase(
        "rmq_recv", [[ep, topic, f"G{topic}", send["messages"], 120]] * n, home, pids
    )
    return {"send": send, "receive_ack": recv}


def echo_native_server(port: int) -> None:
    """The echo's two handlers behind the endpoint's native front and its
    adapter (``native_front.NativeServer``): what the front costs alone."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from broker_core.endpoint.native_front import NativeServer
    from broker_core.endpoint.server import Method

    def same(b: bytes) -> bytes:
        return b

    async def main() -> None:
        server = NativeServer(
            [
                Method("Echo", ECHO_METHOD, "unary", echo, same, same),
                Method(
                    "Stream",
                    ECHO_STREAM_METHOD,
                    "server_stream",
                    echo_stream,
                    same,
                    same,
                ),
            ],
            16 << 20,
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await asyncio.Event().wait()

    asyncio.run(main())


def bench_echo(a, n: int, ep: str, spid: int, home: str) -> dict:
    per = a.messages // n
    args = [[ep, per, a.body, a.window]] * n
    return {
        "call": phase("echo_client", args, home, spid),
        "streamed": phase("echo_stream_client", args, home, spid),
    }


def bench_rabbit(a, n: int, home: str) -> dict:
    import pika

    pid = pid_of("beam.smp")
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    try:
        conn.channel().queue_declare(queue, durable=True)
        per = a.messages // n
        send = phase("rabbit_send", [[queue, per, a.body, a.window]] * n, home, pid)
        recv = phase(
            "rabbit_recv", [[queue, send["messages"], a.window, 120]] * n, home, pid
        )
    finally:
        conn.channel().queue_delete(queue)
        conn.close()
    return {"send": send, "receive_ack": recv}


def bench_nats(a, n: int, home: str) -> dict:
    import asyncio

    import nats

    pid = pid_of("nats-server")
    stream = f"BENCH_{uuid.uuid4().hex[:8]}"
    subject = f"bench.{stream.lower()}"

    async def admin(create: bool) -> None:
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        if create:
            await js.add_stream(name=stream, subjects=[subject], storage="file")
        else:
            await js.delete_stream(stream)
        await nc.close()

    asyncio.run(admin(True))
    try:
        per = a.messages // n
        send = phase("nats_send", [[subject, per, a.body, a.window]] * n, home, pid)
        recv = phase(
            "nats_recv", [[subject, "bench", send["messages"], 120]] * n, home, pid
        )
    finally:
        asyncio.run(admin(False))
    return {"send": send, "receive_ack": recv}


def available(peer: str) -> str | None:
    """None if ``peer`` can be measured here, else why not."""
    module, port = {"rabbitmq": ("pika", 5672), "nats": ("nats", 4222)}[peer]
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed (pip install -r requirements-bench.txt)"
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError as exc:
        return f"nothing answers on 127.0.0.1:{port} ({exc})"
    return None


def native_built() -> bool:
    import importlib.util

    sys.path.insert(0, str(ROOT))
    return importlib.util.find_spec("broker_core._native") is not None


def start_endpoint(a, tmp: str, front: str):
    """``serve --front FRONT`` on a store of its own: address, pid(s), process."""
    port = free_port()
    ep = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", f"{tmp}/store-{front}",
         "--listen", ep, "--no-redis-relay", "--workers", str(a.workers),
         "--front", front],
        cwd=ROOT, stdout=open(f"{tmp}/server-{front}.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_port(port, server)
    spid: int | list[int] = server.pid
    if a.workers > 1:
        spid = [server.pid, *wait_workers(Path(tmp) / f"store-{front}", a.workers)]
    return ep, spid, server


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_worker":
        fn, types = WORKERS[argv[1]]
        r = fn(*(t(v) for t, v in zip(types, argv[2:], strict=True)))
        print("RESULT " + json.dumps(r), flush=True)
        os._exit(0)
    if argv and argv[0] == "_echo_server":
        echo_server(int(argv[1]))
        return 0
    if argv and argv[0] == "_echo_native_server":
        echo_native_server(int(argv[1]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", default="1,4", help="client process counts")
    ap.add_argument("--messages", type=int, default=20000, help="per phase")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument(
        "--peers",
        default="apache,rabbitmq,nats",
        help="apache: Apache RocketMQ started here (bench/peers/rocketmq.py); "
        "rabbitmq, nats: servers answering on their default ports (make "
        "bench-peers starts private ones)",
    )
    ap.add_argument("--apache-version", default="5.3.3")
    ap.add_argument("--apache-heap", default="512m", help="the broker JVM's -Xmx")
    ap.add_argument("--endpoint", default=None, help="an endpoint already running")
    ap.add_argument("--server-pid", type=int, default=None)
    ap.add_argument(
        "--raw",
        action="store_true",
        help="endpoint clients are plain gRPC stubs (4 connections each), not "
        "the official client: the server, not the clients, limits the rate",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="serve the endpoint with --workers N (server CPU: all its processes)",
    )
    ap.add_argument(
        "--fronts",
        default="python,native",
        help="the endpoint's fronts to measure, each its own server (serve "
        "--front F); native is skipped when not built",
    )
    ap.add_argument(
        "--rate",
        type=int,
        default=1000,
        help="the fixed-rate phase: one client sends this many messages a "
        "second to each endpoint and to Apache RocketMQ (0: none)",
    )
    ap.add_argument("--rate-seconds", type=float, default=10.0)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each client count this many times, every system once a "
        "round (the endpoint, the peers and the echo servers interleaved), and "
        "report each figure's median: on a shared machine the cost of a "
        "message moves between runs minutes apart",
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    counts = [int(x) for x in a.clients.split(",") if x]
    peers = [p for p in a.peers.split(",") if p]
    tmp = tempfile.mkdtemp(prefix="grpc-bench-")
    started: list[subprocess.Popen] = []
    rmq = None
    res: dict = {
        "body_bytes": a.body,
        "messages_per_phase": a.messages,
        "window": a.window,
        "workers": a.workers,
        "raw_clients": a.raw,
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "runs": {},
        "skipped": {},
    }
    try:
        ep, spid = a.endpoint, a.server_pid
        #: front -> (address, server pid(s)) of the endpoints measured
        endpoints: dict[str, tuple[str, int | list[int] | None]] = {}
        if ep is not None:
            endpoints["endpoint"] = (ep, spid)
        else:
            for front in [f for f in a.fronts.split(",") if f]:
                if front == "native" and not native_built():
                    res["skipped"]["native"] = "not built (make native)"
                    print("native: skipped, not built (make native)", flush=True)
                    continue
                t_start = time.time()
                ep, spid, server = start_endpoint(a, tmp, front)
                started.append(server)
                key = "endpoint" if front == "python" else front
                endpoints[key] = (ep, spid)
                res.setdefault("startup_s", {})[key] = first_send_s(ep, t_start, tmp)
        if "apache" in peers:
            try:
                rmq, ready = start_apache(a, tmp)
                res.setdefault("startup_s", {})["apache"] = ready
                res["apache"] = {"version": a.apache_version, "heap": a.apache_heap}
            except Exception as exc:  # noqa: BLE001 - no Java, no Maven Central
                res["skipped"]["apache"] = f"did not start: {exc}"
                print(f"apache: skipped, {exc}", flush=True)
        echo_port = free_port()
        echo = subprocess.Popen(
            [PY, os.path.abspath(__file__), "_echo_server", str(echo_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started.append(echo)
        wait_port(echo_port, echo)
        echo_native = None
        if "native" in endpoints:
            echo_native_port = free_port()
            echo_native = subprocess.Popen(
                [PY, os.path.abspath(__file__), "_echo_native_server",
                 str(echo_native_port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            started.append(echo_native)
            wait_port(echo_native_port, echo_native)
        for peer in peers:
            if peer == "apache":
                continue
            why = available(peer)
            if why:
                res["skipped"][peer] = why
                print(f"{peer}: skipped, {why}", flush=True)
        for n in counts:
            run: dict = {"load_before": [round(x, 2) for x in os.getloadavg()]}
            print(f"-- {n} client process(es)", flush=True)
            rounds: list[dict] = []
            for i in range(a.rounds):
                one: dict = {}
                for key, (e_ep, e_pid) in endpoints.items():
                    one[key] = bench_endpoint(a, n, e_ep, e_pid, tmp)
                if rmq is not None:
                    one["apache"] = bench_apache(a, n, rmq, tmp)
                one["echo"] = bench_echo(a, n, f"127.0.0.1:{echo_port}", echo.pid, tmp)
                if echo_native is not None:
                    one["echo_native"] = bench_echo(
                        a, n, f"127.0.0.1:{echo_native_port}", echo_native.pid, tmp
                    )
                if "rabbitmq" in peers and "rabbitmq" not in res["skipped"]:
                    one["rabbitmq"] = bench_rabbit(a, n, tmp)
                if "nats" in peers and "nats" not in res["skipped"]:
                    one["nats"] = bench_nats(a, n, tmp)
                rounds.append(one)
                if a.rounds > 1:
                    print(f"   round {i + 1}: {_round_line(one)}", flush=True)
            run.update(_median_run(rounds))
            if a.rounds > 1:
                run["rounds"] = rounds
            echo_us = run["echo"]["call"]["server_cpu_us_per_msg"]
            if "echo_native" in run:
                native_us = run["echo_native"]["call"]["server_cpu_us_per_msg"]
                run["ratio_echo_native_vs_echo"] = (
                    round(native_us / echo_us, 2) if native_us and echo_us else None
                )
            streamed_us = run["echo"]["streamed"]["server_cpu_us_per_msg"]
            # What gRPC alone costs the echo server for what a received and
            # acknowledged message costs the endpoint in calls: a streamed
            # message plus an AckMessage call.
            run["floor_receive_ack_vs_echo"] = (
                round((echo_us + streamed_us) / echo_us, 2)
                if echo_us and streamed_us is not None
                else None
            )
            for kind, target in (("send", 1.3), ("receive_ack", 1.5)):
                for key in endpoints:
                    us = run[key][kind]["server_cpu_us_per_msg"]
                    prefix = "" if key == "endpoint" else f"{key}_"
                    run[f"ratio_{prefix}{kind}_vs_echo"] = (
                        round(us / echo_us, 2) if us is not None and echo_us else None
                    )
                run[f"target_{kind}"] = target
            # Issue #30: the native front at most 0.35x the echo, both ways.
            run["target_native"] = 0.35
            run["load_after"] = [round(x, 2) for x in os.getloadavg()]
            res["runs"][str(n)] = run
            print_run(n, run)
        if a.rate > 0:
            res["fixed_rate"] = {}
            targets = list(endpoints.items())
            for key, (e_ep, e_pid) in targets:
                res["fixed_rate"][key] = fixed_rate(a, e_ep, e_pid, tmp)
            if rmq is not None:
                res["fixed_rate"]["apache"] = fixed_rate(
                    a,
                    rmq.grpc_endpoint,
                    rmq.pids(),
                    tmp,
                    lambda t: rmq.create_topic(t, "NORMAL", 8),
                )
            print(f"-- fixed rate: one client, {a.rate} msg/s for {a.rate_seconds} s")
            print(
                f"{'':<12}{'msg/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
                f"{'server us/msg':>15}"
            )
            for key, r in res["fixed_rate"].items():
                print(
                    f"{key:<12}{r['msg_per_s'] or 0:>10,.0f}{r['p50_ms'] or 0:>10}"
                    f"{r['p99_ms'] or 0:>10}{r['max_ms'] or 0:>10}"
                    f"{r['server_cpu_us_per_msg'] or 0:>15}"
                    + (f"  ({r['errors']} errors)" if r["errors"] else "")
                )
        res["peak_rss_mb"] = {
            **{k: peak_rss_mb(pid) for k, (_ep, pid) in endpoints.items()},
            "echo": peak_rss_mb(echo.pid),
            "echo_native": peak_rss_mb(echo_native.pid) if echo_native else None,
            "apache": peak_rss_mb(rmq.pids()) if rmq is not None else None,
            "rabbitmq": peak_rss_mb(pid_of("beam.smp")),
            "nats": peak_rss_mb(pid_of("nats-server")),
        }
        print(f"peak RSS (MiB): {res['peak_rss_mb']}")
        print(f"start to first accepted send (s): {res.get('startup_s')}")
    finally:
        if rmq is not None:
            rmq.stop()
        for p in started:
            p.send_signal(signal.SIGTERM)
        for p in started:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average before {res['load_before']}, after {res['load_after']}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
        print(f"JSON: {a.json}")
    else:
        print(json.dumps(res))
    return 0


def _median_run(rounds: list[dict]) -> dict:
    """Per system and phase over the rounds: messages and errors summed,
    every other figure the median of the rounds that have it."""
    out: dict = {}
    for key, phases in rounds[0].items():
        out[key] = {}
        for ph, figures in phases.items():
            merged = {}
            for f in figures:
                vals = [r[key][ph][f] for r in rounds if r[key][ph][f] is not None]
                if f in ("messages", "errors"):
                    merged[f] = sum(vals)
                else:
                    merged[f] = round(statistics.median(vals), 1) if vals else None
            out[key][ph] = merged
    return out


def _round_line(one: dict) -> str:
    """One round's server CPU per message, and the native front's over the
    echo's in that round (the comparison the rounds are for)."""
    parts = []
    for key, phases in one.items():
        us = "/".join(
            "-"
            if v["server_cpu_us_per_msg"] is None
            else f"{v['server_cpu_us_per_msg']:.0f}"
            for v in phases.values()
        )
        parts.append(f"{key} {us}")
    echo = one.get("echo", {}).get("call", {}).get("server_cpu_us_per_msg")
    if "native" in one and echo:
        ratios = ", ".join(
            f"{ph} {v['server_cpu_us_per_msg'] / echo:.2f}"
            for ph, v in one["native"].items()
            if v["server_cpu_us_per_msg"] is not None
        )
        parts.append(f"native / echo: {ratios}")
    return "; ".join(parts)


def print_run(n: int, run: dict) -> None:
    def fmt(v, spec=",.0f"):
        return "not measured" if v is None else format(v, spec)

    print(
        f"{'':<12}{'phase':<13}{'msg/s':>10}{'server us/msg':>15}{'client us/msg':>15}"
    )
    for system in (
        "endpoint",
        "native",
        "apache",
        "echo",
        "echo_native",
        "rabbitmq",
        "nats",
    ):
        for kind, r in run.get(system, {}).items():
            print(
                f"{system:<12}{kind:<13}{fmt(r['msg_per_s']):>10}"
                f"{fmt(r['server_cpu_us_per_msg']):>15}"
                f"{fmt(r['client_cpu_us_per_msg']):>15}"
                + (f"  ({r['errors']} errors)" if r["errors"] else "")
            )
    print(
        "gRPC alone for a received+acked message (a streamed message and a "
        f"call) / echo per call: {fmt(run['floor_receive_ack_vs_echo'], '.2f')}"
    )
    for kind in ("send", "receive_ack"):
        ratio = run.get(f"ratio_{kind}_vs_echo")
        print(
            f"endpoint server CPU per message {kind} / echo per call: "
            f"{fmt(ratio, '.2f')} (target <= {run[f'target_{kind}']})"
        )
        if f"ratio_native_{kind}_vs_echo" in run:
            print(
                f"native front server CPU per message {kind} / echo per call: "
                f"{fmt(run[f'ratio_native_{kind}_vs_echo'], '.2f')} "
                f"(issue #30 goal <= {run['target_native']})"
            )
    if run.get("ratio_echo_native_vs_echo") is not None:
        print(
            "the native front alone (echo handlers) per call / grpcio echo per "
            f"call: {run['ratio_echo_native_vs_echo']:.2f}"
        )
    print(f"load average before {run['load_before']}, after {run['load_after']}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
