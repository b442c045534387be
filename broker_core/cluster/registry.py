"""The cluster's route registry: RocketMQ's NameServer soft state, in Redis.

Each node (one store and its gRPC endpoint) registers itself every
``interval`` seconds: its broker name and id (0 for a master, 1+ for a slave,
as in RocketMQ), role, endpoints, admin address and the queues of its topics.
A registration is one Redis key with an expiry (``expiry_s``): a node that
stops heartbeating drops out of the routes when its key expires, without
anybody having to notice it died. Readers (every node's ``QueryRoute``, the
console, the clients' route refresh through any node) see only live keys.

Routes follow RocketMQ's rules for the official clients: they use only
queues of broker id 0 (``docs/grpc.md``). A broker name whose master is gone
but whose slave is alive is routed to the slave, shown as id 0 with read
permission only: consumers keep reading what it replicated, producers send
to the other masters.

Keys (``<prefix>`` is ``rmq:<cluster>``): ``<prefix>:node:<name>:<id>`` holds
the node's JSON with a TTL; ``<prefix>:nodes`` is the set of registered
``<name>:<id>`` (members whose key expired are skipped and removed by
readers); ``<prefix>:events`` is a pub/sub channel announcing every change of
role or topics, so nodes refresh their routes at once instead of at their
next poll.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

log = logging.getLogger(__name__)

MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
ROLES = (*MASTER_ROLES, "SLAVE")
# RocketMQ's permission bits (PermName): 4 read, 2 write.
PERM_READ, PERM_WRITE = 4, 2


@dataclass
class TopicQueues:
    """One topic's queues on a node."""

    read: int
    write: int
    perm: int = PERM_READ | PERM_WRITE


@dataclass
class NodeInfo:
    """What a node registers."""

    cluster: str
    name: str
    broker_id: int = 0
    role: str = "ASYNC_MASTER"
    endpoints: list[str] = field(default_factory=list)  # "host:port" for clients
    admin: str = ""  # the admin API's URL (console, operators)
    ha: str = ""  # "host:port" where slaves follow this master's log
    topics: dict[str, TopicQueues] = field(default_factory=dict)
    #: Log positions: the master's end of log, a slave's replicated end.
    log_end: int = 0
    #: For a slave: the master's log end it last heard of (replication lag).
    master_log_end: int = 0
    heartbeat_ms: int = 0
    started_ms: int = 0
    #: A master's newest epoch (``ha.epochs``: number and id; 0 and "" for a
    #: store without epochs): which of two masters of one name is the newer.
    epoch: int = 0
    epoch_id: str = ""
    #: A master's slaves as it sees them: ``node``, ``address``, ``lag_bytes``,
    #: ``stalled_s`` (None: acking), ``connected`` (False: disconnected within
    #: the last ten minutes, at ``disconnected_ms``)
    slaves: list[dict[str, Any]] = field(default_factory=list)
    #: The newest tails this store cut on rejoining as a slave (ASYNC loss):
    #: ``from``, ``to``, ``messages``, ``client_messages``, ``cut_at_ms``, ``file``
    cut_tails: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.name}:{self.broker_id}"

    @property
    def is_master(self) -> bool:
        return self.role in MASTER_ROLES

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> NodeInfo:
        data = json.loads(text)
        data["topics"] = {
            t: TopicQueues(**q) for t, q in data.get("topics", {}).items()
        }
        # What a newer node registers beyond these fields is not for us.
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class RouteEntry:
    """One queue of a topic's route: the node that serves it and its
    permission as the clients must see it."""

    node: NodeInfo
    queue_id: int
    perm: int


class RouteRegistry:
    """Register nodes and read the cluster's routes (see the module doc)."""

    def __init__(
        self,
        redis_url: str,
        cluster: str,
        expiry_s: float = 10.0,
        client: Any = None,
    ) -> None:
        import redis

        if not cluster:
            raise ValueError("a cluster needs a name")
        self.cluster = cluster
        self.expiry_s = expiry_s
        self.prefix = f"rmq:{cluster}"
        self.redis = client or redis.Redis.from_url(
            redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
        )

    # --- writing ------------------------------------------------------------

    def register(self, node: NodeInfo) -> bool:
        """Store ``node``'s registration for ``expiry_s``; return whether its
        role or topics changed since the last one (then announced)."""
        if node.cluster != self.cluster:
            raise ValueError(f"node of cluster {node.cluster!r} in {self.cluster!r}")
        if node.role not in ROLES:
            raise ValueError(f"unknown role {node.role!r} (one of {', '.join(ROLES)})")
        node.heartbeat_ms = int(time.time() * 1000)
        key = f"{self.prefix}:node:{node.key}"
        pipe = self.redis.pipeline()
        pipe.get(key)
        pipe.set(key, node.to_json(), px=int(self.expiry_s * 1000))
        pipe.sadd(f"{self.prefix}:nodes", node.key)
        before = pipe.execute()[0]
        changed = before is None or _shape(NodeInfo.from_json(before)) != _shape(node)
        if changed:
            self.redis.publish(f"{self.prefix}:events", node.key)
        return changed

    def unregister(self, name: str, broker_id: int) -> None:
        """Drop a node at once (a clean stop)."""
        member = f"{name}:{broker_id}"
        pipe = self.redis.pipeline()
        pipe.delete(f"{self.prefix}:node:{member}")
        pipe.srem(f"{self.prefix}:nodes", member)
        pipe.publish(f"{self.prefix}:events", member)
        pipe.execute()

    # --- reading ------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """Every live node, by broker name then id."""
        found = self.redis.smembers(f"{self.prefix}:nodes")
        members = sorted(m.decode() if isinstance(m, bytes) else m for m in found)
        if not members:
            return []
        values = self.redis.mget([f"{self.prefix}:node:{m}" for m in members])
        live, gone = [], []
        for member, value in zip(members, values, strict=True):
            if value is None:
                gone.append(member)
            else:
                live.append(NodeInfo.from_json(value))
        if gone:  # expired: forget the names too
            self.redis.srem(f"{self.prefix}:nodes", *gone)
        return sorted(live, key=lambda n: (n.name, n.broker_id))

    def serving(self, nodes: list[NodeInfo] | None = None) -> dict[str, NodeInfo]:
        """Broker name -> the node clients should use: its live master, or
        when the master is gone its live slave with the lowest id."""
        out: dict[str, NodeInfo] = {}
        for node in nodes if nodes is not None else self.nodes():
            current = out.get(node.name)
            if current is None or _preference(node) < _preference(current):
                out[node.name] = node
        return out

    def route(
        self, topic: str, nodes: list[NodeInfo] | None = None
    ) -> list[RouteEntry]:
        """The cluster's queues of ``topic``: every serving node that has it.
        A slave serving for a dead master is read-only."""
        out = []
        for node in self.serving(nodes).values():
            queues = node.topics.get(topic)
            if queues is None:
                continue
            for qid in range(max(queues.read, queues.write)):
                perm = 0
                if qid < queues.read and queues.perm & PERM_READ:
                    perm |= PERM_READ
                if qid < queues.write and queues.perm & PERM_WRITE and node.is_master:
                    perm |= PERM_WRITE
                if perm:
                    out.append(RouteEntry(node, qid, perm))
        # Nodes interleaved (a0, b0, a1, b1, ...): the official producers
        # retry a failed send on the next queue of the route, which is then on
        # another node, so a send to a dead master succeeds on its second try
        # instead of trying that master's next queue until the route changes.
        out.sort(key=lambda e: (e.queue_id, e.node.name))
        return out

    def find(self, name: str, broker_id: int | None = None) -> NodeInfo | None:
        """A live node by broker name (its serving node) or name and id."""
        nodes = self.nodes()
        if broker_id is None:
            return self.serving(nodes).get(name)
        return next(
            (n for n in nodes if n.name == name and n.broker_id == broker_id), None
        )

    def subscribe(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Call ``on_change(member)`` for every announced change, on a thread
        of its own; return a function that stops it."""
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)

        def handler(message: dict) -> None:
            data = message.get("data")
            on_change(data.decode() if isinstance(data, bytes) else str(data))

        pubsub.subscribe(**{f"{self.prefix}:events": handler})

        def failed(exc: BaseException, pubsub_: Any, thread_: Any) -> None:
            # Redis away: say so once, keep trying (routes are then re-read
            # every ROUTE_TTL_S by the nodes anyway).
            log.warning("registry events unavailable: %s", exc)
            time.sleep(1.0)
            try:
                pubsub_.subscribe(**{f"{self.prefix}:events": handler})
            except Exception:  # noqa: BLE001 - still away: next round
                pass

        thread = pubsub.run_in_thread(
            sleep_time=0.5, daemon=True, exception_handler=failed
        )

        def stop() -> None:
            thread.stop()
            thread.join(timeout=2)
            pubsub.close()

        return stop


def _preference(node: NodeInfo) -> tuple[int, int]:
    return (0 if node.is_master else 1, node.broker_id)


def _shape(node: NodeInfo) -> tuple:
    """What routes depend on (not the heartbeat time or log positions)."""
    return (
        node.role,
        node.broker_id,
        tuple(node.endpoints),
        tuple(sorted((t, q.read, q.write, q.perm) for t, q in node.topics.items())),
    )


class Heartbeat:
    """Register a node every ``interval`` seconds on a daemon thread.

    ``describe()`` returns the node's current ``NodeInfo`` (topics and role
    read afresh each time). A failed registration (Redis away) is logged and
    retried at the next beat: the node keeps serving its own clients.
    """

    def __init__(
        self,
        registry: RouteRegistry,
        describe: Callable[[], NodeInfo],
        interval: float | None = None,
        allow: Callable[[], bool] | None = None,
    ) -> None:
        self.registry = registry
        self.describe = describe
        #: asked before each registration: False skips it (a fenced master)
        self.allow = allow
        self.interval = interval or max(0.2, registry.expiry_s / 3)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="cluster-heartbeat", daemon=True
        )
        self.last_error: str | None = None

    def start(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> bool:
        try:
            if self.allow is not None and not self.allow():
                return False
            changed = self.registry.register(self.describe())
        except Exception as exc:  # noqa: BLE001 - Redis away: retry next beat
            if self.last_error is None:
                log.warning("cluster registration failed: %s", exc)
            self.last_error = str(exc)
            return False
        if self.last_error is not None:
            log.info("cluster registration works again")
        self.last_error = None
        return changed

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def stop(self, unregister: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if unregister:
            node = self.describe()
            try:
                self.registry.unregister(node.name, node.broker_id)
            except Exception as exc:  # noqa: BLE001
                log.warning("cluster unregistration failed: %s", exc)
