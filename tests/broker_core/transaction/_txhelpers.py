"""Helpers shared by the transaction tests (imported by module name)."""

from __future__ import annotations

from typing import Any

from broker_core import Broker, Message

SMALL: dict[str, Any] = {
    "segment_size": 256 * 1024,
    "cq_units_per_file": 1024,
    "index_slots": 1024,
    "index_entries": 8192,
    "flush_interval_ms": 50,
}


def order(i: int = 0, **kw: Any) -> Message:
    return Message("Orders", f"order-{i}".encode(), tags="paid", keys=f"o-{i}", **kw)


def real_messages(broker: Broker, topic: str = "Orders") -> list[Any]:
    """Every message a consumer of ``topic`` sees, all queues."""
    out = []
    cfg = broker.store.topic_config(topic)
    if cfg is None:
        return out
    for q in range(cfg.queue_nums):
        off = 0
        while True:
            p = broker.pull("probe", topic, q, off, max_messages=256)
            out.extend(p.messages)
            if p.next_offset == off:
                break
            off = p.next_offset
    return out
