"""What the endpoint knows of a connected client (``clients.json`` for the console)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ClientInfo:
    client_id: str
    client_type: str = "CLIENT_TYPE_UNSPECIFIED"
    group: str = ""
    topics: list[str] = field(default_factory=list)
    address: str = ""
    language: str = ""
    version: str = ""
    connected_at: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    online: bool = True
    queue: asyncio.Queue[Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_type": self.client_type,
            "group": self.group,
            "topics": self.topics,
            "address": self.address,
            "language": self.language,
            "version": self.version,
            "connected_at": self.connected_at,
            "last_heartbeat": self.last_heartbeat,
            "online": self.online,
            "telemetry": self.queue is not None,
        }


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``clients.json`` from the workers' own lists (``serve --workers``):
    a client seen by several workers (it reconnected) is taken from the one
    where it is online, else where it was heard from last; counters are
    summed; the pop statistics (the same store-wide state in every worker) are
    the newest snapshot's."""
    clients: dict[str, dict[str, Any]] = {}
    counters: dict[str, int] = {}
    newest: dict[str, Any] = {}
    for snap in snapshots:
        if snap.get("updated_at", 0) >= newest.get("updated_at", 0):
            newest = snap
        for k, v in snap.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + v
        for c in snap.get("clients", []):
            seen = clients.get(c["client_id"])
            rank = (bool(c.get("online")), c.get("last_heartbeat", 0))
            if seen is None or rank > (
                bool(seen.get("online")),
                seen.get("last_heartbeat", 0),
            ):
                clients[c["client_id"]] = c
    return {
        "updated_at": newest.get("updated_at"),
        "endpoint": newest.get("endpoint"),
        "workers": sorted(
            ({"worker": s.get("worker"), "pid": s.get("pid")} for s in snapshots),
            key=lambda w: w["worker"] if w["worker"] is not None else -1,
        ),
        "clients": list(clients.values()),
        "consumers": newest.get("consumers", {}),
        "counters": counters,
    }


class ClientTable(dict[str, ClientInfo]):
    """The clients this endpoint knows, by client id (the event loop's: other
    threads copy it in one call, ``list(table.values())``), and ``dirty``:
    whether it changed since ``clients.json`` was last written."""

    def __init__(self) -> None:
        super().__init__()
        self.dirty = True

    def touch(self, context: Any) -> ClientInfo:
        """The calling client (by its ``x-mq-client-id``, else its peer),
        added when new, heard from now."""
        from broker_core.endpoint.wire import client_id_of

        cid = client_id_of(context) or context.peer()
        c = self.get(cid)
        if c is None:
            c = self[cid] = ClientInfo(cid, address=context.peer())
            self.dirty = True
        c.last_heartbeat = time.time()
        c.online = True
        return c

    def forget(self, now: float, after_s: float) -> int:
        """Drop the clients offline and not heard from for ``after_s``: a
        long-running endpoint whose clients come and go (killed, redeployed,
        a new id each run) does not keep them all. How many went."""
        gone = [
            cid
            for cid, c in self.items()
            if not c.online and c.queue is None and now - c.last_heartbeat > after_s
        ]
        for cid in gone:
            del self[cid]
        if gone:
            self.dirty = True
        return len(gone)
