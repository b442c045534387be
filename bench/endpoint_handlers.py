"""The gRPC endpoint's own work per message, without gRPC.

    .venv/bin/python bench/endpoint_handlers.py [--messages 4000] [--batch 32]
        [--profile]

In one process, over a temporary store: the send path a SendMessage call runs
(protobuf message -> checks -> batched append -> result entry, as on the event
loop's fast path) and the receive path a ReceiveMessage plus its acks run (pop
a batch of 32, build the protobuf messages with receipt handles, apply the
acks). Prints microseconds per message; ``--profile`` adds a cProfile of each.
What ``bench/grpc.py`` measures beyond these is gRPC's per-call work.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

# bench/ holds grpc.py: keep it off sys.path so that "import grpc" finds grpcio.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402

from broker_core import Broker, Message  # noqa: E402
from broker_core.endpoint.config import EndpointConfig  # noqa: E402
from broker_core.endpoint.server import Endpoint  # noqa: E402


def _profiled(fn, enabled: bool):
    if not enabled:
        return fn(), ""
    prof = cProfile.Profile()
    prof.enable()
    out = fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
    return out, text.getvalue()


def send_path(ep: Endpoint, n: int, batch: int, profile: bool) -> tuple[float, str]:
    def message(i: int) -> pb.Message:
        m = pb.Message(topic=pb.Resource(name="BenchSend"), body=b"x" * 1024)
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.message_id = f"01AABBCCDDEEFF0000{i:016X}"
        return m

    msgs = [message(i) for i in range(n + 1)]
    ep.sending._send_requests([([msgs[0]], "bench")], False)  # topic created

    def run() -> float:
        t0 = time.perf_counter()
        for i in range(1, n + 1, batch):
            # ``batch`` SendMessage calls of one message, stored together (the
            # calls of one hand-over of the native front: one append)
            ep.sending._send_requests(
                [([m], "bench") for m in msgs[i : i + batch]], False
            )
        return time.perf_counter() - t0

    seconds, text = _profiled(run, profile)
    return seconds / n * 1e6, text


def receive_path(ep: Endpoint, broker: Broker, n: int, batch: int, profile: bool):
    topic = f"BenchRecv{batch}"
    broker.create_topic(topic, read_queue_nums=4)
    for start in range(0, n, 500):
        broker.send_batch(
            [Message(topic, b"x" * 1024) for _ in range(min(500, n - start))]
        )

    def run() -> tuple[float, int]:
        done = 0
        t0 = time.perf_counter()
        while done < n:
            got, pbs, _cut = ep.consuming._pop("G", topic, 32, 30_000, "*", "TAG", None)
            if not got:
                break
            # One AckMessage call a message, as the official clients do;
            # ``batch`` of them in one transaction (one hand-over's acks).
            calls = [
                ("G", topic, [spb.ReceiveMessageResponse.FromString(m).message
                              .system_properties.receipt_handle])
                for m in pbs
            ]  # fmt: skip
            for i in range(0, len(calls), batch):
                for errors in ep.pop.ack_all(calls[i : i + batch], wait=False):
                    assert not any(errors), errors
            done += len(got)
        return time.perf_counter() - t0, done

    (seconds, done), text = _profiled(run, profile)
    return seconds / max(1, done) * 1e6, text


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument(
        "--batch", type=int, default=32, help="calls stored or acked together"
    )
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-handlers-"))
    try:
        with Broker.open(str(tmp / "store")) as broker:
            ep = Endpoint(broker, EndpointConfig(port=0))
            try:
                for batch in (1, args.batch):
                    send_us, send_prof = send_path(
                        ep, args.messages, batch, args.profile
                    )
                    recv_us, recv_prof = receive_path(
                        ep, broker, args.messages, batch, args.profile
                    )
                    print(f"calls stored/acked together: {batch}")
                    print(f"  send path (checks, append, result): {send_us:.1f} us/msg")
                    print(
                        f"  receive path (pop 32, encode, acks): {recv_us:.1f} us/msg"
                    )
                    if args.profile:
                        print(send_prof, recv_prof, sep="\n")
            finally:
                ep.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
