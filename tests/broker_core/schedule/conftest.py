"""Fixtures for the schedule tests: a small store with a short level string."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Broker, MessageExt
from broker_core.schedule import DelayService

LEVELS = "1s 2s 5s 10s 1m 5m 1h 2d"
LEVELS_MS = [1000, 2000, 5000, 10_000, 60_000, 300_000, 3_600_000, 172_800_000]
STORE: dict[str, Any] = {
    "segment_size": 256 * 1024,
    "cq_units_per_file": 1024,
    "index_slots": 4096,
    "index_entries": 32768,
    "flush_interval_ms": 50,
    "message_delay_level": LEVELS,
}


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def broker(store_dir: Path) -> Iterator[Broker]:
    b = Broker.open(store_dir, **STORE)
    yield b
    b.close()


@pytest.fixture
def svc(broker: Broker) -> Iterator[DelayService]:
    s = DelayService(broker)
    yield s
    s.close()


@pytest.fixture
def drain() -> Any:
    """Return a function reading every message of a topic."""
    return _drain


def _drain(broker: Broker, topic: str) -> list[MessageExt]:
    """Return every message of ``topic`` (all queues), in queue order."""
    out: list[MessageExt] = []
    cfg = broker.store.topic_config(topic)
    if cfg is None:
        return out
    for q in range(cfg.queue_nums):
        off = 0
        while True:
            r = broker.pull("drain", topic, q, off, 256)
            out.extend(r.messages)
            if r.next_offset == off:
                break
            off = r.next_offset
    return out
