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
