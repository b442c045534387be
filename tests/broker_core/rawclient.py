"""A client speaking the RocketMQ 5 protocol with plain stubs, as the
official Python client does on the wire: a Telemetry stream (with or without
producer settings) whose check-back commands are collected, heartbeats, and
transactional halves."""

from __future__ import annotations

import queue
import threading

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc


class RawClient:
    """One client id speaking the protocol with plain stubs."""

    def __init__(self, endpoint: str, client_id: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self.md = (("x-mq-client-id", client_id),)
        self.outbox: queue.Queue = queue.Queue()
        self.checks: queue.Queue = queue.Queue()
        self._stream = None

    def open_telemetry(self, topics: list[str] | None) -> None:
        """Open a Telemetry stream; with ``topics`` send producer settings first."""
        if topics is not None:
            settings = pb.Settings(client_type=pb.PRODUCER)
            settings.publishing.topics.extend(pb.Resource(name=t) for t in topics)
            self.outbox.put(spb.TelemetryCommand(settings=settings))

        def requests():
            while True:
                item = self.outbox.get()
                if item is None:
                    return
                yield item

        self._stream = self.stub.Telemetry(requests(), metadata=self.md)

        def read():
            try:
                for cmd in self._stream:
                    if cmd.HasField("recover_orphaned_transaction_command"):
                        rc = cmd.recover_orphaned_transaction_command
                        self.checks.put(rc.transaction_id)
            except grpc.RpcError:
                pass

        threading.Thread(target=read, daemon=True).start()

    def heartbeat(self) -> None:
        self.stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=self.md
        )

    def send_half(self, topic: str, body: bytes) -> str:
        msg = pb.Message(topic=pb.Resource(name=topic), body=body)
        msg.system_properties.message_type = pb.TRANSACTION
        msg.system_properties.body_encoding = pb.IDENTITY
        res = self.stub.SendMessage(
            spb.SendMessageRequest(messages=[msg]), metadata=self.md
        )
        assert res.status.code == pb.OK, res.status
        return res.entries[0].transaction_id

    def close(self) -> None:
        self.outbox.put(None)
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()
