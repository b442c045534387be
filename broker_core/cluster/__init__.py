"""Several broker nodes as one cluster: the route registry (``registry``)."""

from broker_core.cluster.registry import (
    Heartbeat,
    NodeInfo,
    RouteEntry,
    RouteRegistry,
    TopicQueues,
)

__all__ = ["Heartbeat", "NodeInfo", "RouteEntry", "RouteRegistry", "TopicQueues"]
