"""Fixtures for transaction tests: a small store and a service over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _txhelpers import SMALL

from broker_core import Broker
from broker_core.transaction import TransactionService


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def broker(store_dir: Path) -> Iterator[Broker]:
    b = Broker.open(store_dir, **SMALL)
    yield b
    b.close()


@pytest.fixture
def svc(broker: Broker) -> Iterator[TransactionService]:
    """A service whose halves are due at once and may be checked every run."""
    s = TransactionService(broker, transaction_timeout_ms=0, check_interval_ms=0)
    yield s
    s.close()
