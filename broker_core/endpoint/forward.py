"""A node that takes no writes passes its clients' writes and receives to its
broker name's current master, as Apache RocketMQ's proxy in cluster mode
passes each call to the broker that serves it.

A client's route can name a node that takes no writes:

- the old master, fenced by the controller or rejoined as a slave after a
  failover, until the client's next route refresh (every 30 s);
- a slave, when the client reached the cluster through an access point that
  lists several nodes: its queues then list every node of their broker name
  (``routing.cluster_route``) and its channel may pick any of them.

Such a node answers ``SendMessage``, ``EndTransaction``, ``RecallMessage``,
``ReceiveMessage``, ``AckMessage``, ``ChangeInvisibleDuration`` and
``ForwardMessageToDeadLetterQueue`` with the master's own answer. The master
authenticates the client's signature itself (the headers travel unchanged),
validates, stores, deduplicates a retry and, as a SYNC_MASTER, waits for its
in-sync slaves as for a call of its own. Receipts stay true: a node forwards
only to the master of its own broker name, the one the client's queue names.

One hop at most: a forwarded call carries ``x-mq-forwarded-by`` and is never
forwarded again nor served from a replica: a node that takes no writes
answers it FORBIDDEN, so two nodes that each take the other for the master do
not pass a call between them, and a client that sets the header itself gets
no receive or ack served by a slave. With no master elsewhere
(the registry lists none, or this node is it) a call is served here as before:
a slave reads what it replicated, and refuses writes.

Forwarding uses the master's advertised (plaintext) address on the cluster's
own network, as the HA link does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.endpoint.wire import C, status

log = logging.getLogger(__name__)

#: the RPCs a node that takes no writes forwards to its master
FORWARDED = frozenset(
    {
        "SendMessage",
        "EndTransaction",
        "RecallMessage",
        "ReceiveMessage",
        "AckMessage",
        "ChangeInvisibleDuration",
        "ForwardMessageToDeadLetterQueue",
    }
)
#: the header a forwarded call carries: the identity of the node it came from
FORWARDED_BY = "x-mq-forwarded-by"
#: ``target``'s answer for a forwarded call that reached a node taking no
#: writes: refused (``refusal``)
REFUSE = "refuse"
#: headers gRPC sets itself on the forwarded call
_OWN_HEADERS = frozenset({"user-agent", "te", "content-type", "grpc-timeout"})
#: a call without a deadline of its own waits at most this long for the master
DEFAULT_TIMEOUT_S = 30.0
_SERVICE = "/apache.rocketmq.v2.MessagingService/"


class Forwarder:
    """Passes calls to the master of ``node``'s broker name (module doc)."""

    def __init__(self, node: Callable[[], Any], max_message: int) -> None:
        #: the endpoint's ClusterNode (None: not in a cluster), set after start
        self._node = node
        self.max_message = max_message
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._lock = threading.Lock()
        #: calls forwarded, and calls the master did not answer
        self.forwarded = 0
        self.failed = 0

    @property
    def node(self) -> Any:
        return self._node()

    def local(self, method: str) -> bool:
        """Whether ``method`` is served here without asking anyone (not a
        forwarded RPC, or this node takes writes): ``target`` is None."""
        if method not in FORWARDED:
            return True
        node = self.node
        return node is None or bool(node.may_act)

    async def target(self, method: str, context: Any) -> str | None:
        """The master's address to pass ``method`` to, or None: serve it here
        (not a forwarded RPC, this node takes writes, already forwarded once,
        or no master elsewhere)."""
        if self.local(method):
            return None
        if any(k == FORWARDED_BY for k, _ in context.invocation_metadata() or ()):
            # Forwarded here (or a client claiming so): never served from
            # this node's replica nor passed on again.
            return REFUSE
        # The registry is across the network: off the event loop.
        master = await asyncio.get_running_loop().run_in_executor(
            None, self.node.master_elsewhere
        )
        return master.endpoints[0] if master is not None else None

    def refusal(self, resp_cls: Any) -> Any:
        """The answer to a forwarded call that reached a node that takes no
        writes: its sender took this node for the master."""
        return resp_cls(
            status=status(
                C.FORBIDDEN,
                f"a call forwarded to this node, which takes no writes: "
                f"{self.node.cfg.name}'s master is elsewhere, try again",
            )
        )

    def _channel(self, address: str) -> grpc.aio.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = grpc.aio.insecure_channel(
                    address,
                    options=[
                        ("grpc.max_receive_message_length", self.max_message),
                        ("grpc.max_send_message_length", self.max_message),
                    ],
                )
                self._channels[address] = channel
            return channel

    def _metadata(self, context: Any) -> list[tuple[str, str | bytes]]:
        md = [
            (k, v)
            for k, v in context.invocation_metadata() or ()
            if k not in _OWN_HEADERS and not k.startswith((":", "grpc-"))
        ]
        md.append((FORWARDED_BY, self.node.identity))
        return md

    @staticmethod
    def _timeout(context: Any) -> float:
        left = context.time_remaining()
        if left is None:
            return DEFAULT_TIMEOUT_S
        # A little short of the client's own deadline: it hears why.
        left = min(float(left), 3600.0)
        return max(0.05, left - min(0.5, left / 10))

    def _failed(self, address: str, exc: grpc.aio.AioRpcError) -> pb.Status:
        self.failed += 1
        log.warning(
            "forwarding to %s's master at %s failed: %s",
            self.node.cfg.name, address, exc.code().name,
        )  # fmt: skip
        code = (
            C.PROXY_TIMEOUT
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            else C.HA_NOT_AVAILABLE
        )
        return status(
            code,
            f"this node takes no writes and {self.node.cfg.name}'s master at "
            f"{address} did not answer ({exc.code().name}): try again",
        )

    async def unary(
        self, address: str, method: str, request: Any, resp_cls: Any, context: Any
    ) -> Any:
        """The master's answer to a unary call (its failure as a status)."""
        self.forwarded += 1
        call = self._channel(address).unary_unary(
            _SERVICE + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=resp_cls.FromString,
        )
        try:
            return await call(
                request,
                metadata=self._metadata(context),
                timeout=self._timeout(context),
            )
        except grpc.aio.AioRpcError as exc:
            return resp_cls(status=self._failed(address, exc))

    async def stream(
        self, address: str, method: str, request: Any, resp_cls: Any, context: Any
    ) -> AsyncIterator[Any]:
        """The master's answers to a server-streaming call (a long poll): each
        passed on as it comes; a client that goes away cancels the master's."""
        self.forwarded += 1
        call = self._channel(address).unary_stream(
            _SERVICE + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=resp_cls.FromString,
        )(request, metadata=self._metadata(context), timeout=self._timeout(context))
        answered = False
        try:
            async for out in call:
                answered = True
                yield out
        except grpc.aio.AioRpcError as exc:
            if not answered:
                yield resp_cls(status=self._failed(address, exc))
        finally:
            call.cancel()

    async def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
