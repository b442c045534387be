"""The ``network`` fixture: hosts as network namespaces (``tests/netns.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netns import Network, netns_unavailable, wait_port

__all__ = ["Network", "network", "wait_port"]


@pytest.fixture
def network() -> Iterator[Network]:
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    net = Network()
    try:
        yield net
    finally:
        net.close()
