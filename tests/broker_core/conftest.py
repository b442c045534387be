"""Fixtures for broker_core tests: small segments exercise rolling and recovery."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Broker

SMALL: dict[str, Any] = {
    "segment_size": 64 * 1024,
    "cq_units_per_file": 256,
    "index_slots": 1024,
    "index_entries": 8192,
    "flush_interval_ms": 50,
}


@pytest.fixture
def small() -> dict[str, Any]:
    """Store settings with small segments, queues and index files."""
    return dict(SMALL)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def broker(store_dir: Path) -> Iterator[Broker]:
    b = Broker.open(store_dir, **SMALL)
    yield b
    b.close()
