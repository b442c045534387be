"""The clients an endpoint has seen, as operators read them.

The endpoint keeps a record per client (``ClientInfo.as_json``: type, group,
topics, address, heartbeat in seconds) and writes them to
``<store>/clients.json``; the console reads that file, a node's admin API
(the ``clients`` operation) its endpoint's table. Both shape and filter the
records here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def client_rows(
    clients: Iterable[Mapping[str, Any]], group: str | None = None
) -> list[dict[str, Any]]:
    """Return copies of the client records with ``last_heartbeat_ms``, only
    those of ``group`` if given.

    RocketMQ 5 producers send no group, so a client counts for a group named
    like one of its topics too (the endpoint's producer group for their
    transactions).
    """
    out = []
    for c in clients:
        if not isinstance(c, Mapping):
            continue
        if group is not None and not (
            c.get("group") == group or group in (c.get("topics") or [])
        ):
            continue
        row = dict(c)
        # The endpoint stores seconds; pages render millisecond timestamps.
        row["last_heartbeat_ms"] = int((c.get("last_heartbeat") or 0) * 1000)
        out.append(row)
    return out
