"""Routes, assignments, heartbeats and the Telemetry stream."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.endpoint.clients import ClientInfo
from broker_core.endpoint.retrytopic import DLQ_PREFIX
from broker_core.endpoint.wire import (
    ALL_TYPES,
    C,
    client_id_of,
    status,
)
from broker_core.errors import (
    BrokerError,
    ReplicaReadOnlyError,
    RouteUnavailableError,
    TopicExistsError,
    ValidationError,
)
from broker_core.metadata import MessageType
from broker_core.validation import (
    validate_group,
    validate_read_topic,
)

if TYPE_CHECKING:
    from broker_core.broker import Broker
    from broker_core.endpoint.clients import ClientTable
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.guard import WriteGuard
    from broker_core.endpoint.threads import Threads

log = logging.getLogger(__name__)


def _endpoints(addresses: list[str]) -> pb.Endpoints:
    """``host:port`` strings as the route's endpoints."""
    out = pb.Endpoints(scheme=pb.IPv4)
    for a in addresses:
        host, _, port = a.rpartition(":")
        out.addresses.append(pb.Address(host=host, port=int(port)))
    return out


#: the message types a topic of each type takes, as routes advertise them
_ACCEPTS: dict[str, list[int]] = {
    MessageType.NORMAL: [pb.NORMAL],
    MessageType.FIFO: [pb.FIFO],
    MessageType.DELAY: [pb.DELAY],
    MessageType.TRANSACTION: [pb.TRANSACTION],
}


def _queue(
    topic: str,
    qid: int,
    permission: int,
    broker: str,
    endpoints: pb.Endpoints,
    accepts: list[int] | None = None,
) -> pb.MessageQueue:
    """A route's queue; the clients use only broker id 0 (masters)."""
    return pb.MessageQueue(
        topic=pb.Resource(name=topic),
        id=qid,
        permission=permission,
        broker=pb.Broker(name=broker, id=0, endpoints=endpoints),
        accept_message_types=ALL_TYPES if accepts is None else accepts,
    )


def _enum_name(enum: Any, value: int) -> str:
    """The name of a protobuf enum value; a number a newer (or hostile)
    client sent that this protocol does not know reads as its number."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


class Routing:
    """Routes, assignments, heartbeats and the Telemetry stream."""

    def __init__(
        self,
        *,
        cfg: EndpointConfig,
        broker: Broker,
        clients: ClientTable,
        guard: WriteGuard,
        threads: Threads,
        ports: set[int],
    ) -> None:
        self.cfg = cfg
        self.broker = broker
        self.store = broker.store
        self.max_body = self.store.config.max_message_size
        self.clients = clients
        self.guard = guard
        self.threads = threads
        #: the ports this endpoint listens on (plaintext and TLS), filled as
        #: they are bound
        self.ports = ports

    def endpoints(self, asked: pb.Endpoints | None = None) -> pb.Endpoints:
        """The broker address for routes: the access point the client used when
        it is one of ours (plaintext or TLS port), else the listen address."""
        if asked is not None and asked.addresses:
            a = asked.addresses[0]
            if a.port in self.ports:
                out = pb.Endpoints()
                out.CopyFrom(asked)
                return out
        return pb.Endpoints(
            scheme=pb.IPv4,
            addresses=[pb.Address(host=self.cfg.host, port=self.cfg.port)],
        )

    def queue(
        self,
        topic: str,
        qid: int = 0,
        asked: pb.Endpoints | None = None,
        permission: int = pb.READ_WRITE,
    ) -> pb.MessageQueue:
        node = self.guard.node
        name = node.cfg.name if node is not None else "broker-a"
        return _queue(
            topic, qid, permission, name, self.endpoints(asked), self.accepts(topic)
        )

    def accepts(self, topic: str) -> list[int] | None:
        """The message types the topic takes (None: every type)."""
        if not self.cfg.topic_type_check:
            return None
        cfg = self.store.topics.topics.get(topic)
        return _ACCEPTS.get(cfg.message_type) if cfg is not None else None

    def route(self, topic: str, asked: pb.Endpoints | None) -> list[pb.MessageQueue]:
        """The topic's queues: in a cluster every serving node's (from the
        route registry), else this store's."""
        if self.guard.node is not None:
            queues = self.cluster_route(topic, asked)
            if queues:
                return queues
            if not self.guard.writable():
                # The registry is away and this node takes no writes (a slave,
                # a master without its controller lease: perhaps the one cut
                # off from the cluster): its own queues would take clients'
                # sends to a node that refuses them until their next route
                # refresh. The client keeps the route it has, or asks another
                # node of its access point.
                raise RouteUnavailableError(
                    "the route registry is unreachable from this node, which "
                    "takes no writes: ask another node"
                )
            # Not registered yet (just created) or the registry is away: what
            # this node has, so that its own clients keep working.
        return self.local_route(topic, asked)

    def cluster_route(
        self, topic: str, asked: pb.Endpoints | None, readable_only: bool = False
    ) -> list[pb.MessageQueue]:
        """The cluster's queues of ``topic``, each with its node's endpoints
        (this node's as the client asked for it)."""
        node = self.guard.node
        try:
            entries = node.route(topic)
        except Exception as exc:  # noqa: BLE001 - registry away
            log.warning("route registry unavailable: %s", exc)
            return []
        several = asked is not None and len(asked.addresses) > 1
        names: dict[str, list[str]] = {}
        if several:
            # Every live node of a queue's broker name, its serving node
            # first: the client's channel passes to a slave when the master
            # dies, which forwards to the master until it is promoted itself
            # (``forward.py``); the client sees the promoted master at once,
            # not at its next route refresh. Only the nodes of that one name:
            # whichever of them the channel picks, the message is stored by
            # that name's master, and the receipt names it truly.
            try:
                for n in node.nodes():
                    names.setdefault(n.name, []).extend(
                        a for a in n.endpoints if a not in names.get(n.name, ())
                    )
            except Exception as exc:  # noqa: BLE001 - registry away
                log.warning("route registry unavailable: %s", exc)
        out = []
        for e in entries:
            perm = {6: pb.READ_WRITE, 4: pb.READ, 2: pb.WRITE}[e.perm]
            if readable_only and not e.perm & 4:
                continue
            # By address, not by name and id: a fenced old master has the
            # promoted one's name and id, and must route clients to it.
            mine = node.cfg.advertise in e.node.endpoints
            if mine and (asked is None or len(asked.addresses) <= 1):
                # The one address the client reached this node by.
                endpoints = self.endpoints(asked)
            else:
                # Another node's, or this node's when the client's access point
                # lists several nodes: its own advertised address, so that a
                # send for this node's queue is stored here and the receipt
                # names the node that stored it (the whole list sent broker-a's
                # sends to whichever node the client's channel picked).
                endpoints = _endpoints(
                    e.node.endpoints
                    + [
                        a
                        for a in names.get(e.node.name, ())
                        if a not in e.node.endpoints
                    ]
                )
            out.append(
                _queue(
                    topic, e.queue_id, perm, e.node.name, endpoints, self.accepts(topic)
                )
            )
        return out

    def local_route(
        self, topic: str, asked: pb.Endpoints | None
    ) -> list[pb.MessageQueue]:
        """This store's queues of the topic, as RocketMQ's route has them: queue
        ids below both counts are read-write, the rest read-only or write-only."""
        cfg = self.store.topics.topics.get(topic)
        reads = cfg.read_queue_nums if cfg else 1
        writes = cfg.write_queue_nums if cfg else 1
        out = []
        for qid in range(max(reads, writes, 1)):
            perm = (
                pb.READ_WRITE
                if qid < reads and qid < writes
                else pb.READ
                if qid < reads
                else pb.WRITE
            )
            out.append(self.queue(topic, qid, asked, perm))
        return out

    async def QueryRoute(self, request, context):  # noqa: N802
        topic = request.topic.name
        try:
            validate_read_topic(topic)
            if not self.store.has_topic(topic):
                # A dead-letter topic is made by the broker when a group's
                # first message dies, never by a client's route (any name
                # made one, with four queues); Apache answers 40402 too.
                if not self.store.config.auto_create_topic or topic.startswith(
                    DLQ_PREFIX
                ):
                    return spb.QueryRouteResponse(
                        status=status(
                            C.TOPIC_NOT_FOUND, f"topic {topic[:200]!r} does not exist"
                        )
                    )
                try:
                    await self.threads.on_writer(self.broker.create_topic, topic)
                except TopicExistsError:
                    pass  # created concurrently
                except ReplicaReadOnlyError:
                    # A slave makes no topics: its master's route, if any.
                    return await self._slave_route(topic, request.endpoints)
                except BrokerError as exc:
                    # A full disk, say: the topic was not made, and a route to
                    # it would only fail the client's first send.
                    return spb.QueryRouteResponse(
                        status=status(int(exc.grpc_code), f"topic {topic!r}: {exc}")
                    )
                if self.guard.node is not None:
                    await asyncio.get_running_loop().run_in_executor(
                        None, self.guard.node.announce
                    )
        except ValidationError as exc:
            return spb.QueryRouteResponse(status=status(C.ILLEGAL_TOPIC, str(exc)))
        try:
            if self.guard.node is not None:
                # The registry is across the network: off the event loop.
                loop = asyncio.get_running_loop()
                queues = await loop.run_in_executor(
                    None, self.route, topic, request.endpoints
                )
            else:
                queues = self.route(topic, request.endpoints)
        except RouteUnavailableError as exc:
            return spb.QueryRouteResponse(status=status(int(exc.grpc_code), str(exc)))
        return spb.QueryRouteResponse(status=status(C.OK), message_queues=queues)

    async def _slave_route(
        self, topic: str, asked: pb.Endpoints | None
    ) -> spb.QueryRouteResponse:
        """The route of a topic this slave does not have: the cluster's (its
        master made it), else TOPIC_NOT_FOUND saying where to make it."""
        queues: list[pb.MessageQueue] = []
        if self.guard.node is not None:
            queues = await asyncio.get_running_loop().run_in_executor(
                None, self.cluster_route, topic, asked
            )
        if queues:
            return spb.QueryRouteResponse(status=status(C.OK), message_queues=queues)
        return spb.QueryRouteResponse(
            status=status(
                C.TOPIC_NOT_FOUND,
                f"topic {topic[:200]!r} does not exist, and this node is a "
                "slave, which makes no topics: create it on its master",
            )
        )

    async def QueryAssignment(self, request, context):  # noqa: N802
        topic = request.topic.name
        try:
            # An assignment is a consumer group's: an empty or illegal group
            # name is refused as on ReceiveMessage (it was answered OK).
            validate_group(request.group.name)
            validate_read_topic(topic)
        except ValidationError as exc:
            return spb.QueryAssignmentResponse(
                status=status(int(exc.grpc_code), str(exc))
            )
        if not self.store.has_topic(topic):
            return spb.QueryAssignmentResponse(status=status(C.TOPIC_NOT_FOUND))
        # One assignment per broker: a Receive pops from every queue of the
        # topic (pop consumption), so consumers never need a rebalance. In a
        # cluster, one for each node serving the topic.
        queues = [self.queue(topic, 0, request.endpoints)]
        if self.guard.node is not None:
            by_broker: dict[str, pb.MessageQueue] = {}
            found = await asyncio.get_running_loop().run_in_executor(
                None, self.cluster_route, topic, request.endpoints, True
            )
            for q in found:
                by_broker.setdefault(q.broker.name, q)
            queues = list(by_broker.values()) or queues
        return spb.QueryAssignmentResponse(
            status=status(C.OK),
            assignments=[pb.Assignment(message_queue=q) for q in queues],
        )

    async def Heartbeat(self, request, context):  # noqa: N802
        if request.client_type not in pb.ClientType.values():
            return spb.HeartbeatResponse(
                status=status(
                    C.UNRECOGNIZED_CLIENT_TYPE,
                    f"unknown client type {request.client_type}",
                )
            )
        c = self.clients.touch(context)
        if request.client_type:
            c.client_type = pb.ClientType.Name(request.client_type)
        if request.group.name:
            c.group = request.group.name
        self.clients.dirty = True
        return spb.HeartbeatResponse(status=status(C.OK))

    async def NotifyClientTermination(self, request, context):  # noqa: N802
        cid = client_id_of(context)
        c = self.clients.get(cid)
        if c is not None:
            c.online = False
            c.queue = None
            self.clients.dirty = True
        return spb.NotifyClientTerminationResponse(status=status(C.OK))

    def settings_reply(self, c: ClientInfo, s: pb.Settings) -> spb.TelemetryCommand:
        out = pb.Settings()
        out.CopyFrom(s)
        out.metric.Clear()
        out.metric.on = False
        c.client_type = _enum_name(pb.ClientType, s.client_type)
        c.language = (
            _enum_name(pb.Language, s.user_agent.language) if s.user_agent else ""
        )
        c.version = s.user_agent.version
        if s.client_type == pb.PRODUCER:
            c.topics = [t.name for t in s.publishing.topics]
            out.publishing.max_body_size = self.max_body
            out.publishing.validate_message_type = True
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = 3
            bp.exponential_backoff.initial.FromMilliseconds(10)
            bp.exponential_backoff.max.FromMilliseconds(1000)
            bp.exponential_backoff.multiplier = 2.0
        elif s.client_type in (
            pb.PUSH_CONSUMER,
            pb.SIMPLE_CONSUMER,
            pb.LITE_PUSH_CONSUMER,
            pb.LITE_SIMPLE_CONSUMER,
        ):
            sub = out.subscription
            c.group = s.subscription.group.name
            c.topics = [e.topic.name for e in s.subscription.subscriptions]
            groups = self.store.groups
            sub.fifo = groups.is_fifo(c.group)
            sub.receive_batch_size = self.cfg.max_batch
            if s.client_type in (
                pb.PUSH_CONSUMER,
                pb.LITE_PUSH_CONSUMER,
            ) or not sub.HasField("long_polling_timeout"):
                sub.long_polling_timeout.FromMilliseconds(self.cfg.long_polling_ms)
            bp = out.backoff_policy
            bp.Clear()
            bp.max_attempts = groups.max_attempts(c.group, self.cfg.max_attempts)
            for ms in self.cfg.consumer_backoff_ms:
                d = bp.customized_backoff.next.add()
                d.FromMilliseconds(ms)
        self.clients.dirty = True
        return spb.TelemetryCommand(status=status(C.OK), settings=out)

    async def Telemetry(self, request_iterator, context):  # noqa: N802
        c = self.clients.touch(context)
        q: asyncio.Queue[Any] = asyncio.Queue()
        c.queue = q
        self.clients.dirty = True

        async def reader() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        q.put_nowait(self.settings_reply(c, cmd.settings))
                    c.last_heartbeat = time.time()
            except Exception:  # noqa: BLE001 - stream cancelled
                pass
            finally:
                q.put_nowait(None)

        task = asyncio.get_running_loop().create_task(reader())
        try:
            while True:
                item = await q.get()
                if item is None:
                    break
                yield item
        finally:
            task.cancel()
            if c.queue is q:
                c.queue = None
                c.online = False
            self.clients.dirty = True
