"""Where a SendMessage call's server CPU goes: gRPC itself or the endpoint.

    .venv/bin/python bench/grpc_floor.py [--calls 10000] [--rounds 2] [--json out.json]

One plain ``grpc.aio`` client (one channel, 256 calls in flight, 1 KiB bodies)
calls, in turn and in the same run, servers that each do a little more of what
the endpoint does for one SendMessage call of the official client:

* ``echo``: a generic handler that returns its bytes (``bench/grpc.py``'s echo);
* ``echo+metadata``: the same, the client sending the official Python client's
  eight headers (``x-mq-*``, ``authorization``; a new request id each call);
* ``protobuf``: the request parsed as a ``SendMessageRequest`` and a canned
  ``SendMessageResponse`` serialized, with the headers;
* ``protobuf+metadata read``: and the handler reads the call's metadata, as
  the endpoint does for the client id;
* ``endpoint``: ``python -m broker_core serve`` on a temporary store (removed
  afterwards), the real SendMessage: checks, the store's append, the answer;
* ``grpclib ...``: the echo and ``protobuf+metadata read`` servers again on
  grpclib (pure-Python HTTP/2 on asyncio) instead of grpcio's asyncio server,
  when grpclib is installed (``requirements-bench.txt``): what another Python
  gRPC server stack would save a call.

Server CPU is the server process's utime+stime from /proc over the calls,
divided by the calls. The difference between the last two rows is what the
endpoint's own work costs a call; the rest is gRPC's, which no handler can cut.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402

ROOT = os.path.dirname(_HERE)
WINDOW = 256
METHOD = "/bench.Floor/Call"
SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
KINDS = ("echo", "protobuf", "protobuf+metadata read")


def serve(kind: str, port: int) -> None:
    async def main() -> None:
        if kind == "echo":

            async def echo(req: bytes, ctx) -> bytes:
                return req

            h = grpc.unary_unary_rpc_method_handler(echo)
        else:
            resp = spb.SendMessageResponse(status=pb.Status(code=pb.OK, message="OK"))
            resp.entries.add(
                status=pb.Status(code=pb.OK), message_id="01" + "0" * 30, offset=5
            )
            read_md = kind == "protobuf+metadata read"

            async def send(req, ctx):
                if read_md:
                    dict(ctx.invocation_metadata() or ())
                return resp

            h = grpc.unary_unary_rpc_method_handler(
                send, spb.SendMessageRequest.FromString,
                spb.SendMessageResponse.SerializeToString,
            )  # fmt: skip
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Floor", {"Call": h}),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("READY", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def serve_grpclib(kind: str, port: int) -> None:
    """``serve``'s twin on grpclib: the same answers to the same calls."""
    from grpclib.const import Cardinality, Handler
    from grpclib.encoding.base import CodecBase
    from grpclib.server import Server

    class Codec(CodecBase):
        __content_subtype__ = "proto"

        def encode(self, message, message_type):  # type: ignore[no-untyped-def]
            if isinstance(message, bytes):
                return message
            return message.SerializeToString()

        def decode(self, data, message_type):  # type: ignore[no-untyped-def]
            return data if message_type is bytes else message_type.FromString(data)

    resp = spb.SendMessageResponse(status=pb.Status(code=pb.OK, message="OK"))
    resp.entries.add(status=pb.Status(code=pb.OK), message_id="01" + "0" * 30, offset=5)
    read_md = kind == "protobuf+metadata read"

    class Floor:
        async def call(self, stream) -> None:  # type: ignore[no-untyped-def]
            req = await stream.recv_message()
            if read_md:
                dict(stream.metadata)
            await stream.send_message(req if kind == "echo" else resp)

        def __mapping__(self):  # type: ignore[no-untyped-def]
            t = bytes if kind == "echo" else spb.SendMessageRequest
            return {METHOD: Handler(self.call, Cardinality.UNARY_UNARY, t, bytes)}

    async def main() -> None:
        server = Server([Floor()], codec=Codec())
        await server.start("127.0.0.1", port)
        print("READY", flush=True)
        await server.wait_closed()

    asyncio.run(main())


def metadata() -> tuple[tuple[str, str], ...]:
    """The headers the official Python client sends with every call."""
    return (
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "5.0.0"),
        ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ")),
        ("x-mq-request-id", str(uuid.uuid4())),
        ("x-mq-client-id", "bench@1@0@floor"),
        ("x-mq-namespace", ""),
        ("authorization", "MQv2-HMAC-SHA1 Credential=, SignedHeaders="
         "x-mq-date-time, Signature=" + "0" * 40),
    )  # fmt: skip


def request(topic: str) -> bytes:
    m = pb.Message(topic=pb.Resource(name=topic), body=b"x" * 1024)
    sp = m.system_properties
    sp.message_type = pb.NORMAL
    sp.body_encoding = pb.IDENTITY
    sp.message_id = "01" + uuid.uuid4().hex.upper()
    sp.tag = "T"
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.GetCurrentTime()
    return spb.SendMessageRequest(messages=[m]).SerializeToString()


def call_many(ep: str, method: str, n: int, with_md: bool, proto: bool) -> int:
    """``n`` calls, WINDOW in flight; returns the calls that failed."""

    async def main() -> int:
        errors = 0
        async with grpc.aio.insecure_channel(ep) as ch:
            call = ch.unary_unary(method)
            sem = asyncio.Semaphore(WINDOW)

            async def one() -> None:
                nonlocal errors
                body = request("BenchFloor") if proto else b"x" * 1024
                async with sem:
                    try:
                        await call(body, metadata=metadata() if with_md else None)
                    except grpc.RpcError:
                        errors += 1

            await one()
            await asyncio.gather(*(one() for _ in range(n)))
        return errors

    return asyncio.run(main())


def _load_grpc_bench():
    """bench/grpc.py as a module (its name would shadow grpcio's): its port
    and /proc helpers, as bench/cluster.py uses them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_grpc", os.path.join(_HERE, "grpc.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bg = _load_grpc_bench()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_serve":
        serve(argv[1], int(argv[2]))
        return 0
    if argv and argv[0] == "_serve_grpclib":
        serve_grpclib(argv[1], int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="grpc-floor-")
    procs: dict[str, tuple[subprocess.Popen, int]] = {}
    res: dict = {
        "calls": a.calls,
        "window": WINDOW,
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "rows": [],
    }
    try:
        try:
            import grpclib  # noqa: F401

            grpclib_kinds = ["echo", "protobuf+metadata read"]
        except ImportError:
            grpclib_kinds = []
            print("grpclib is not installed: no grpclib rows")
        servers = [("_serve", k, k) for k in KINDS]
        servers += [("_serve_grpclib", k, f"grpclib {k}") for k in grpclib_kinds]
        for how, kind, name in servers:
            port = bg.free_port()
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), how, kind, str(port)],
                stdout=subprocess.DEVNULL,
            )
            procs[name] = (p, port)
        port = bg.free_port()
        p = subprocess.Popen(
            [sys.executable, "-m", "broker_core", "serve", "--store", f"{tmp}/store",
             "--listen", f"127.0.0.1:{port}", "--no-redis-relay"],
            cwd=ROOT, stdout=open(f"{tmp}/server.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs["endpoint"] = (p, port)
        for p, port in procs.values():
            bg.wait_port(port, p)
        plan = [
            ("echo", "echo", METHOD, False, False),
            ("echo+metadata", "echo", METHOD, True, False),
            ("protobuf", "protobuf", METHOD, True, True),
            ("protobuf+metadata read", "protobuf+metadata read", METHOD, True, True),
            ("endpoint", "endpoint", SEND, True, True),
        ]
        if grpclib_kinds:
            plan += [
                ("grpclib echo", "grpclib echo", METHOD, False, False),
                ("grpclib echo+metadata", "grpclib echo", METHOD, True, False),
                ("grpclib protobuf+md read", "grpclib protobuf+metadata read",
                 METHOD, True, True),
            ]  # fmt: skip
        print(f"{'server':<26}{'calls/s':>10}{'server us/call':>16}")
        for r in range(a.rounds):
            for label, kind, method, with_md, proto in plan:
                p, port = procs[kind]
                c0, t0 = bg.proc_cpu(p.pid), time.time()
                errors = call_many(f"127.0.0.1:{port}", method, a.calls, with_md, proto)
                t1, c1 = time.time(), bg.proc_cpu(p.pid)
                row = {
                    "round": r + 1,
                    "server": label,
                    "errors": errors,
                    "calls_per_s": round(a.calls / (t1 - t0), 1),
                    "server_us_per_call": round((c1 - c0) / a.calls * 1e6, 1),
                }
                res["rows"].append(row)
                failed = f"  ({errors} errors)" if errors else ""
                print(
                    f"{label:<26}{row['calls_per_s']:>10,.0f}"
                    f"{row['server_us_per_call']:>16,.0f}{failed}",
                    flush=True,
                )
    finally:
        for p, _ in procs.values():
            p.send_signal(signal.SIGTERM)
        for p, _ in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average before {res['load_before']}, after {res['load_after']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
