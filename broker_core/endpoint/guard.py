"""Whether this node may take a write now, and whether a write it stored
is replicated enough to acknowledge (the endpoint's view of its
``ClusterNode``; alone, every write is taken and acknowledged at once)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.endpoint.wire import C, status

#: why a node that takes no writes refuses one
SLAVE_REFUSES = "this node is a slave: send to a master of the cluster"


class WriteGuard:
    """``node()`` is the endpoint's ``ClusterNode`` (None: not in a cluster),
    asked at each call: a node joins after the endpoint is built."""

    def __init__(self, store: Any, node: Callable[[], Any]) -> None:
        self.store = store
        self._node = node

    @property
    def node(self) -> Any:
        return self._node()

    def writable(self) -> bool:
        """Whether this node takes writes, delivers timers and sends
        check-backs: not a slave, not fenced, and under a controller holding
        its lease (``ClusterNode.may_act``)."""
        node = self._node()
        return node is None or node.may_act

    def replicas_short(self) -> str | None:
        """Why a write must be refused before it is stored: too few copies in
        sync (``ClusterNode.replicas_short``); None: store it."""
        node = self._node()
        return None if node is None else node.replicas_short()

    def refusal(self) -> pb.Status | None:
        """The status a write is answered with before anything is stored:
        FORBIDDEN on a node that takes no writes, HA_NOT_AVAILABLE short of
        in-sync copies; None: store it."""
        if not self.writable():
            return status(C.FORBIDDEN, SLAVE_REFUSES)
        if (short := self.replicas_short()) is not None:
            return status(C.HA_NOT_AVAILABLE, short)
        return None

    def waits_for_replicas(self) -> bool:
        """Whether ``unreplicated`` may wait (this node is a SYNC_MASTER)."""
        node = self._node()
        return node is not None and bool(node.sync)

    async def unreplicated(self) -> str | None:
        """On a SYNC_MASTER, wait until a slave has the whole log as it is now
        (every write this call made, and the original of a deduplicated
        retry); return why not (None: replicated, or not a SYNC_MASTER).

        A SYNC_MASTER without a slave answers at once: nothing is acknowledged
        that only one copy holds (RocketMQ's SLAVE_NOT_AVAILABLE)."""
        node = self._node()
        if node is None or not node.sync:
            return None
        end = self.store.max_physical_offset()
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, node.wait_replicated, end):
            return None
        if node.ha_server is None or not node.ha_server.replication_status():
            return "stored on the master, but this SYNC_MASTER has no slave"
        return (
            "stored on the master but no slave confirmed it in "
            f"{node.cfg.sync_timeout_s:g} s"
        )
